//! Canaries (issue 22, point 4): items for which no honest result can
//! pass, handed out like gold. One that ends PASS — by the gate or by a
//! reviewer's approval — pauses its token in every session, with its leases
//! there released, and raises an event and `quest_canary_passes_total`; a
//! canary that ends DONE is its honest end and never counts towards the DONE
//! run that pauses a token.

use serde_json::{Value, json};

use crate::gold::{add_gold, gold_session};
use crate::helpers::{
    TestApp, assigned, companies, contact_config, open_events, read_until, spawn_app,
};

/// One canary: a company of the session's shape whose address nobody publishes.
fn canary() -> Value {
    json!({"kind": "canary", "input": {"company": "Hollow Ltd", "city": "Nowhere"}})
}

/// A session whose every token's first assignment is its one canary.
async fn canary_session(app: &TestApp, config: Value) -> String {
    let mut gold = json!({"rate": 0, "warmup": 1});
    if let Some(extra) = config.as_object() {
        for (k, v) in extra {
            gold[k] = v.clone();
        }
    }
    let session = gold_session(app, 20, gold, 0).await;
    assert_eq!(
        add_gold(app, &session, vec![canary()]).await,
        json!({"added": 1, "items": 1})
    );
    session
}

/// The value of an unlabelled counter in the server's `/metrics`.
async fn counter(app: &TestApp, name: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", app.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Leases the token's canary in `session` and answers it with `email` at
/// `confidence`; the state the answer left.
async fn answer_canary(
    app: &TestApp,
    token: &str,
    session: &str,
    email: &str,
    confidence: &str,
) -> (String, Value) {
    let next = app.next(token, session, "bot").await;
    assert_eq!(next["quest"]["key"], "Hollow Ltd", "{next}");
    let (quest, lease) = assigned(&next);
    let result = json!({"email": email, "confidence": confidence});
    let answer = app.submit(token, &quest, &lease, result).await.expect(200);
    (quest, answer["state"].clone())
}

async fn next_answer(app: &TestApp, token: &str, session: &str) -> crate::helpers::Answer {
    app.post(
        &format!("/v1/sessions/{session}/next"),
        token,
        json!({"agent": "bot"}),
    )
    .await
}

#[tokio::test]
async fn a_canary_passed_by_a_permissive_gate_pauses_its_token_in_every_session() {
    let app = spawn_app().await;
    let session = canary_session(&app, json!({})).await;
    let other = app.scan(contact_config(3), companies(5)).await;
    let token = app.token("agent", "eager").await;
    let honest = app.token("agent", "honest").await;
    let before = counter(&app, "quest_canary_passes_total").await;
    // The token holds a real quest of another session while it works the canary.
    let held = app.next(&token, &other, "bot").await;
    let (held_quest, _) = assigned(&held);
    let mut events = open_events(&app, &session).await;
    // An invented address passes the schema gate: the gate cannot tell.
    let (quest, state) = answer_canary(&app, &token, &session, "info@hollow.test", "high").await;
    assert_eq!(state, "PASS");
    let seen = read_until(&mut events, "event: canary_passed").await;
    assert!(seen.contains(&quest), "{seen}");
    // Paused in this session and in the other, whose lease went back.
    for s in [&session, &other] {
        let refused = next_answer(&app, &token, s).await;
        refused.refused(409, "agent_paused");
        let pause = &refused.body["pause"];
        assert_eq!(pause["reason"], "canary", "{pause}");
        assert_eq!(pause["session_id"], session.as_str(), "{pause}");
        assert_eq!(pause["figures"]["quest_id"], quest.as_str(), "{pause}");
    }
    let view = app.quest(&held_quest).await;
    assert_eq!(
        (view["state"].as_str(), view["phase"].as_str()),
        (Some("TODO"), Some("open")),
        "{view}"
    );
    // Another token is not paused.
    assert_eq!(app.next(&honest, &other, "bot").await["status"], "assigned");
    // Recorded, counted, and in the other session's list of pauses.
    let gold = app
        .get(&format!("/v1/sessions/{session}/gold"), &app.admin)
        .await
        .expect(200);
    let passes = gold["canary_passes"].as_array().unwrap();
    assert_eq!(passes.len(), 1, "{gold}");
    assert_eq!(passes[0]["quest_id"], quest.as_str());
    assert_eq!(passes[0]["decided_by"], "gate");
    assert_eq!(passes[0]["reviewer_token"], Value::Null);
    assert_eq!(gold["items"][0]["kind"], "canary");
    assert_eq!(gold["items"][0]["expected"], Value::Null);
    assert!(counter(&app, "quest_canary_passes_total").await > before);
    let pauses = app
        .get(&format!("/v1/sessions/{other}/pauses"), &app.admin)
        .await
        .expect(200);
    assert!(
        pauses
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["reason"] == "canary"),
        "{pauses}"
    );
    // A canary is never counted in its session.
    assert_eq!(app.status(&session).await["pass"], 0);
    // Resumed where it passed, the token works everywhere again.
    let token_id = passes[0]["token_id"].as_str().unwrap();
    app.post(
        &format!("/v1/sessions/{session}/tokens/{token_id}/resume"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(200);
    assert_eq!(app.next(&token, &other, "bot").await["status"], "assigned");
    assert_eq!(
        app.next(&token, &session, "bot").await["status"],
        "assigned"
    );
}

#[tokio::test]
async fn a_canary_a_reviewer_approves_pauses_the_token_and_is_recorded_against_the_reviewer() {
    let app = spawn_app().await;
    let session = canary_session(&app, json!({})).await;
    let token = app.token("agent", "doubtful").await;
    let reviewer = app.token("reviewer", "rita").await;
    // A low confidence goes to review; the reviewer is fooled.
    let (quest, state) = answer_canary(&app, &token, &session, "info@hollow.test", "low").await;
    assert_eq!(state, "REVIEW");
    assert_eq!(next_answer(&app, &token, &session).await.status, 200);
    app.post(
        &format!("/v1/review/{quest}"),
        &reviewer,
        json!({"decision": "approve", "note": "looks right"}),
    )
    .await
    .expect(200);
    let refused = next_answer(&app, &token, &session).await;
    refused.refused(409, "agent_paused");
    assert_eq!(refused.body["pause"]["reason"], "canary");
    let gold = app
        .get(&format!("/v1/sessions/{session}/gold"), &app.admin)
        .await
        .expect(200);
    let pass = &gold["canary_passes"][0];
    assert_eq!(pass["decided_by"], "reviewer:rita", "{gold}");
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    let rita = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "rita")
        .unwrap();
    assert_eq!(pass["reviewer_token"], rita["id"], "{gold}");
}

#[tokio::test]
async fn a_canary_that_ends_done_never_counts_towards_the_done_run_that_pauses_a_token() {
    let app = spawn_app().await;
    // One DONE in a row pauses a token; one try each.
    let mut config = contact_config(1);
    config["max_consecutive_done"] = json!(1);
    config["gold"] = json!({"rate": 0, "warmup": 1});
    let session = app.scan(config, companies(5)).await;
    add_gold(&app, &session, vec![canary()]).await;
    let token = app.token("agent", "truthful").await;
    // The honest answer to a canary fails the gate: no address to give.
    let (_, state) = answer_canary(&app, &token, &session, "none@example.com", "high").await;
    assert_eq!(state, "DONE");
    // Not paused: the next real quest is assigned.
    let next = app.next(&token, &session, "bot").await;
    assert_eq!(next["status"], "assigned", "{next}");
    assert_ne!(next["quest"]["key"], "Hollow Ltd");
    let gold = app
        .get(&format!("/v1/sessions/{session}/gold"), &app.admin)
        .await
        .expect(200);
    assert_eq!(gold["canary_passes"], json!([]));
}

#[tokio::test]
async fn a_canary_has_no_expected_result_and_gold_has_one() {
    let app = spawn_app().await;
    let session = gold_session(&app, 3, json!({}), 0).await;
    let path = format!("/v1/sessions/{session}/gold");
    let mut bad = canary();
    bad["expected"] = json!({"email": "x@y.test"});
    let refused = app.post(&path, &app.admin, json!({"items": [bad]})).await;
    refused.refused(422, "invalid_gold");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("canary"),
        "{}",
        refused.body
    );
    let refused = app
        .post(
            &path,
            &app.admin,
            json!({"items": [{"input": {"company": "Acme", "city": "Oslo"}}]}),
        )
        .await;
    refused.refused(422, "invalid_gold");
    // Nothing was added.
    let gold = app.get(&path, &app.admin).await.expect(200);
    assert_eq!(gold["items"], json!([]));
}

/// On every backend: raw SQL cannot change nor delete a canary's pass, a
/// suspect mark, a gold item or a hand-out, and a mark moves no state.
#[tokio::test]
async fn raw_sql_cannot_rewrite_canary_passes_suspect_marks_or_gold_and_no_mark_moves_a_state() {
    let test = "raw_sql_cannot_rewrite_canary_passes_suspect_marks_or_gold";
    for app in crate::ratchet::ratchet_apps(test).await {
        let session = canary_session(&app, json!({})).await;
        let token = app.token("agent", "eager").await;
        let (quest, state) =
            answer_canary(&app, &token, &session, "info@hollow.test", "high").await;
        assert_eq!(state, "PASS");
        let pauses = app
            .get(&format!("/v1/sessions/{session}/pauses"), &app.admin)
            .await
            .expect(200);
        let (pause, token_id) = (&pauses[0]["id"], &pauses[0]["token_id"]);
        let (pause, token_id) = (pause.as_str().unwrap(), token_id.as_str().unwrap());
        let mut db = crate::ratchet::raw(&app).await;
        // A mark may be added (the store adds them); never changed nor removed.
        let mark = format!(
            "INSERT INTO suspect_marks (quest_id, session_id, token_id, pause_id, marked_at)
             VALUES ('{quest}', '{session}', '{token_id}', '{pause}', '2026-01-01T00:00:00Z')"
        );
        assert_eq!(db.execute(&mark).await, Ok(1));
        for (sql, rule) in [
            (
                "UPDATE canary_passes SET decided_by = 'verifiers'",
                "canary passes are never changed",
            ),
            (
                "DELETE FROM canary_passes",
                "canary passes are never changed",
            ),
            (
                "UPDATE suspect_marks SET marked_at = marked_at",
                "suspect marks are never changed",
            ),
            (
                "DELETE FROM suspect_marks",
                "suspect marks are never changed",
            ),
            (
                "UPDATE gold_items SET input = '{}'",
                "gold items are never changed",
            ),
            ("DELETE FROM gold_items", "gold items are never changed"),
            (
                "UPDATE gold_quests SET handed_at = handed_at",
                "gold hand-outs are never changed",
            ),
            (
                "DELETE FROM gold_quests",
                "gold hand-outs are never changed",
            ),
        ] {
            let err = db.execute(sql).await.expect_err(sql);
            assert!(
                crate::ratchet::refused_by_a_rule(&err) && err.contains(rule),
                "{sql}: {err}"
            );
        }
        let view = app.quest(&quest).await;
        assert_eq!(
            (view["state"].clone(), view["suspect"].clone()),
            (json!("PASS"), json!(true)),
            "{view}"
        );
    }
}
