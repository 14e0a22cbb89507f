//! Idempotency keys and the longest hold (issue 18, point 1) over HTTP, on
//! whichever backend the suite runs: a keyed retry costs nothing, a key is
//! one submit of one token, and a lease cannot be renewed past
//! `max_hold_seconds`.

use std::time::Duration;

use reqwest::header::HeaderValue;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

/// A submit with an `Idempotency-Key` header of these bytes.
pub(crate) async fn keyed(
    app: &TestApp,
    token: &str,
    quest: &str,
    lease: &str,
    result: Value,
    key: &[u8],
    wait: u32,
) -> Answer {
    let response = app
        .client
        .post(format!("{}/v1/quests/{quest}/submit?wait={wait}", app.base))
        .bearer_auth(token)
        .header("Idempotency-Key", HeaderValue::from_bytes(key).unwrap())
        .json(&json!({"lease_id": lease, "result": result}))
        .send()
        .await
        .expect("the server answers");
    Answer::read(response).await
}

fn count(view: &Value) -> usize {
    view["submissions"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_keyed_retry_costs_no_try_and_a_reused_key_with_another_body_is_422() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let other = app.token("agent", "other").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let bad = json!({"email": "no-at-sign"});

    let first = keyed(&app, &agent, &quest, &lease, bad.clone(), b"k-1", 30)
        .await
        .expect(200);
    assert_eq!(
        (first["verdict"].as_str(), first["tries"].as_u64()),
        (Some("FAIL"), Some(1))
    );
    let retry = keyed(&app, &agent, &quest, &lease, bad.clone(), b"k-1", 30)
        .await
        .expect(200);
    assert_eq!(retry["submission_id"], first["submission_id"]);
    assert_eq!(retry["tries"], 1, "a keyed retry costs no try");
    assert_eq!(retry["replayed"], true);
    assert_eq!(
        retry["lease"]["id"], lease,
        "and the lease is still the agent's"
    );

    for (result, why) in [
        (json!({"email": "other-no-at-sign"}), "another result"),
        (json!({"email": "a@b.test"}), "a passing one"),
    ] {
        keyed(&app, &agent, &quest, &lease, result, b"k-1", 30)
            .await
            .refused(422, "idempotency_key_reused");
        let view = app.quest(&quest).await;
        assert_eq!(
            (view["tries"].as_u64(), count(&view)),
            (Some(1), 1),
            "{why} changed nothing"
        );
    }

    let pass = keyed(
        &app,
        &agent,
        &quest,
        &lease,
        json!({"email": "a@b.test"}),
        b"k-2",
        30,
    )
    .await
    .expect(200);
    assert_eq!(pass["state"], "PASS");
    let late = keyed(
        &app,
        &agent,
        &quest,
        &lease,
        json!({"email": "a@b.test"}),
        b"k-2",
        30,
    )
    .await
    .expect(200);
    assert_eq!(
        (
            late["submission_id"].clone(),
            late["verdict"].as_str(),
            late["replayed"].as_bool()
        ),
        (pass["submission_id"].clone(), Some("PASS"), Some(true)),
        "answered after the lease ended"
    );
    assert_eq!(count(&app.quest(&quest).await), 2);

    // The same key under another token is that token's own.
    let (second, lease2) = assigned(&app.next(&other, &session, "b").await);
    let theirs = keyed(&app, &other, &second, &lease2, bad, b"k-1", 30)
        .await
        .expect(200);
    assert_eq!(
        (theirs["replayed"].as_bool(), theirs["tries"].as_u64()),
        (Some(false), Some(1))
    );
    assert_ne!(theirs["submission_id"], first["submission_id"]);
}

#[tokio::test]
async fn an_agent_that_repeats_a_failed_result_ends_its_quest_in_done() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(
            app.submit(&agent, &quest, &lease, json!({"email": "no-at-sign"}))
                .await
                .expect(200),
        );
    }
    let tries: Vec<_> = answers.iter().map(|a| a["tries"].as_u64()).collect();
    assert_eq!(tries, [Some(1), Some(2), Some(3)]);
    assert_eq!(
        answers[2]["state"], "DONE",
        "max_tries ends it as for any FAIL"
    );
    let done = app
        .submit(&agent, &quest, &lease, json!({"email": "no-at-sign"}))
        .await
        .expect(200);
    assert_eq!(
        (done["submission_id"].clone(), done["state"].as_str()),
        (answers[2]["submission_id"].clone(), Some("DONE")),
        "the result that ended it is answered by its verdict"
    );
    let status = app.status(&session).await;
    assert_eq!(
        (status["done"].as_u64(), status["remaining"].as_u64()),
        (Some(1), Some(0))
    );
}

#[tokio::test]
async fn a_bad_idempotency_key_is_refused_with_400_and_changes_nothing() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let long = vec![b'k'; 256];
    for key in [&b""[..], &long, b"tab\there", "caf\u{e9}".as_bytes()] {
        keyed(
            &app,
            &agent,
            &quest,
            &lease,
            json!({"email": "a@b.test"}),
            key,
            30,
        )
        .await
        .refused(400, "invalid_idempotency_key");
    }
    let twice = app
        .client
        .post(format!("{}/v1/quests/{quest}/submit", app.base))
        .bearer_auth(&agent)
        .header("Idempotency-Key", "one")
        .header("Idempotency-Key", "two")
        .json(&json!({"lease_id": lease, "result": {"email": "a@b.test"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);

    // A NUL cannot even be sent through a client library: by hand.
    let body = json!({"lease_id": lease, "result": {"email": "a@b.test"}}).to_string();
    let address = app.base.trim_start_matches("http://");
    let mut raw = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /v1/quests/{quest}/submit HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {agent}\r\n\
         Content-Type: application/json\r\nIdempotency-Key: a\0b\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    raw.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let view = app.quest(&quest).await;
    assert_eq!((view["tries"].as_u64(), count(&view)), (Some(0), 0));
    assert_eq!(view["phase"], "leased");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_of_a_pending_submission_answers_it_while_it_is_checked_and_after() {
    let (app, _gate) = spawn_app_with_slow_gate().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(slow_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let result = json!({"email": "a@b.test"});
    let pending = keyed(&app, &agent, &quest, &lease, result.clone(), b"mcp-1", 0)
        .await
        .expect(202);
    assert_eq!(pending["verdict"], "PENDING");
    keyed(
        &app,
        &agent,
        &quest,
        &lease,
        json!({"email": "c@d.test"}),
        b"mcp-1",
        0,
    )
    .await
    .refused(422, "idempotency_key_reused");
    let decided = keyed(&app, &agent, &quest, &lease, result, b"mcp-1", 30)
        .await
        .expect(200);
    assert_eq!(decided["submission_id"], pending["submission_id"]);
    assert_eq!(
        (decided["verdict"].as_str(), decided["state"].as_str()),
        (Some("PASS"), Some("PASS"))
    );
    let view = app.quest(&quest).await;
    assert_eq!((view["tries"].as_u64(), count(&view)), (Some(0), 1));
}

#[tokio::test]
async fn a_lease_is_held_at_most_max_hold_seconds_then_lapses_as_if_expired() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let mut config = contact_config(3);
    config["lease_seconds"] = json!(10);
    config["max_hold_seconds"] = json!(25);
    let session = app.scan(config, companies(1)).await;
    let shown = app
        .get(&format!("/v1/sessions/{session}"), &app.admin)
        .await
        .expect(200);
    assert_eq!(shown["config"]["max_hold_seconds"], 25, "{shown}");
    let mut plain = contact_config(3);
    plain["lease_seconds"] = json!(10);
    let default = app.scan(plain, companies(1)).await;
    let shown = app
        .get(&format!("/v1/sessions/{default}"), &app.admin)
        .await
        .expect(200);
    assert_eq!(
        shown["config"]["max_hold_seconds"], 100,
        "ten leases by default"
    );

    let next = app.next(&agent, &session, "a").await;
    let (quest, lease) = assigned(&next);
    let at = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    let granted = at(&next["lease"]["expires_at"]) - chrono::Duration::seconds(10);
    let path = format!("/v1/quests/{quest}/heartbeat");
    let heartbeat = || app.post(&path, &agent, json!({"lease_id": lease}));

    app.clock.advance(Duration::from_secs(8));
    let renewed = heartbeat().await.expect(200);
    assert_eq!(
        at(&renewed["expires_at"]),
        granted + chrono::Duration::seconds(18)
    );
    app.clock.advance(Duration::from_secs(8));
    // A FAIL renews the lease too, and no further than the cap.
    let fail = app
        .submit(&agent, &quest, &lease, json!({"email": "nope"}))
        .await
        .expect(200);
    assert_eq!(
        at(&fail["lease"]["expires_at"]),
        granted + chrono::Duration::seconds(25)
    );
    app.clock.advance(Duration::from_secs(8));
    let capped = heartbeat().await.expect(200);
    assert_eq!(
        at(&capped["expires_at"]),
        granted + chrono::Duration::seconds(25),
        "however often it is renewed"
    );
    app.clock.advance(Duration::from_secs(2));
    heartbeat().await.refused(409, "lease_expired");

    // It lapsed like an expired lease: counted, and the quest is open again.
    let again = app.next(&agent, &session, "a").await;
    let (same, new_lease) = assigned(&again);
    assert_eq!(same, quest);
    assert_ne!(new_lease, lease);
    let view = app.quest(&quest).await;
    assert_eq!(
        (view["lapses"].as_u64(), view["tries"].as_u64()),
        (Some(1), Some(1)),
        "{view}"
    );
}

#[tokio::test]
async fn a_key_is_one_submission_of_its_token_in_the_database_itself() {
    let test = "a_key_is_one_submission_of_its_token_in_the_database_itself";
    for app in crate::ratchet::ratchet_apps(test).await {
        let pg = app.database_url.is_some();
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(1)).await;
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        keyed(
            &app,
            &agent,
            &quest,
            &lease,
            json!({"email": "nope"}),
            b"k",
            30,
        )
        .await
        .expect(200);
        let view = app.quest(&quest).await;
        let sent = &view["submissions"][0];
        let (id, who) = (
            sent["id"].as_str().unwrap(),
            sent["agent"].as_str().unwrap(),
        );
        let token = who.split_once('/').unwrap().0;
        let (now, verb) = if pg {
            ("now()", "INSERT")
        } else {
            ("'now'", "REPLACE")
        };
        let mut db = crate::ratchet::raw(&app).await;
        let second = format!(
            "{verb} INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict,
               created_at, idempotency_token, idempotency_key)
             VALUES ('{}', '{quest}', '{session}', '{lease}', '{who}', '{{}}', 'h', 'FAIL', {now}, '{token}', 'k')",
            uuid::Uuid::new_v4()
        );
        let rewrite = format!("UPDATE submissions SET idempotency_key = 'k2' WHERE id = '{id}'");
        for sql in [second, rewrite] {
            let err = db.execute(&sql).await.expect_err(&sql);
            assert!(
                err.contains("ratchet") || err.contains("submissions_idempotency"),
                "{sql}: {err}"
            );
        }
        assert_eq!(count(&app.quest(&quest).await), 1);
    }
}
