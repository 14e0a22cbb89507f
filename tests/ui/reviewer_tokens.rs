//! The console knows reviewers by their token, as the API does: a new token
//! that reuses a revoked reviewer's name is someone else on every page.

use reqwest::Method;
use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn a_new_token_under_a_revoked_reviewers_name_sees_its_claim_as_another_reviewers() {
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
    let new_ana = sign_in(&app, &app.token("reviewer", "ana").await).await;

    let review = get(
        &app,
        &format!("/ui/review?quest={}", ids[0]),
        Some(&new_ana),
    )
    .await;
    let plain = review.plain();
    assert!(
        !plain.contains(&format!(r#"action="/ui/review/{}/decide""#, ids[0])),
        "no decision is offered on another token's claim: {plain}"
    );
    assert!(!plain.contains("Claimed by you"), "{plain}");
    let quest = get(&app, &format!("/ui/quests/{}", ids[0]), Some(&new_ana)).await;
    let body = quest.expect(200);
    assert!(body.contains("In review by ana"), "{body}");
    assert!(
        !body.contains("(you)"),
        "the claim is not the new token's: {body}"
    );

    let bulk = get(
        &app,
        &format!("/ui/review/bulk?decision=approve&session={session}"),
        Some(&new_ana),
    )
    .await;
    let body = bulk.expect(200);
    assert!(
        body.contains("Nothing to approve") && body.contains("1 is in review by other reviewers"),
        "a bulk decision leaves the old token's claim alone: {body}"
    );

    // A decision posted anyway is refused and changes nothing.
    let decide = post(
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
    assert!(
        decide.location().contains("error=review_claimed"),
        "{}",
        decide.location()
    );
    let view = app.quest(&ids[0]).await;
    assert_eq!(
        (view["state"].as_str(), &view["review_claimed_by_token"]),
        (Some("REVIEW"), &old["id"])
    );
}
