//! A revoked token loses everything at once: its open event stream ends, and
//! a new token that reuses its name inherits neither its claims nor its
//! decisions (reviewers are known by their token, not by its name).

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::helpers::{TestApp, assigned, companies, contact_config, spawn_app};

/// Creates a token and returns its id and secret.
async fn token(app: &TestApp, role: &str, name: &str) -> (String, String) {
    let body = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": name, "role": role}),
        )
        .await
        .expect(201);
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

async fn revoke(app: &TestApp, id: &str) {
    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Some(&app.admin),
        None,
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn an_open_event_stream_ends_when_its_token_is_revoked() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (id, viewer) = token(&app, "viewer", "watcher").await;
    let agent = app.token("agent", "bot").await;
    let mut stream = app
        .client
        .get(format!("{}/v1/sessions/{session}/events", app.base))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // The stream is live: a lease shows up on it.
    assigned(&app.next(&agent, &session, "a").await);
    let mut seen = String::new();
    while !seen.contains("event: leased") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
            .await
            .expect("the lease is streamed")
            .unwrap()
            .expect("the stream is open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    revoke(&app, &id).await;
    let mut rest = String::new();
    // The stream checks its token every 250 ms (a second at most with the
    // token cache); the bound here is loose because this machine is shared.
    // Without the check the stream would stay open for as long as the server runs.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its token: {rest}");
    assert!(
        rest.contains("event: revoked") && rest.contains("token_revoked"),
        "the last event says why: {rest}"
    );
    // Events after the revocation do not reach it, and it cannot reconnect.
    app.get(&format!("/v1/sessions/{session}/events"), &viewer)
        .await
        .refused(401, "unauthorized");
}

/// A session with `n` quests in REVIEW; their ids.
async fn in_review(app: &TestApp, n: usize) -> Vec<String> {
    let session = app.scan(contact_config(3), companies(n)).await;
    let agent = app.token("agent", "reviewable").await;
    let mut ids = Vec::new();
    for i in 0..n {
        let (quest, lease) = assigned(&app.next(&agent, &session, &format!("a{i}")).await);
        let answer = app
            .submit(
                &agent,
                &quest,
                &lease,
                json!({"email": "info@acme.test", "confidence": "low"}),
            )
            .await
            .expect(200);
        assert_eq!(answer["state"], "REVIEW");
        ids.push(quest);
    }
    ids
}

#[tokio::test]
async fn a_new_token_reusing_a_revoked_reviewers_name_inherits_neither_its_claims_nor_its_decisions()
 {
    let app = spawn_app().await;
    let quests = in_review(&app, 2).await;
    let (old_id, old_ana) = token(&app, "reviewer", "ana").await;
    let decided = app
        .post(
            &format!("/v1/review/{}", quests[0]),
            &old_ana,
            json!({"decision": "approve", "note": "checked"}),
        )
        .await
        .expect(200);
    assert_eq!(decided["reviews"][0]["reviewer_token_id"], old_id.as_str());
    app.post(
        &format!("/v1/review/{}/claim", quests[1]),
        &old_ana,
        json!({}),
    )
    .await
    .expect(200);
    let claimed = app.quest(&quests[1]).await;
    assert_eq!(
        (
            claimed["review_claimed_by"].as_str(),
            claimed["review_claimed_by_token"].as_str()
        ),
        (Some("ana"), Some(old_id.as_str()))
    );

    revoke(&app, &old_id).await;
    let (new_id, new_ana) = token(&app, "reviewer", "ana").await;
    assert_ne!(new_id, old_id);
    let path = format!("/v1/review/{}", quests[1]);
    let refused = app
        .post(&path, &new_ana, json!({"decision": "reject", "note": "no"}))
        .await;
    refused.refused(409, "review_claimed");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another token named ana"),
        "{}",
        refused.body
    );
    app.post(&format!("{path}/claim"), &new_ana, json!({}))
        .await
        .refused(409, "review_claimed");
    app.call(
        Method::DELETE,
        &format!("{path}/claim"),
        Some(&new_ana),
        None,
    )
    .await
    .refused(409, "review_claimed");
    let unchanged = app.quest(&quests[1]).await;
    assert_eq!(unchanged["state"], "REVIEW");
    assert_eq!(unchanged["review_claimed_by_token"], old_id.as_str());

    // Once the old claim has run out, the new token claims and decides as itself.
    app.clock.advance(Duration::from_secs(901));
    let claim = app
        .post(&format!("{path}/claim"), &new_ana, json!({}))
        .await
        .expect(200);
    assert_eq!(claim["claimed_by"], "ana");
    let rejected = app
        .post(
            &path,
            &new_ana,
            json!({"decision": "reject", "note": "wrong"}),
        )
        .await
        .expect(200);
    assert_eq!(rejected["reviews"][0]["reviewer_token_id"], new_id.as_str());
    assert_eq!(
        app.quest(&quests[0]).await["reviews"][0]["reviewer_token_id"],
        old_id.as_str(),
        "the old decision stays the old token's"
    );
}
