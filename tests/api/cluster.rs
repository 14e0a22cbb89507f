//! Helpers of the replica tests ([`crate::replicas`]): three real
//! `quest serve` processes on one PostgreSQL database ([`Cluster`]), agents
//! that work over plain HTTP and log what they were given, pollers of the
//! status, and bounded waits that fail saying what did not happen.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::assert_sums;
use crate::postgres::TestDatabase;
use crate::server::{ADMIN, Server, call};

/// One cluster at a time: three servers each (and their pools) are what the
/// machine and the database's `max_connections` can take.
pub(crate) static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The status counts every replica must agree on.
const COUNTS: [&str; 10] = [
    "total",
    "remaining",
    "open",
    "leased",
    "checking",
    "verifying",
    "pass",
    "review",
    "done",
    "submissions",
];

/// Three replicas on `db`, each with a data dir of its own.
pub(crate) struct Cluster {
    pub(crate) replicas: Vec<Server>,
    pub(crate) client: reqwest::Client,
    /// The replicas' data dirs, removed with the cluster.
    _dirs: Vec<TempDir>,
}

impl Cluster {
    /// Three replicas running background work, with `config` (if any).
    pub(crate) async fn start(db: &TestDatabase, config: Option<&Path>) -> Cluster {
        Cluster::start_each(db, [(config, true); 3]).await
    }

    /// One replica per entry: its configuration file, and whether it runs
    /// background work.
    pub(crate) async fn start_each(
        db: &TestDatabase,
        replicas: [(Option<&Path>, bool); 3],
    ) -> Cluster {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        let dirs: Vec<TempDir> = replicas
            .iter()
            .map(|_| tempfile::tempdir().unwrap())
            .collect();
        // Started together, so that their migrations race (the advisory lock
        // makes them run once).
        let starts = replicas.iter().zip(&dirs).map(|((config, runs), dir)| {
            let env = [
                ("QUEST_DATABASE_URL", db.url.as_str()),
                ("QUEST_DATABASE_POOL_SIZE", "8"),
                ("QUEST_SWEEP_SECONDS", "1"),
                ("QUEST_GATE_WORKERS", "4"),
                ("QUEST_WORKERS", if *runs { "true" } else { "false" }),
            ];
            async move { Server::start_with_env(dir.path(), *config, &env).await }
        });
        let replicas = futures_util::future::join_all(starts).await;
        Cluster {
            replicas,
            client,
            _dirs: dirs,
        }
    }

    pub(crate) fn base(&self, replica: usize) -> String {
        self.replicas[replica].base.clone()
    }

    pub(crate) async fn create_session(
        &self,
        replica: usize,
        config: Value,
        items: Value,
    ) -> String {
        let (status, body) = call(
            &self.client,
            &self.replicas[replica].base,
            "/v1/sessions",
            json!({"config": config, "items": items}),
        )
        .await
        .expect("the replica answers");
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }
}

pub(crate) async fn get(client: &reqwest::Client, base: &str, path: &str) -> Option<Value> {
    let r = client
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// `what` must happen within `limit`; else the test fails saying so.
pub(crate) async fn within<T>(what: &str, limit: Duration, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {limit:?}"))
}

/// Polls the status on `base` until `stop`: the counts always add up and
/// `remaining` never rises. Returns how many answers it checked.
pub(crate) fn watch_status(
    client: reqwest::Client,
    base: String,
    session: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let (mut last, mut seen) = (u64::MAX, 0);
        while !stop.load(Ordering::Relaxed) {
            // A replica killed under the poller answers nothing more.
            if let Some(status) =
                get(&client, &base, &format!("/v1/sessions/{session}/status")).await
            {
                assert_sums(&status);
                let remaining = status["remaining"].as_u64().unwrap();
                assert!(
                    remaining <= last,
                    "remaining rose from {last} to {remaining} on {base}: {status}"
                );
                (last, seen) = (remaining, seen + 1);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        seen
    })
}

/// The counts of the session's status on every live replica in `replicas`,
/// asserting that they agree.
pub(crate) async fn agreed_status(cluster: &Cluster, replicas: &[usize], session: &str) -> Value {
    let mut first: Option<(usize, Value)> = None;
    for &r in replicas {
        let status = get(
            &cluster.client,
            &cluster.base(r),
            &format!("/v1/sessions/{session}/status"),
        )
        .await
        .unwrap_or_else(|| panic!("replica {r} answers the status"));
        assert_sums(&status);
        let counts: Value = COUNTS
            .iter()
            .map(|k| (k.to_string(), status[k].clone()))
            .collect();
        match &first {
            None => first = Some((r, counts)),
            Some((f, expected)) => assert_eq!(
                &counts, expected,
                "replica {r} and replica {f} answer different counts"
            ),
        }
    }
    first.expect("a replica").1
}

/// What an agent saw: every lease it was given and every submission acknowledged.
#[derive(Default)]
pub(crate) struct Log {
    /// `(quest, key, lease, agent)` of every assignment.
    pub(crate) leases: Vec<(String, String, String, String)>,
    /// `(submission, verdict)` of every submission answered 200 or 202.
    pub(crate) acknowledged: Vec<(String, String)>,
}

/// When an agent stops working, for good: after `after` quests, holding its
/// next lease (or, with `submit`, once its next result is acknowledged
/// PENDING), counting itself in `parked`.
pub(crate) struct Park {
    pub(crate) after: usize,
    pub(crate) submit: bool,
    pub(crate) parked: Arc<AtomicUsize>,
}

/// An agent working on replica `base` until the session is finished (or its
/// replica stops answering). Its result email names the lease it worked
/// under; the first result for a quest whose key ends in 0 or 5 is refused
/// first (`bad`) when `fail_first`. `wait` is the submit's `?wait=`.
#[expect(
    clippy::too_many_arguments,
    reason = "a test agent's whole setup, spelled out at each call"
)]
pub(crate) async fn agent(
    client: reqwest::Client,
    base: String,
    session: String,
    name: String,
    wait: u32,
    fail_first: bool,
    park: Option<Park>,
    log: Arc<Mutex<Log>>,
) {
    let (mut done, mut last) = (0usize, false);
    // The lease last worked under, and its tries when its check answered PENDING.
    let (mut held, mut checking): (Option<String>, Option<u64>) = (None, None);
    loop {
        let Some((status, next)) = call(
            &client,
            &base,
            &format!("/v1/sessions/{session}/next"),
            json!({"agent": name}),
        )
        .await
        else {
            return;
        };
        assert_eq!(status, 200, "{next}");
        match next["status"].as_str() {
            Some("assigned") => {}
            Some("wait") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Some("finished") => return,
            _ => panic!("an unexpected answer to next: {next}"),
        }
        let quest = next["quest"]["id"].as_str().unwrap().to_owned();
        let key = next["quest"]["key"].as_str().unwrap().to_owned();
        let mut lease = next["lease"]["id"].as_str().unwrap().to_owned();
        let tries = next["quest"]["tries"].as_u64().unwrap();
        // A quest being checked stays the agent's: `next` gives it back (with
        // one more try once a FAIL is decided) until it is done.
        let fresh = held.as_deref() != Some(lease.as_str());
        if !fresh && checking == Some(tries) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        (held, checking) = (Some(lease.clone()), None);
        if fresh {
            log.lock().unwrap().leases.push((
                quest.clone(),
                key.clone(),
                lease.clone(),
                name.clone(),
            ));
            last = park.as_ref().is_some_and(|p| done >= p.after);
            if let Some(park) = &park
                && last
                && !park.submit
            {
                // Holds the lease, heartbeating through its replica, and never
                // submits: once the replica dies, the lease lapses.
                park.parked.fetch_add(1, Ordering::SeqCst);
                let heartbeat = format!("/v1/quests/{quest}/heartbeat");
                while let Some((200, _)) =
                    call(&client, &base, &heartbeat, json!({"lease_id": lease})).await
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                std::future::pending::<()>().await;
            }
            done += 1;
        }
        let refuse_first = fail_first && tries == 0 && (key.ends_with('0') || key.ends_with('5'));
        let mut results = Vec::new();
        if last {
            // A check held up by the gate (see [`slow_gate`]): still running
            // when the replica dies.
            results.push(json!({"email": format!("{lease}@slow.test")}));
        } else {
            if refuse_first {
                results.push(json!({"email": "bad"}));
            }
            results.push(Value::Null);
        }
        for result in results {
            let result = if result.is_null() {
                json!({"email": format!("{lease}@agents.test")})
            } else {
                result
            };
            let Some((status, answer)) = call(
                &client,
                &base,
                &format!("/v1/quests/{quest}/submit?wait={wait}"),
                json!({"lease_id": lease, "result": result}),
            )
            .await
            else {
                return;
            };
            if status != 200 && status != 202 {
                // Refused (the lease lapsed while the agent thought): the next one.
                break;
            }
            let verdict = answer["verdict"].as_str().unwrap().to_owned();
            log.lock().unwrap().acknowledged.push((
                answer["submission_id"].as_str().unwrap().to_owned(),
                verdict.clone(),
            ));
            if let Some(park) = &park
                && last
            {
                // Its check runs on; the agent dies with its replica.
                park.parked.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            match verdict.as_str() {
                // A FAIL keeps the lease (renewed) for the next try.
                "FAIL" => lease = answer["lease"]["id"].as_str().unwrap_or(&lease).to_owned(),
                "PENDING" => {
                    checking = Some(tries);
                    break;
                }
                _ => break,
            }
        }
    }
}

pub(crate) fn spawn_agents(
    cluster: &Cluster,
    replicas: &[usize],
    session: &str,
    count: usize,
    wait: u32,
    fail_first: bool,
    log: &Arc<Mutex<Log>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let replica = replicas[i % replicas.len()];
            tokio::spawn(agent(
                cluster.client.clone(),
                cluster.base(replica),
                session.to_owned(),
                format!("r{replica}-a{i}"),
                wait,
                fail_first,
                None,
                log.clone(),
            ))
        })
        .collect()
}

/// The JSONL export's rows by key.
pub(crate) async fn export_rows(
    cluster: &Cluster,
    replica: usize,
    session: &str,
) -> HashMap<String, Value> {
    let text = cluster
        .client
        .get(format!(
            "{}/v1/sessions/{session}/export?format=jsonl",
            cluster.base(replica)
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            (row["company"].as_str().unwrap().to_owned(), row)
        })
        .collect()
}

/// A command gate `check` in `dir` that takes a moment and refuses `bad`;
/// a result at `slow.test` it holds up for as long as the file `dir/hold` exists.
pub(crate) fn slow_gate(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("check.sh"),
        "input=$(cat)\n/bin/sleep 0.2\ncase \"$input\" in\n  *'\"bad\"'*) echo '{\"verdict\": \"FAIL\", \"facts\": \
         [{\"field\": \"/email\", \"expected\": \"an address\", \"actual\": \"bad\", \"hint\": \"send one\"}]}' ;;\n  \
         *slow.test*) while [ -e ./hold ]; do /bin/sleep 0.1; done; echo '{\"verdict\": \"PASS\"}' ;;\n  \
         *) echo '{\"verdict\": \"PASS\"}' ;;\nesac\n",
    )
    .unwrap();
    let toml = dir.join("quest.toml");
    std::fs::write(
        &toml,
        format!(
            "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./check.sh\"]\nworkdir = \"{}\"\ntimeout_ms = 120000\n",
            dir.display()
        ),
    )
    .unwrap();
    toml
}

pub(crate) fn checked_config(lease_seconds: u32) -> Value {
    json!({
        "key_column": "company",
        "max_tries": 3,
        "lease_seconds": lease_seconds,
        "gate": {"kind": "command", "name": "check"}
    })
}
