//! Restarts: graceful and `kill -9`. No acknowledged submission is lost, no
//! quest ends in an impossible state, leases are honoured or swept, and
//! submissions that were still being checked are decided after the restart.

use std::sync::Arc;
use std::time::Duration;

use quest::store::{NewSubmission, SubmitOutcome};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::server::{Server, call};

#[tokio::test]
async fn a_graceful_restart_keeps_leases_and_decisions() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    let (q1, l1) = assigned(&app.next(&agent, &session, "a").await);
    let pass = app
        .submit(&agent, &q1, &l1, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    let (q2, l2) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &q2, &l2, json!({"email": "bad"}))
        .await
        .expect(200);

    let app = spawn_app_in(app.stop().await).await;
    let view = app.quest(&q1).await;
    assert_eq!(
        (view["state"].as_str(), view["receipt"].as_str()),
        (Some("PASS"), pass["receipt"].as_str())
    );
    assert_eq!(
        assigned(&app.next(&agent, &session, "a").await),
        (q2.clone(), l2.clone()),
        "the lease is honoured"
    );
    let again = app
        .submit(&agent, &q2, &l2, json!({"email": "c@d.test"}))
        .await
        .expect(200);
    assert_eq!(
        (again["state"].as_str(), again["tries"].as_u64()),
        (Some("PASS"), Some(1))
    );
}

#[tokio::test]
async fn a_submission_still_being_checked_is_decided_after_a_restart() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let dir = app.stop().await;

    // Record a submission the way `submit` does, but with no gate running: as if
    // the server died between the durable write and the verdict.
    let store = open_store_of(dir.path()).await;
    let bot = store
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "bot")
        .unwrap();
    let result = json!({"email": "late@b.test"});
    let recorded = store
        .submit(
            NewSubmission {
                quest_id: quest.parse().unwrap(),
                lease_id: lease.parse().unwrap(),
                token_id: bot.id,
                result_hash: quest::domain::receipt::digest(&result),
                idempotency_key: None,
                result,
            },
            None,
        )
        .await
        .unwrap();
    let SubmitOutcome::Recorded { view: pending, .. } = recorded else {
        panic!("a new submission")
    };
    assert_eq!(
        store.get_quest(quest.parse().unwrap()).await.unwrap().phase,
        Some(quest::domain::Phase::Checking)
    );
    drop(store);

    let app = spawn_app_in(dir).await;
    let verdict = poll_verdict(&app, &pending.submission.id.to_string()).await;
    assert_eq!(verdict["verdict"], "PASS");
    assert_eq!(app.quest(&quest).await["state"], "PASS");
}

async fn poll_verdict(app: &TestApp, submission: &str) -> Value {
    for _ in 0..500 {
        let s = app
            .get(&format!("/v1/submissions/{submission}"), &app.admin)
            .await
            .expect(200);
        if s["verdict"] != "PENDING" {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("submission {submission} was never decided");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_in_the_middle_of_a_run_loses_no_acknowledged_submission() {
    let dir = tempfile::tempdir().unwrap();
    kill_9_loop(dir.path(), None, contact_config(3), false, false).await;
}

/// The same with a gate that runs a process: submissions are PENDING until it
/// decides, some answered at once (`?wait=0`), and those still PENDING at the
/// crash are decided by the restarted server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_with_a_gate_that_does_io_re_runs_every_pending_submission() {
    let dir = tempfile::tempdir().unwrap();
    let gate = tempfile::tempdir().unwrap();
    std::fs::write(
        gate.path().join("check.sh"),
        "input=$(cat)\n/bin/sleep 0.05\ncase \"$input\" in\n  *'\"bad\"'*) echo '{\"verdict\": \"FAIL\", \"facts\": \
         [{\"field\": \"/email\", \"expected\": \"an address\", \"actual\": \"bad\", \"hint\": \"send one\"}]}' ;;\n  \
         *) echo '{\"verdict\": \"PASS\"}' ;;\nesac\n",
    )
    .unwrap();
    let toml = gate.path().join("quest.toml");
    std::fs::write(
        &toml,
        format!(
            "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./check.sh\"]\nworkdir = \"{}\"\ntimeout_ms = 10000\n",
            gate.path().display()
        ),
    )
    .unwrap();
    let config = json!({"key_column": "company", "max_tries": 3, "gate": {"kind": "command", "name": "check"}});
    kill_9_loop(dir.path(), Some(&toml), config, true, true).await;
}

/// The longest the restarted server may take to decide what was PENDING at
/// the crash (see [`kill_9_loop`]).
const DECIDED_WITHIN: Duration = Duration::from_secs(90);

/// Eight agents work until the server is killed under them; after a restart
/// every acknowledged submission is there, decided, with its verdict unchanged
/// (and, with a `deterministic` gate, the verdict its result calls for).
async fn kill_9_loop(
    dir: &std::path::Path,
    toml: Option<&std::path::Path>,
    config: Value,
    wait0: bool,
    deterministic: bool,
) {
    let mut server = Server::start_with(dir, toml).await;
    let client = reqwest::Client::new();
    let (_, session) = call(
        &client,
        &server.base,
        "/v1/sessions",
        json!({"config": config, "items": companies(200)}),
    )
    .await
    .unwrap();
    let session = session["id"].as_str().unwrap().to_owned();

    // Eight agents work until the server dies under them.
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let mut agents = Vec::new();
    for agent in 0..8 {
        let (client, base, session, acknowledged) = (
            client.clone(),
            server.base.clone(),
            session.clone(),
            acknowledged.clone(),
        );
        agents.push(tokio::spawn(async move {
            let mut n = 0u32;
            loop {
                let Some((200, next)) = call(
                    &client,
                    &base,
                    &format!("/v1/sessions/{session}/next"),
                    json!({"agent": format!("a{agent}")}),
                )
                .await
                else {
                    return;
                };
                if next["status"] != "assigned" {
                    return;
                }
                let (quest, lease) = assigned(&next);
                n += 1;
                let result = if n.is_multiple_of(4) {
                    json!({"email": "bad"})
                } else {
                    json!({"email": format!("x{n}@y.test")})
                };
                let wait = if wait0 && n.is_multiple_of(2) {
                    "?wait=0"
                } else {
                    ""
                };
                let Some((status, answer)) = call(
                    &client,
                    &base,
                    &format!("/v1/quests/{quest}/submit{wait}"),
                    json!({"lease_id": lease, "result": result}),
                )
                .await
                else {
                    return;
                };
                if status == 200 || status == 202 {
                    let id = answer["submission_id"].as_str().unwrap().to_owned();
                    acknowledged
                        .lock()
                        .unwrap()
                        .push((id, answer["verdict"].as_str().unwrap().to_owned()));
                }
            }
        }));
    }
    while acknowledged.lock().unwrap().len() < 60 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill().await;
    for agent in agents {
        agent.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    if wait0 {
        assert!(
            acknowledged.iter().any(|(_, v)| v == "PENDING"),
            "some submissions were acknowledged while their gate still ran"
        );
    }

    let server = Server::start_with(dir, toml).await;
    let app_client = |path: String| {
        let client = client.clone();
        let url = format!("{}{path}", server.base);
        async move {
            client
                .get(url)
                .bearer_auth(crate::server::ADMIN)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    // How long the restarted server may take: not a speed limit (a busy CI
    // machine runs dozens of servers at once) but a bound on "eventually",
    // past a dead server's job claims (PostgreSQL) and the orphan scan.
    let deadline = tokio::time::Instant::now() + DECIDED_WITHIN;
    let log = || std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    for (id, verdict) in &acknowledged {
        let mut stored = app_client(format!("/v1/submissions/{id}")).await;
        while stored["verdict"] == "PENDING" && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stored = app_client(format!("/v1/submissions/{id}")).await;
        }
        assert_eq!(
            stored["id"],
            id.as_str(),
            "acknowledged submission {id} survived"
        );
        assert_ne!(
            stored["verdict"],
            "PENDING",
            "a submission being checked at the crash ({id}) is decided after it; the restarted server logged:\n{}",
            log()
        );
        if verdict != "PENDING" {
            assert_eq!(
                &stored["verdict"], verdict,
                "a recorded verdict never changes"
            );
        }
        if deterministic {
            // The gate decides by the result alone: a re-run decides what the
            // first run would have, never a REVIEW for a crash or a timeout.
            let expected = if stored["result"]["email"] == "bad" {
                "FAIL"
            } else {
                "PASS"
            };
            assert_eq!(
                stored["verdict"],
                expected,
                "submission {id} re-run after the crash: {stored}; the restarted server logged:\n{}",
                log()
            );
        }
    }
    // Submissions recorded but never acknowledged (the kill came between the
    // commit and the answer) are re-run too: wait until none is left.
    let mut status = app_client(format!("/v1/sessions/{session}/status")).await;
    while status["checking"] != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = app_client(format!("/v1/sessions/{session}/status")).await;
    }
    assert_sums(&status);
    assert_eq!(status["checking"], 0, "nothing is left mid-check");
    // An identical retry of a PENDING submission is acknowledged again with
    // the same id (a replay): count each submission once.
    let distinct: std::collections::HashSet<&String> =
        acknowledged.iter().map(|(id, _)| id).collect();
    assert!(
        status["submissions"].as_u64().unwrap() as usize >= distinct.len(),
        "{status} {acknowledged:?}"
    );
}
