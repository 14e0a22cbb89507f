//! Several real `quest serve` processes on one PostgreSQL database, as in the
//! README's scale-out deployment: agents spread over the replicas never share
//! a lease, a replica killed with `kill -9` loses no acknowledged submission
//! (its leases lapse, its checks are taken over by the survivors), and events
//! and verdicts cross replicas. The processes run on real time (the
//! database's clock), so leases are short and every wait is bounded, failing
//! with what did not happen. Skipped without PostgreSQL (a failure with `CI=true`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sqlx::Connection;

use crate::cluster::*;
use crate::helpers::{companies, contact_config};
use crate::postgres::TestDatabase;
use crate::server::{ADMIN, call};

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
    // The last results of half of replica 2's agents are held up in the gate
    // until after the kill.
    let hold = etc.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let mut cluster = Cluster::start(&db, Some(&toml)).await;
    let quests = 300;
    let session = cluster
        .create_session(0, checked_config(5), companies(quests))
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
        undecided.len() >= victims.len() / 2,
        "the held-up submissions of replica 2 were still being checked when it died: {:?}",
        victims_log.acknowledged
    );
    std::fs::remove_file(&hold).unwrap();

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
        assert!(
            watcher.await.unwrap() > 0,
            "every surviving replica answered its poller"
        );
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
    // No quest was held under two leases at once: in the database, each
    // lease of a quest begins after the one before it ended (or expired,
    // for a lapse), and every quest passed under a lease an agent was given
    // for it.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let leases: Vec<(
        uuid::Uuid,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    )> = sqlx::query_as(
        "SELECT quest_id, granted_at, LEAST(COALESCE(ended_at, expires_at), expires_at)
             FROM leases ORDER BY quest_id, granted_at",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for pair in leases.windows(2) {
        let ((quest, _, ended), (next_quest, granted, _)) = (pair[0], pair[1]);
        assert!(
            quest != next_quest || granted >= ended,
            "quest {quest} was leased again at {granted} while a lease held it until {ended}"
        );
    }
    let given: HashMap<&str, &str> = victims_log
        .leases
        .iter()
        .chain(&survivors_log.leases)
        .map(|(_, key, lease, _)| (lease.as_str(), key.as_str()))
        .collect();
    let rows = export_rows(&cluster, 0, &session).await;
    assert_eq!(rows.len(), quests);
    for row in rows.values() {
        // The command gate declares no fields: the result is in `result_extra`.
        let extra: serde_json::Value =
            serde_json::from_str(row["result_extra"].as_str().unwrap()).unwrap();
        let lease = extra["email"].as_str().unwrap().split('@').next().unwrap();
        assert!(
            given.get(lease).is_some_and(|key| row["company"] == *key),
            "{} passed under a lease an agent was given for it: {row}",
            row["company"]
        );
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
