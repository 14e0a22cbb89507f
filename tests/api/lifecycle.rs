//! The whole quest lifecycle over HTTP: every verdict path and every 409.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_quest_fails_with_facts_keeps_its_lease_and_then_passes_for_good() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(2)).await;

    let next = app.next(&agent, &session, "a1").await;
    let (quest, lease) = assigned(&next);
    assert_eq!(
        next["quest"]["key"], "Company 0000",
        "rows are leased in upload order"
    );
    assert_eq!(
        next["quest"]["input"],
        json!({"company": "Company 0000", "city": "Seoul"})
    );
    let prompt = next["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("Find the contact email") && prompt.contains("info@foo.test"),
        "{prompt}"
    );
    assert_eq!(
        next["submit"]["result_example"],
        json!({"email": "info@foo.test", "confidence": "high"})
    );

    let fail = app
        .submit(&agent, &quest, &lease, json!({"email": 42}))
        .await
        .expect(200);
    assert_eq!(
        (
            fail["verdict"].as_str(),
            fail["state"].as_str(),
            fail["phase"].as_str()
        ),
        (Some("FAIL"), Some("TODO"), Some("leased"))
    );
    assert_eq!(fail["tries"], 1);
    assert_eq!(fail["remaining"], 2);
    assert_eq!(
        fail["lease"]["id"], lease,
        "the same lease is renewed after a FAIL"
    );
    let fact = &fail["facts"][0];
    assert_eq!(
        (fact["check"].as_str(), fact["field"].as_str()),
        (Some("schema"), Some("/email"))
    );
    assert!(!fact["hint"].as_str().unwrap().is_empty());

    let again = app.next(&agent, &session, "a1").await;
    assert_eq!(
        assigned(&again),
        (quest.clone(), lease.clone()),
        "next returns the quest the agent holds"
    );
    assert_eq!(again["quest"]["last_facts"][0]["field"], "/email");
    assert!(
        again["prompt"]
            .as_str()
            .unwrap()
            .contains("Tries left: 2 of 3")
    );

    let pass = app
        .submit(
            &agent,
            &quest,
            &lease,
            json!({"email": "info@company0.test"}),
        )
        .await
        .expect(200);
    assert_eq!(
        (pass["verdict"].as_str(), pass["state"].as_str()),
        (Some("PASS"), Some("PASS"))
    );
    assert!(pass["phase"].is_null() && pass.get("lease").is_none());
    assert!(pass["receipt"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(pass["remaining"], 1);

    let locked = app
        .submit(
            &agent,
            &quest,
            &lease,
            json!({"email": "other@company0.test"}),
        )
        .await;
    locked.refused(409, "quest_locked");
    let view = app.quest(&quest).await;
    assert_eq!(view["state"], "PASS");
    assert_eq!(view["result"], json!({"email": "info@company0.test"}));
    assert_eq!(view["decided_by"], "gate");
    assert_eq!(
        view["submissions"].as_array().unwrap().len(),
        2,
        "the refused submission stored nothing"
    );
    assert_eq!(view["receipt"], pass["receipt"]);
}

#[tokio::test]
async fn the_identical_retry_returns_the_recorded_verdict_without_a_new_try() {
    // Issue 18: a network retry is told apart by its Idempotency-Key and
    // costs no try; without a key the same result after a FAIL is a new
    // try (an agent in a loop must end its quest, not pin it).
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let bad = json!({"email": "no-at-sign"});
    let keyed = |key: &'static [u8]| {
        crate::idempotency::keyed(&app, &agent, &quest, &lease, bad.clone(), key, 30)
    };
    let first = keyed(b"try-1").await.expect(200);
    let retry = keyed(b"try-1").await.expect(200);
    assert_eq!(retry["submission_id"], first["submission_id"]);
    assert_eq!(retry["tries"], 1, "a keyed network retry costs no try");
    assert_eq!(
        (first["replayed"].as_bool(), retry["replayed"].as_bool()),
        (Some(false), Some(true))
    );

    let unkeyed = app
        .submit(&agent, &quest, &lease, json!({"email": "no-at-sign"}))
        .await
        .expect(200);
    assert_ne!(unkeyed["submission_id"], first["submission_id"]);
    assert_eq!(
        (
            unkeyed["verdict"].as_str(),
            unkeyed["tries"].as_u64(),
            unkeyed["replayed"].as_bool()
        ),
        (Some("FAIL"), Some(2), Some(false)),
        "the same result without a key after a FAIL is checked again and costs a try"
    );
    assert_eq!(unkeyed["facts"][0]["check"], "unchanged");
    let hint = unkeyed["facts"][0]["hint"].as_str().unwrap();
    assert_eq!(
        hint,
        format!(
            "this result is identical to submission {}; change it according to the facts",
            first["submission_id"].as_str().unwrap()
        )
    );
    assert!(
        unkeyed["facts"].as_array().unwrap().len() > 1,
        "the gate's own facts follow: {unkeyed}"
    );

    let pass = app
        .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    let replay = app
        .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    assert_eq!(
        replay["submission_id"], pass["submission_id"],
        "the same result as the submission that made the quest terminal is answered by it"
    );
    assert_eq!(replay["verdict"], "PASS");
    assert_eq!(
        app.quest(&quest).await["submissions"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn the_last_try_ends_the_quest_in_done_by_limit() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(2), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &quest, &lease, json!({"email": "x"}))
        .await
        .expect(200);
    let done = app
        .submit(&agent, &quest, &lease, json!({"email": "y"}))
        .await
        .expect(200);
    assert_eq!(
        (done["verdict"].as_str(), done["state"].as_str()),
        (Some("FAIL"), Some("DONE"))
    );
    assert_eq!(
        done["tries"], 2,
        "the second FAIL of max_tries = 2 ends it (>=, not >)"
    );
    assert_eq!(app.quest(&quest).await["decided_by"], "limit");
    assert_eq!(app.next(&agent, &session, "a").await["status"], "finished");
}

#[tokio::test]
async fn grey_zones_and_deny_rules_decide_review_and_fail() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (q1, l1) = assigned(&app.next(&agent, &session, "a").await);
    let review = app
        .submit(
            &agent,
            &q1,
            &l1,
            json!({"email": "a@b.test", "confidence": "low"}),
        )
        .await
        .expect(200);
    assert_eq!(
        (review["verdict"].as_str(), review["state"].as_str()),
        (Some("REVIEW"), Some("REVIEW"))
    );
    app.submit(&agent, &q1, &l1, json!({"email": "c@b.test"}))
        .await
        .refused(409, "quest_locked");

    let (q2, l2) = assigned(&app.next(&agent, &session, "a").await);
    let denied = app
        .submit(
            &agent,
            &q2,
            &l2,
            json!({"email": "info@example.com", "confidence": "low"}),
        )
        .await
        .expect(200);
    assert_eq!(
        denied["verdict"], "FAIL",
        "a deny match fails even inside a grey zone"
    );
    let checks: Vec<_> = denied["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(
        checks.contains(&"deny") && checks.contains(&"review_when"),
        "{checks:?}"
    );
}

#[tokio::test]
async fn a_zero_wait_answers_pending_and_the_submission_can_be_polled() {
    let (app, _gate) = spawn_app_with_slow_gate().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(slow_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let pending = app
        .post(
            &format!("/v1/quests/{quest}/submit?wait=0"),
            &agent,
            json!({"lease_id": lease, "result": {"email": "a@b.test"}}),
        )
        .await
        .expect(202);
    assert_eq!(
        (pending["verdict"].as_str(), pending["phase"].as_str()),
        (Some("PENDING"), Some("checking"))
    );
    let id = pending["submission_id"].as_str().unwrap();
    let mut verdict = String::new();
    for _ in 0..200 {
        let s = app
            .get(&format!("/v1/submissions/{id}"), &agent)
            .await
            .expect(200);
        verdict = s["verdict"].as_str().unwrap().to_owned();
        if verdict != "PENDING" {
            assert_eq!(s["state_after"], "PASS");
            assert!(s["receipt"].as_str().unwrap().starts_with("sha256:"));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(verdict, "PASS");
    app.post(
        &format!("/v1/quests/{quest}/submit?wait=301"),
        &agent,
        json!({"lease_id": lease, "result": {}}),
    )
    .await
    .refused(422, "invalid_wait");
}

#[tokio::test]
async fn the_review_queue_is_claimed_and_decided_by_reviewers() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let ana = app.token("reviewer", "ana").await;
    let ben = app.token("reviewer", "ben").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    let mut quests = Vec::new();
    for _ in 0..2 {
        let (q, l) = assigned(&app.next(&agent, &session, "a").await);
        app.submit(
            &agent,
            &q,
            &l,
            json!({"email": format!("x@{q}.test"), "confidence": "low"}),
        )
        .await
        .expect(200);
        quests.push(q);
    }
    let (open_quest, _) = assigned(&app.next(&agent, &session, "a").await);

    let queue = app
        .get(&format!("/v1/review?session={session}"), &ana)
        .await
        .expect(200);
    let ids: Vec<_> = queue
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, quests, "oldest first");
    assert_eq!(
        queue[0]["last_facts"][0]["check"], "review_when",
        "with the reasons"
    );
    assert_eq!(queue[0]["submissions"][0]["verdict"], "REVIEW");

    let claim = app
        .post(&format!("/v1/review/{}/claim", quests[0]), &ana, json!({}))
        .await
        .expect(200);
    assert_eq!(claim["claimed_by"], "ana");
    app.post(&format!("/v1/review/{}/claim", quests[0]), &ben, json!({}))
        .await
        .refused(409, "review_claimed");
    app.post(
        &format!("/v1/review/{}", quests[0]),
        &ben,
        json!({"decision": "approve", "note": "ok"}),
    )
    .await
    .refused(409, "review_claimed");

    let approved = app
        .post(
            &format!("/v1/review/{}", quests[0]),
            &ana,
            json!({"decision": "approve", "note": "checked by phone"}),
        )
        .await
        .expect(200);
    assert_eq!(
        (approved["state"].as_str(), approved["decided_by"].as_str()),
        (Some("PASS"), Some("reviewer:ana"))
    );
    assert_eq!(approved["reviews"][0]["note"], "checked by phone");
    assert!(approved["receipt"].as_str().unwrap().starts_with("sha256:"));

    let rejected = app
        .post(
            &format!("/v1/review/{}", quests[1]),
            &ben,
            json!({"decision": "reject", "note": "wrong company"}),
        )
        .await
        .expect(200);
    assert_eq!(
        (rejected["state"].as_str(), rejected["decided_by"].as_str()),
        (Some("DONE"), Some("reviewer:ben"))
    );

    app.post(
        &format!("/v1/review/{}", quests[0]),
        &ana,
        json!({"decision": "reject", "note": "too late"}),
    )
    .await
    .refused(409, "not_in_review");
    app.post(
        &format!("/v1/review/{open_quest}"),
        &ana,
        json!({"decision": "approve"}),
    )
    .await
    .refused(409, "not_in_review");
    app.post(&format!("/v1/review/{open_quest}/claim"), &ana, json!({}))
        .await
        .refused(409, "not_in_review");
    assert!(
        app.get("/v1/review", &ana)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty()
    );
    let status = app.status(&session).await;
    assert_eq!(
        (
            status["pass"].as_u64(),
            status["done"].as_u64(),
            status["review"].as_u64()
        ),
        (Some(1), Some(1), Some(0))
    );
}

#[tokio::test]
async fn status_sessions_and_events_report_every_change() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(2)).await;

    let mut events = app
        .client
        .get(format!("{}/v1/sessions/{session}/events", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");

    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);

    let mut seen = String::new();
    while !seen.contains("event: decided") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), events.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    for kind in ["event: leased", "event: submitted", "event: decided"] {
        assert!(seen.contains(kind), "missing {kind} in {seen}");
    }
    assert!(seen.contains(&quest));

    let one = app
        .get(&format!("/v1/sessions/{session}"), &agent)
        .await
        .expect(200);
    assert_eq!(one["status"]["pass"], 1);
    assert_eq!(one["columns"], json!(["company", "city"]));
    let list = app.get("/v1/sessions", &agent).await.expect(200);
    assert_eq!(list[0]["id"], session.as_str());
    let status = app.status(&session).await;
    assert_eq!(
        (
            status["total"].as_u64(),
            status["remaining"].as_u64(),
            status["submissions"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert!(
        status["rate_per_minute"].as_f64().unwrap() > 0.0
            && status["eta_seconds"].as_u64().is_some()
    );
    assert_sums(&status);
}

#[tokio::test]
async fn finished_and_wait_tell_the_agent_what_to_do() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let wait = app.next(&agent, &session, "b").await;
    assert_eq!(wait["status"], "wait");
    let after = wait["retry_after_seconds"].as_u64().unwrap();
    assert!((1..=30).contains(&after), "{wait}");
    app.submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    assert_eq!(
        app.next(&agent, &session, "b").await,
        json!({"status": "finished"})
    );
}

#[tokio::test]
async fn shutdown_ends_event_streams_instead_of_waiting_on_them() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let mut events = app
        .client
        .get(format!("{}/v1/sessions/{session}/events", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    // A hang here would be the bug; the generous bound only keeps a failure from blocking CI.
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(60), app.stop()).await;
    assert!(
        stopped.is_ok(),
        "the server stopped although a client was watching events"
    );
    while let Ok(Some(_)) = events.chunk().await {}
}

#[tokio::test]
async fn the_prompt_calls_out_a_doom_loop_only_when_the_facts_repeat() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(5), companies(2)).await;

    let (q1, l1) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &q1, &l1, json!({"email": 1}))
        .await
        .expect(200);
    let prompt = app.next(&agent, &session, "a").await["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !prompt.contains("failed twice"),
        "one FAIL is no loop: {prompt}"
    );
    app.submit(&agent, &q1, &l1, json!({"email": 1, "note": "again"}))
        .await
        .expect(200);
    let prompt = app.next(&agent, &session, "a").await["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains("failed twice with the same facts"),
        "{prompt}"
    );
    assert!(prompt.contains("Tries left: 3 of 5"), "{prompt}");

    let (q2, l2) = assigned(&app.next(&agent, &session, "b").await);
    app.submit(&agent, &q2, &l2, json!({"email": 1}))
        .await
        .expect(200);
    app.submit(&agent, &q2, &l2, json!({"email": "no-at-sign"}))
        .await
        .expect(200);
    let prompt = app.next(&agent, &session, "b").await["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !prompt.contains("failed twice"),
        "different facts are progress: {prompt}"
    );
    assert!(
        prompt.contains("no-at-sign"),
        "the last facts are in the prompt: {prompt}"
    );
}
