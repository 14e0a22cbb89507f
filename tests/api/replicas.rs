//! Several real `quest serve` processes on one PostgreSQL database, as in the
//! README's scale-out deployment: agents spread over the replicas never share
//! a lease, a replica killed with `kill -9` loses no acknowledged submission
//! (its leases lapse, its checks are taken over by the survivors), and events
//! and verdicts cross replicas. The processes run on real time (the
//! database's clock), so leases are short and every wait is bounded, failing
//! with what did not happen. Skipped without PostgreSQL (a failure with `CI=true`).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::{assert_sums, companies, contact_config};
use crate::postgres::TestDatabase;
use crate::server::{ADMIN, Server, call};

/// One cluster at a time: three servers each (and their pools) are what the
/// machine and the database's `max_connections` can take.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
struct Cluster {
    replicas: Vec<Server>,
    client: reqwest::Client,
    _dirs: Vec<TempDir>,
}

impl Cluster {
    /// Three replicas running background work, with `config` (if any).
    async fn start(db: &TestDatabase, config: Option<&Path>) -> Cluster {
        Cluster::start_each(db, [(config, true); 3]).await
    }

    /// One replica per entry: its configuration file, and whether it runs
    /// background work.
    async fn start_each(db: &TestDatabase, replicas: [(Option<&Path>, bool); 3]) -> Cluster {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        let mut cluster = Cluster {
            replicas: Vec::new(),
            client,
            _dirs: Vec::new(),
        };
        for (config, runs) in replicas {
            let dir = tempfile::tempdir().unwrap();
            let env = [
                ("QUEST_DATABASE_URL", db.url.as_str()),
                ("QUEST_DATABASE_POOL_SIZE", "8"),
                ("QUEST_SWEEP_SECONDS", "1"),
                ("QUEST_GATE_WORKERS", "2"),
                ("QUEST_WORKERS", if runs { "true" } else { "false" }),
            ];
            cluster
                .replicas
                .push(Server::start_with_env(dir.path(), config, &env).await);
            cluster._dirs.push(dir);
        }
        cluster
    }

    fn base(&self, replica: usize) -> String {
        self.replicas[replica].base.clone()
    }

    async fn create_session(&self, replica: usize, config: Value, items: Value) -> String {
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

async fn get(client: &reqwest::Client, base: &str, path: &str) -> Option<Value> {
    let r = client
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// `what` must happen within `limit`; else the test fails saying so.
async fn within<T>(what: &str, limit: Duration, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {limit:?}"))
}

/// Polls the status on `base` until `stop`: the counts always add up and
/// `remaining` never rises. Returns how many answers it checked.
fn watch_status(
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
async fn agreed_status(cluster: &Cluster, replicas: &[usize], session: &str) -> Value {
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
struct Log {
    /// `(quest, key, lease, agent)` of every assignment.
    leases: Vec<(String, String, String, String)>,
    /// `(submission, verdict)` of every submission answered 200 or 202.
    acknowledged: Vec<(String, String)>,
}

/// When an agent stops working, for good: after `after` quests, holding its
/// next lease (or, with `submit`, once its next result is acknowledged
/// PENDING), counting itself in `parked`.
struct Park {
    after: usize,
    submit: bool,
    parked: Arc<AtomicUsize>,
}

/// An agent working on replica `base` until the session is finished (or its
/// replica stops answering). Its result email names the lease it worked
/// under; the first result for a quest whose key ends in 0 or 5 is refused
/// first (`bad`) when `fail_first`. `wait` is the submit's `?wait=`.
#[expect(
    clippy::too_many_arguments,
    reason = "a test agent's whole setup, spelled out at each call"
)]
async fn agent(
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
                // Holds the lease and never submits: it dies with its replica.
                park.parked.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            done += 1;
        }
        let refuse_first = fail_first && tries == 0 && (key.ends_with('0') || key.ends_with('5'));
        let mut results = Vec::new();
        if last {
            // A check that takes seconds: still running when the replica dies.
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

fn spawn_agents(
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
async fn export_rows(cluster: &Cluster, replica: usize, session: &str) -> HashMap<String, Value> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_and_32_agents_finish_2000_quests_without_a_double_lease() {
    let test = "three_replicas_and_32_agents_finish_2000_quests_without_a_double_lease";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = Cluster::start(&db, None).await;
    let quests = 2000;
    let session = cluster
        .create_session(0, contact_config(3), companies(quests))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let watchers: Vec<_> = (0..3)
        .map(|r| {
            watch_status(
                cluster.client.clone(),
                cluster.base(r),
                session.clone(),
                stop.clone(),
            )
        })
        .collect();

    let log = Arc::new(Mutex::new(Log::default()));
    let agents = spawn_agents(&cluster, &[0, 1, 2], &session, 32, 30, true, &log);
    within(
        "32 agents finishing 2000 quests",
        Duration::from_secs(300),
        async {
            for agent in agents {
                agent.await.unwrap();
            }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for watcher in watchers {
        assert!(
            watcher.await.unwrap() > 0,
            "every replica answered its poller"
        );
    }

    let log = std::mem::take(&mut *log.lock().unwrap());
    // No lapse (the default lease is long) and a FAIL keeps its lease: each
    // quest was leased exactly once, to one agent, whatever replica it asked.
    let mut leased: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
    for (_, key, lease, agent) in &log.leases {
        leased.entry(key).or_default().push((lease, agent));
    }
    let twice: Vec<_> = leased.iter().filter(|(_, l)| l.len() > 1).collect();
    assert!(twice.is_empty(), "quests leased more than once: {twice:?}");
    assert_eq!(leased.len(), quests, "every quest was leased");
    let fails = log.acknowledged.iter().filter(|(_, v)| v == "FAIL").count();
    assert_eq!(fails, quests / 5, "the quests refused first were");

    // The stored data: each quest PASSed with the result of its one lease.
    let rows = export_rows(&cluster, 1, &session).await;
    assert_eq!(rows.len(), quests);
    for (key, leases) in &leased {
        let row = &rows[*key];
        assert_eq!(row["quest_state"], "PASS", "{row}");
        assert_eq!(
            row["result_email"],
            format!("{}@agents.test", leases[0].0),
            "{key} passed under the lease its agent was given: {row}"
        );
    }
    let status = agreed_status(&cluster, &[0, 1, 2], &session).await;
    assert_eq!(
        (status["pass"].as_u64(), status["remaining"].as_u64()),
        (Some(quests as u64), Some(0)),
        "{status}"
    );
    assert_eq!(
        status["submissions"].as_u64(),
        Some((quests + quests / 5) as u64),
        "one submission per acknowledged answer: {status}"
    );
}

/// A command gate `check` that takes a moment and refuses `bad`, in `dir`.
fn slow_gate(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("check.sh"),
        "input=$(cat)\n/bin/sleep 0.2\ncase \"$input\" in\n  *'\"bad\"'*) echo '{\"verdict\": \"FAIL\", \"facts\": \
         [{\"field\": \"/email\", \"expected\": \"an address\", \"actual\": \"bad\", \"hint\": \"send one\"}]}' ;;\n  \
         *slow.test*) /bin/sleep 3; echo '{\"verdict\": \"PASS\"}' ;;\n  \
         *) echo '{\"verdict\": \"PASS\"}' ;;\nesac\n",
    )
    .unwrap();
    let toml = dir.join("quest.toml");
    std::fs::write(
        &toml,
        format!(
            "[gates.check]\nkind = \"command\"\nargv = [\"/bin/sh\", \"./check.sh\"]\nworkdir = \"{}\"\ntimeout_ms = 10000\n",
            dir.display()
        ),
    )
    .unwrap();
    toml
}

fn checked_config(lease_seconds: u32) -> Value {
    json!({
        "key_column": "company",
        "max_tries": 3,
        "lease_seconds": lease_seconds,
        "gate": {"kind": "command", "name": "check"}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_with_kill_9_loses_nothing_its_leases_lapse_and_its_checks_are_taken_over()
{
    let test =
        "a_replica_killed_with_kill_9_loses_nothing_its_leases_lapse_and_its_checks_are_taken_over";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let etc = tempfile::tempdir().unwrap();
    let toml = slow_gate(etc.path());
    let mut cluster = Cluster::start(&db, Some(&toml)).await;
    let quests = 300;
    let session = cluster
        .create_session(0, checked_config(3), companies(quests))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let watchers: Vec<_> = (0..2)
        .map(|r| {
            watch_status(
                cluster.client.clone(),
                cluster.base(r),
                session.clone(),
                stop.clone(),
            )
        })
        .collect();

    // Replica 2's agents submit without waiting (202 PENDING), then each
    // takes a lease it never submits, and dies with its replica.
    let (survivors_log, victims_log) = (
        Arc::new(Mutex::new(Log::default())),
        Arc::new(Mutex::new(Log::default())),
    );
    let parked = Arc::new(AtomicUsize::new(0));
    let victims: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(agent(
                cluster.client.clone(),
                cluster.base(2),
                session.clone(),
                format!("r2-a{i}"),
                0,
                true,
                Some(Park {
                    after: 3,
                    submit: i % 2 == 0,
                    parked: parked.clone(),
                }),
                victims_log.clone(),
            ))
        })
        .collect();
    let survivors = spawn_agents(&cluster, &[0, 1], &session, 24, 0, true, &survivors_log);
    within(
        "every agent of replica 2 holding a lease it will not submit",
        Duration::from_secs(120),
        async {
            while parked.load(Ordering::SeqCst) < victims.len() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    cluster.replicas[2].kill().await;
    for victim in &victims {
        victim.abort();
    }

    // What replica 2 acknowledged but had not decided when it died.
    let victims_log = std::mem::take(&mut *victims_log.lock().unwrap());
    let mut undecided = Vec::new();
    for (id, _) in &victims_log.acknowledged {
        let stored = get(
            &cluster.client,
            &cluster.base(0),
            &format!("/v1/submissions/{id}"),
        )
        .await
        .unwrap();
        assert_eq!(
            stored["id"],
            id.as_str(),
            "acknowledged submission {id} is stored"
        );
        if stored["verdict"] == "PENDING" {
            undecided.push(id.clone());
        }
    }
    assert!(
        !undecided.is_empty(),
        "some submissions of replica 2 were still being checked when it died: {:?}",
        victims_log.acknowledged
    );

    within(
        "the survivors' agents finishing the session",
        Duration::from_secs(240),
        async {
            for agent in survivors {
                agent.await.unwrap();
            }
        },
    )
    .await;
    // `finished` means nothing remains, checks included.
    let status = agreed_status(&cluster, &[0, 1], &session).await;
    assert_eq!(status["remaining"], 0, "{status}");
    stop.store(true, Ordering::Relaxed);
    for watcher in watchers {
        watcher.await.unwrap();
    }
    assert_eq!(status["pass"].as_u64(), Some(quests as u64), "{status}");

    // Every acknowledged submission, on either side of the kill, is in the
    // data and decided; a verdict answered at once never changed.
    let survivors_log = std::mem::take(&mut *survivors_log.lock().unwrap());
    for (id, verdict) in victims_log
        .acknowledged
        .iter()
        .chain(&survivors_log.acknowledged)
    {
        let stored = get(
            &cluster.client,
            &cluster.base(1),
            &format!("/v1/submissions/{id}"),
        )
        .await
        .unwrap();
        assert_eq!(
            stored["id"],
            id.as_str(),
            "acknowledged submission {id} survived"
        );
        assert_ne!(stored["verdict"], "PENDING", "{stored}");
        if verdict != "PENDING" {
            assert_eq!(
                &stored["verdict"], verdict,
                "a recorded verdict never changes"
            );
        }
    }
    // The leases replica 2's agents died holding lapsed, and agents of the
    // survivors finished those quests under leases of their own.
    let held_at_kill: Vec<_> = (1..victims.len())
        .step_by(2)
        .map(|i| {
            let agent = format!("r2-a{i}");
            victims_log
                .leases
                .iter()
                .rev()
                .find(|l| l.3 == agent)
                .expect("the agent's last lease")
        })
        .collect();
    assert!(!held_at_kill.is_empty());
    for (quest, key, lease, _) in held_at_kill {
        let view = get(
            &cluster.client,
            &cluster.base(0),
            &format!("/v1/quests/{quest}"),
        )
        .await
        .unwrap();
        assert_eq!(view["state"], "PASS", "{view}");
        let taken_over = survivors_log
            .leases
            .iter()
            .any(|(q, _, l, _)| q == quest && l != lease);
        assert!(
            taken_over,
            "quest {key} was leased again by a survivor's agent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_and_verdicts_cross_replicas_and_api_only_replicas_leave_the_gate_to_a_worker() {
    let test =
        "events_and_verdicts_cross_replicas_and_api_only_replicas_leave_the_gate_to_a_worker";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let etc = tempfile::tempdir().unwrap();
    let toml = slow_gate(etc.path());
    // A and B serve the API only, without even the gate's program declared;
    // only C runs the gate.
    let cluster =
        Cluster::start_each(&db, [(None, false), (None, false), (Some(&toml), true)]).await;
    let (a, b) = (cluster.base(0), cluster.base(1));
    let client = cluster.client.clone();
    let session = cluster
        .create_session(2, checked_config(60), companies(2))
        .await;

    let mut events = client
        .get(format!("{a}/v1/sessions/{session}/events"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);

    // Submitted on B, without waiting: PENDING until C decides.
    let (_, next) = call(
        &client,
        &b,
        &format!("/v1/sessions/{session}/next"),
        json!({"agent": "b"}),
    )
    .await
    .unwrap();
    let (quest, lease) = crate::helpers::assigned(&next);
    let (status, pending) = call(
        &client,
        &b,
        &format!("/v1/quests/{quest}/submit?wait=0"),
        json!({"lease_id": lease, "result": {"email": "b@agents.test"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        (status, pending["verdict"].as_str()),
        (202, Some("PENDING")),
        "{pending}"
    );
    let submission = pending["submission_id"].as_str().unwrap().to_owned();
    let seen = within(
        "A's event stream showing B's submission decided",
        Duration::from_secs(60),
        async {
            let mut seen = String::new();
            loop {
                let chunk = events
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream stays open");
                seen.push_str(&String::from_utf8_lossy(&chunk));
                let decided = seen
                    .split("\n\n")
                    .any(|e| e.contains("event: decided") && e.contains(&submission));
                if decided {
                    return seen;
                }
            }
        },
    )
    .await;
    assert!(
        seen.split("\n\n")
            .any(|e| e.contains("event: submitted") && e.contains(&submission)),
        "A's stream shows the submission made on B: {seen}"
    );
    assert!(seen.contains("\"verdict\":\"PASS\""), "{seen}");

    // Submitted on A, waiting: A answers the verdicts C's gate decides, a
    // FAIL (the lease kept) and then a PASS.
    let (_, next) = call(
        &client,
        &a,
        &format!("/v1/sessions/{session}/next"),
        json!({"agent": "a"}),
    )
    .await
    .unwrap();
    let (quest, lease) = crate::helpers::assigned(&next);
    let (status, fail) = call(
        &client,
        &a,
        &format!("/v1/quests/{quest}/submit?wait=60"),
        json!({"lease_id": lease, "result": {"email": "bad"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        (status, fail["verdict"].as_str()),
        (200, Some("FAIL")),
        "{fail}"
    );
    assert_eq!(
        fail["facts"][0]["hint"], "send one",
        "C's gate decided it: {fail}"
    );
    let (status, pass) = call(
        &client,
        &a,
        &format!("/v1/quests/{quest}/submit?wait=60"),
        json!({"lease_id": lease, "result": {"email": "a@agents.test"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        (status, pass["verdict"].as_str()),
        (200, Some("PASS")),
        "{pass}"
    );
    let status = agreed_status(&cluster, &[0, 1, 2], &session).await;
    assert_eq!(
        (status["pass"].as_u64(), status["remaining"].as_u64()),
        (Some(2), Some(0)),
        "{status}"
    );
}
