//! What a re-check's verdict means: it asks the world, not the session; a
//! REVIEW for the very finding a person approved confirms the quest, and an
//! answer the world did not give leaves it `unconfirmed`, approved or not.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;
use crate::recheck::{PAGE, Page, Site, rechecked, spawn};

#[tokio::test]
async fn a_review_repeating_the_approved_reason_confirms_and_a_5xx_leaves_the_quest_unconfirmed() {
    let site = Site::serve("<p>Mail acme.korea@gmail.com</p>").await;
    let app = spawn(None).await;
    let config = json!({"key_column": "company", "gate": {"kind": "email"}});
    let session = app.scan(config, json!([{"company": "Acme"}])).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let mut result = site.result();
    result["email"] = json!("acme.korea@gmail.com");
    let answer = app.submit(&agent, &quest, &lease, result).await;
    assert!(answer.status.is_success(), "{}", answer.body);
    let view = app.settled(&quest).await;
    assert_eq!(
        view["state"], "REVIEW",
        "a free-mail address goes to a person: {view}"
    );
    let reviewer = app.token("reviewer", "rita").await;
    approve(&app, &reviewer, &quest, "a small firm uses gmail").await;

    recheck_a_day_later(&app, &session).await;
    let view = rechecked(&app, &quest, 1).await;
    assert_eq!(view["rechecks"][0]["verdict"], "REVIEW", "{view}");
    assert_eq!(view["rechecks"][0]["outcome"], "approved_again");
    assert_eq!(
        view["recheck_mark"],
        Value::Null,
        "what the reviewer accepted is no news"
    );

    site.set(Page::Status(503));
    recheck_a_day_later(&app, &session).await;
    let view = rechecked(&app, &quest, 2).await;
    assert_eq!(view["rechecks"][1]["verdict"], "REVIEW", "{view}");
    assert!(
        view["recheck_facts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["actual"] == "HTTP 503" && f["unanswered"] == true),
        "a fact says the world gave no answer: {view}"
    );
    assert_eq!(
        view["recheck_mark"], "unconfirmed",
        "no answer is not wrong: {view}"
    );
    assert_eq!(view["state"], "PASS");
    let status = app.status(&session).await;
    assert_eq!(
        (status["stale"].as_u64(), status["unconfirmed"].as_u64()),
        (Some(0), Some(1))
    );
}

#[tokio::test]
async fn a_recheck_asks_the_world_not_the_session_so_another_quest_holding_the_address_leaves_it_confirmed()
 {
    let site = Site::serve(PAGE).await;
    let app = spawn(None).await;
    let config = json!({"key_column": "company", "gate": {"kind": "email"}});
    let session = app
        .scan(
            config,
            json!([{"company": "Acme"}, {"company": "Acme Inc."}]),
        )
        .await;
    let agent = app.token("agent", "bot").await;
    let mut quests = Vec::new();
    for _ in 0..2 {
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        let answer = app.submit(&agent, &quest, &lease, site.result()).await;
        assert!(answer.status.is_success(), "{}", answer.body);
        quests.push(quest);
    }
    let [first, second] = <[String; 2]>::try_from(quests).unwrap();
    assert_eq!(app.settled(&first).await["state"], "PASS");
    let held = app.settled(&second).await;
    assert_eq!(held["state"], "REVIEW", "{held}");
    let facts = held["last_facts"].as_array().unwrap();
    assert!(
        facts.iter().all(|f| f["check"] == "duplicate"),
        "the second quest is under review for the shared address only: {held}"
    );

    // The page still holds the address; the other quest holds it too, under review.
    recheck_a_day_later(&app, &session).await;
    let view = rechecked(&app, &first, 1).await;
    assert_eq!(view["rechecks"][0]["verdict"], "PASS", "{view}");
    assert_eq!(view["rechecks"][0]["outcome"], "confirmed");
    assert_eq!(view["recheck_mark"], Value::Null);

    // A person accepts the shared address: both quests PASS, and both are
    // confirmed by the world, neither doubted for the other.
    let reviewer = app.token("reviewer", "rita").await;
    approve(&app, &reviewer, &second, "one address for the group").await;
    app.clock.advance(Duration::from_secs(86_400));
    let run = app
        .post(
            &format!("/v1/sessions/{session}/recheck"),
            &app.admin,
            json!({}),
        )
        .await
        .expect(202);
    assert_eq!(run["total"], 2, "{run}");
    let view = rechecked(&app, &first, 2).await;
    assert_eq!(view["rechecks"][1]["outcome"], "confirmed", "{view}");
    assert_eq!(view["recheck_mark"], Value::Null);
    let view = rechecked(&app, &second, 1).await;
    assert_eq!(view["rechecks"][0]["outcome"], "confirmed", "{view}");
    assert_eq!(view["recheck_facts"], json!([]), "{view}");
    let status = app.status(&session).await;
    assert_eq!(
        (status["stale"].as_u64(), status["unconfirmed"].as_u64()),
        (Some(0), Some(0)),
        "{status}"
    );
}

#[tokio::test]
async fn a_page_that_did_not_answer_when_a_person_approved_leaves_the_quest_unconfirmed_when_it_does_not_again()
 {
    let site = Site::serve(PAGE).await;
    site.set(Page::Status(503));
    let app = spawn(None).await;
    let config = json!({"key_column": "company", "gate": {"kind": "email"}});
    let session = app.scan(config, json!([{"company": "Acme"}])).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app.submit(&agent, &quest, &lease, site.result()).await;
    assert!(answer.status.is_success(), "{}", answer.body);
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "REVIEW", "{view}");
    let unwell = view["last_facts"].as_array().unwrap().clone();
    assert_eq!(
        (unwell.len(), &unwell[0]["actual"], &unwell[0]["unanswered"]),
        (1, &json!("HTTP 503"), &json!(true)),
        "{view}"
    );
    // A person knows the address and approves it although the page was down.
    let reviewer = app.token("reviewer", "rita").await;
    approve(&app, &reviewer, &quest, "I called them").await;

    // The page is still down: the world confirms nothing, whatever the person said then.
    recheck_a_day_later(&app, &session).await;
    let view = rechecked(&app, &quest, 1).await;
    let recheck = &view["rechecks"][0];
    assert_eq!(recheck["facts"], json!(unwell), "the same finding: {view}");
    assert_eq!(recheck["outcome"], "unconfirmed", "{view}");
    assert_eq!(view["recheck_mark"], "unconfirmed");
    assert_eq!(view["state"], "PASS");

    // The page is back and holds the address: confirmed, the mark cleared.
    site.set(Page::Html(PAGE.to_owned()));
    recheck_a_day_later(&app, &session).await;
    let view = rechecked(&app, &quest, 2).await;
    assert_eq!(view["rechecks"][1]["outcome"], "confirmed", "{view}");
    assert_eq!(view["recheck_mark"], Value::Null);
}

/// The reviewer claims `quest` and approves it with `note`.
async fn approve(app: &TestApp, reviewer: &str, quest: &str, note: &str) {
    app.post(&format!("/v1/review/{quest}/claim"), reviewer, json!({}))
        .await
        .expect(200);
    app.post(
        &format!("/v1/review/{quest}"),
        reviewer,
        json!({"decision": "approve", "note": note}),
    )
    .await
    .expect(200);
}

/// A day passes, then the admin starts a re-check of `session`.
async fn recheck_a_day_later(app: &TestApp, session: &str) {
    app.clock.advance(Duration::from_secs(86_400));
    app.post(
        &format!("/v1/sessions/{session}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(202);
}
