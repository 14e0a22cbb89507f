//! The console knows reviewers by their token, as the API does: a new token
//! that reuses a revoked reviewer's name is someone else on every page, and
//! a revoked token's claims and open console stream end with it.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn a_revoked_reviewers_claim_is_given_up_and_a_new_token_under_its_name_claims_it_as_itself()
{
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let ids = reviews(&app, &agent, &session, 1).await;
    let old = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "ana", "role": "reviewer"}),
        )
        .await
        .expect(201);
    let old_ana = sign_in(&app, old["secret"].as_str().unwrap()).await;
    let mine = get(
        &app,
        &format!("/ui/review?quest={}", ids[0]),
        Some(&old_ana),
    )
    .await;
    assert!(
        mine.plain()
            .contains(&format!(r#"action="/ui/review/{}/decide""#, ids[0]))
    );
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by_token"],
        old["id"]
    );

    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{}", old["id"].as_str().unwrap()),
        Some(&app.admin),
        None,
    )
    .await
    .expect(200);
    // The revocation gave the claim up: the new token is not kept out of it,
    // and takes it as itself.
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by_token"],
        serde_json::Value::Null
    );
    let new = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "ana", "role": "reviewer"}),
        )
        .await
        .expect(201);
    let new_ana = sign_in(&app, new["secret"].as_str().unwrap()).await;
    let review = get(
        &app,
        &format!("/ui/review?quest={}", ids[0]),
        Some(&new_ana),
    )
    .await;
    assert!(
        review
            .plain()
            .contains(&format!(r#"action="/ui/review/{}/decide""#, ids[0])),
        "the new token is offered the decision: {}",
        review.plain()
    );
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by_token"],
        new["id"],
        "the claim is the new token's"
    );
    post(
        &app,
        &format!("/ui/review/{}/decide", ids[0]),
        Some(&new_ana),
        form(&[
            ("csrf", &new_ana.csrf),
            ("decision", "approve"),
            ("note", ""),
        ]),
        &[],
    )
    .await;
    let view = app.quest(&ids[0]).await;
    assert_eq!(view["state"], "PASS", "{view}");
    assert_eq!(view["reviews"][0]["reviewer_token_id"], new["id"]);
}

#[tokio::test]
async fn an_open_console_event_stream_ends_when_its_token_is_revoked() {
    let app = spawn_app().await;
    let token = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "watcher", "role": "viewer"}),
        )
        .await
        .expect(201);
    let watcher = sign_in(&app, token["secret"].as_str().unwrap()).await;
    let mut stream = client()
        .get(format!("{}/ui/events", app.base))
        .header(
            reqwest::header::COOKIE,
            format!("quest_console={}", watcher.cookie),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("event: ready") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
            .await
            .expect("the stream says it is ready")
            .unwrap()
            .expect("the stream is open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{}", token["id"].as_str().unwrap()),
        Some(&app.admin),
        None,
    )
    .await
    .expect(200);
    // The stream checks its browser session every second; the bound is loose
    // because this machine is shared. Without the check it would stay open.
    let mut rest = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its token: {rest}");
    assert!(
        rest.contains("event: signed_out"),
        "the last event says why: {rest}"
    );
    let again = get(&app, "/ui/events", Some(&watcher)).await;
    assert_ne!(
        again.status, 200,
        "a revoked browser session cannot reopen it"
    );
}
