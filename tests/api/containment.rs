//! Containment (issue 18, point 6): a token limited to sessions stays inside
//! them, and a token whose quests keep ending DONE is paused in that session
//! (its leases released) until an admin resumes it. On both backends.

use serde_json::{Value, json};

use crate::helpers::{TestApp, assigned, companies, contact_config, spawn_app};

/// A config whose quests end DONE on the first FAIL, pausing after `n` in a row.
pub fn pausing(n: u32) -> Value {
    let mut config = contact_config(1);
    config["max_consecutive_done"] = json!(n);
    config
}

pub async fn scoped_token(app: &TestApp, role: &str, sessions: &[&str]) -> (String, String) {
    let created = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": format!("scoped-{role}"), "role": role, "sessions": sessions}),
        )
        .await
        .expect(201);
    assert_eq!(created["sessions"], json!(sessions));
    (
        created["secret"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    )
}

/// Leases a quest for `agent` and fails it, which ends it DONE (max_tries 1).
pub async fn burn(app: &TestApp, token: &str, session: &str, agent: &str) -> String {
    let (quest, lease) = assigned(&app.next(token, session, agent).await);
    let answer = app
        .submit(token, &quest, &lease, json!({"email": "nobody"}))
        .await
        .expect(200);
    assert_eq!(answer["state"], "DONE", "{answer}");
    quest
}

#[tokio::test]
async fn a_scoped_token_is_refused_outside_its_sessions_and_lists_only_them() {
    let app = spawn_app().await;
    let mine = app.scan(contact_config(3), companies(2)).await;
    let other = app.scan(contact_config(3), companies(2)).await;
    let (agent, _) = scoped_token(&app, "agent", &[&mine]).await;

    // Its own session works as before.
    let (quest, lease) = assigned(&app.next(&agent, &mine, "a").await);
    app.get(&format!("/v1/quests/{quest}"), &agent)
        .await
        .expect(200);

    // Every other session, and every quest of it, is refused before anything changes.
    let refused = app
        .post(&format!("/v1/sessions/{other}/next"), &agent, json!({}))
        .await;
    refused.refused(403, "out_of_scope");
    assert_eq!(app.status(&other).await["leased"], 0);
    app.get(&format!("/v1/sessions/{other}"), &agent)
        .await
        .refused(403, "out_of_scope");
    app.get(&format!("/v1/sessions/{other}/export?format=csv"), &agent)
        .await
        .refused(403, "out_of_scope");
    let admin_next = app.next(&app.admin, &other, "ops").await;
    let (foreign, foreign_lease) = assigned(&admin_next);
    app.get(&format!("/v1/quests/{foreign}"), &agent)
        .await
        .refused(403, "out_of_scope");
    app.submit(
        &agent,
        &foreign,
        &foreign_lease,
        json!({"email": "a@b.test"}),
    )
    .await
    .refused(403, "out_of_scope");
    let submitted = app
        .submit(&agent, &quest, &lease, json!({"email": "info@mine.test"}))
        .await
        .expect(200);
    let submission = submitted["submission_id"].as_str().unwrap();
    app.get(&format!("/v1/submissions/{submission}"), &agent)
        .await
        .expect(200);

    // Lists show only its sessions; lists over every session must name one.
    let listed = app.get("/v1/sessions", &agent).await.expect(200);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![mine.as_str()]);
    assert_eq!(
        app.get("/v1/sessions", &app.admin)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (viewer, _) = scoped_token(&app, "viewer", &[&mine]).await;
    app.get("/v1/verifiers", &viewer)
        .await
        .refused(403, "out_of_scope");
    app.get(&format!("/v1/verifiers?session={mine}"), &viewer)
        .await
        .expect(200);
    app.get(&format!("/v1/verifiers?session={other}"), &viewer)
        .await
        .refused(403, "out_of_scope");
}

#[tokio::test]
async fn a_scope_names_existing_sessions_and_never_an_admin_token() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let unknown = uuid::Uuid::now_v7().to_string();
    for body in [
        json!({"name": "a", "role": "agent", "sessions": [unknown]}),
        json!({"name": "b", "role": "admin", "sessions": [session]}),
        json!({"name": "c", "role": "agent", "sessions": []}),
    ] {
        app.post("/v1/tokens", &app.admin, body)
            .await
            .refused(422, "invalid_sessions");
    }
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    assert_eq!(
        tokens.as_array().unwrap().len(),
        1,
        "nothing was created: {tokens}"
    );
}

#[tokio::test]
async fn a_token_whose_quests_keep_ending_done_is_paused_its_leases_released_until_resumed() {
    let app = spawn_app().await;
    let session = app.scan(pausing(3), companies(10)).await;
    let elsewhere = app.scan(pausing(3), companies(2)).await;
    let bot = app.token("agent", "bot").await;
    let other = app.token("agent", "other").await;

    // A PASS breaks the run: DONE, PASS, DONE, DONE is no pause.
    burn(&app, &bot, &session, "inventing").await;
    let (q, l) = assigned(&app.next(&bot, &session, "inventing").await);
    app.submit(&bot, &q, &l, json!({"email": "info@real.test"}))
        .await
        .expect(200);
    burn(&app, &bot, &session, "inventing").await;
    burn(&app, &bot, &session, "inventing").await;

    // A second agent name of the same token holds a lease when the third DONE in a row lands.
    let (held, held_lease) = assigned(&app.next(&bot, &session, "second-name").await);
    burn(&app, &bot, &session, "inventing").await;

    // Paused: next is refused with the reason and who resumes, under any agent name.
    for name in ["inventing", "a-new-name"] {
        let refused = app
            .post(
                &format!("/v1/sessions/{session}/next"),
                &bot,
                json!({"agent": name}),
            )
            .await;
        refused.refused(409, "agent_paused");
        assert_eq!(refused.body["pause"]["reason"], "consecutive_done");
        assert_eq!(refused.body["pause"]["figures"]["consecutive_done"], 3);
        let message = refused.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("quest agent resume"), "{message}");
    }
    // Its lease was released at once: no try, no lapse; submitting on it is refused.
    let quest = app.quest(&held).await;
    assert_eq!(
        (quest["state"].as_str(), quest["phase"].as_str()),
        (Some("TODO"), Some("open"))
    );
    assert_eq!(
        (quest["tries"].as_u64(), quest["lapses"].as_u64()),
        (Some(0), Some(0))
    );
    app.submit(&bot, &held, &held_lease, json!({"email": "info@late.test"}))
        .await
        .refused(409, "lease_lost");

    // Only this token, only in this session.
    assigned(&app.next(&other, &session, "x").await);
    assigned(&app.next(&bot, &elsewhere, "inventing").await);

    // The pause is listed with what caused it; only an admin resumes it.
    let pauses = app
        .get(&format!("/v1/sessions/{session}/pauses"), &bot)
        .await
        .expect(200);
    assert_eq!(pauses.as_array().unwrap().len(), 1, "{pauses}");
    let pause = &pauses[0];
    assert_eq!(pause["agent"], "inventing");
    assert!(pause["resumed_at"].is_null());
    let token_id = pause["token_id"].as_str().unwrap().to_owned();
    let resume = format!("/v1/sessions/{session}/tokens/{token_id}/resume");
    app.post(&resume, &bot, json!({}))
        .await
        .refused(403, "forbidden");
    let resumed = app.post(&resume, &app.admin, json!({})).await.expect(200);
    assert_eq!(resumed["resumed_by"], "admin");
    app.post(&resume, &app.admin, json!({}))
        .await
        .refused(409, "not_paused");

    // Resumed, it works again, and its count starts anew.
    burn(&app, &bot, &session, "inventing").await;
    assigned(&app.next(&bot, &session, "inventing").await);
}

#[tokio::test]
async fn lapses_count_toward_a_pause_and_zero_turns_pauses_off() {
    let app = spawn_app().await;
    let mut config = pausing(2);
    config["max_lapses"] = json!(1);
    config["lease_seconds"] = json!(10);
    let session = app.scan(config, companies(4)).await;
    let mut off = pausing(0);
    off["max_tries"] = json!(1);
    let unpaused = app.scan(off, companies(4)).await;
    let bot = app.token("agent", "bot").await;

    for _ in 0..2 {
        assigned(&app.next(&bot, &session, "sleepy").await);
        app.clock.advance(std::time::Duration::from_secs(11));
        // The claim sweeps the lapsed lease (DONE after one lapse) before it leases.
        let (q, l) = assigned(&app.next(&app.admin, &session, "sweep").await);
        app.post(
            &format!("/v1/quests/{q}/release"),
            &app.admin,
            json!({"lease_id": l}),
        )
        .await
        .expect(204);
    }
    assert_eq!(app.status(&session).await["done"], 2);
    app.post(
        &format!("/v1/sessions/{session}/next"),
        &bot,
        json!({"agent": "sleepy"}),
    )
    .await
    .refused(409, "agent_paused");

    for _ in 0..3 {
        burn(&app, &bot, &unpaused, "inventing").await;
    }
    assigned(&app.next(&bot, &unpaused, "inventing").await);
}
