//! One slip is not final at once (issue 21, point 2): a decision made with the
//! review page's keys (`held=1`) is held for the session's undo window, the
//! reviewer keeps the claim, `undo` deletes it before it is due, and then the
//! held-decision worker records it through the ordinary decide. The forms
//! without JavaScript, the API and a window of 0 decide at once. Plain HTTP
//! against the console; both backends.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::console::{Browserless, Page, form, post, review_page, reviews, session, sign_in};
use crate::helpers::{TestApp, contact_config, spawn_app, spawn_app_in, spawn_app_tuned};
use quest::workers::held_reviews::{self, Step};

/// Decides `quest` on the review page: with the keys (`held`) or the form.
async fn decide(app: &TestApp, who: &Browserless, quest: &str, held: bool) -> Page {
    let path = format!("/ui/review/{quest}/decide");
    let mut fields = vec![("csrf", who.csrf.as_str()), ("decision", "approve")];
    if held {
        fields.push(("held", "1"));
    }
    post(app, &path, Some(who), form(&fields), &[]).await
}

async fn undo(app: &TestApp, who: &Browserless, quest: &str) -> Page {
    let path = format!("/ui/review/{quest}/undo");
    post(app, &path, Some(who), form(&[("csrf", &who.csrf)]), &[]).await
}

fn reviews_of(quest: &Value) -> usize {
    quest["reviews"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_key_decision_is_held_can_be_undone_and_is_recorded_once_due() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let ids = reviews(&app, &agent, &session, 3).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    assert_eq!(
        review_page(&app, &ana, "/ui/review").await.0.as_deref(),
        Some(ids[0].as_str())
    );

    // Held: the page moves on, nothing is recorded, the claim stays ana's.
    assert_eq!(
        decide(&app, &ana, &ids[0], true).await.location(),
        "/ui/review"
    );
    let q = app.quest(&ids[0]).await;
    assert_eq!(
        (q["state"].as_str(), q["review_claimed_by"].as_str()),
        (Some("REVIEW"), Some("ana"))
    );
    assert_eq!(
        reviews_of(&q),
        0,
        "a held decision is not part of the audit trail"
    );
    let (current, body) = review_page(&app, &ana, "/ui/review").await;
    assert_eq!(
        current.as_deref(),
        Some(ids[1].as_str()),
        "the held quest is not offered again"
    );
    assert!(
        body.contains(&format!(r#"data-held="{}""#, ids[0])),
        "the page offers to undo it"
    );
    assert!(body.contains("Approved"), "{body}");

    // Undone: the quest opens again, still ana's, and nothing was recorded.
    let answer = undo(&app, &ana, &ids[0]).await;
    assert_eq!(
        answer.location(),
        format!("/ui/review?quest={0}&undone={0}", ids[0])
    );
    let (current, body) = review_page(&app, &ana, answer.location()).await;
    assert_eq!(current.as_deref(), Some(ids[0].as_str()));
    assert!(body.contains("data-undone"), "{body}");
    assert!(!body.contains("data-held="), "nothing left to undo");
    let q = app.quest(&ids[0]).await;
    assert_eq!(
        (q["state"].as_str(), q["review_claimed_by"].as_str()),
        (Some("REVIEW"), Some("ana"))
    );
    assert_eq!(
        undo(&app, &ana, &ids[0]).await.location(),
        "/ui/review?error=undo_too_late",
        "nothing to undo twice"
    );

    // Left alone, it is recorded when due, as ana's decision, once.
    assert_eq!(
        decide(&app, &ana, &ids[0], true).await.location(),
        "/ui/review"
    );
    let q = app.fall_due(&ids[0]).await;
    assert_eq!(
        (q["state"].as_str(), q["decided_by"].as_str()),
        (Some("PASS"), Some("reviewer:ana"))
    );
    assert_eq!(reviews_of(&q), 1);
    assert_eq!(
        (
            q["reviews"][0]["reviewer"].as_str(),
            q["reviews"][0]["decision"].as_str()
        ),
        (Some("ana"), Some("approve"))
    );
    let page = undo(&app, &ana, &ids[0]).await;
    assert_eq!(
        page.location(),
        "/ui/review?error=undo_too_late",
        "too late once recorded"
    );
    let (_, body) = review_page(&app, &ana, page.location()).await;
    assert!(body.contains("Too late to undo"), "{body}");

    // The form without JavaScript decides at once.
    assert_eq!(
        decide(&app, &ana, &ids[1], false).await.location(),
        format!("/ui/review?last={}", ids[1])
    );
    assert_eq!(app.quest(&ids[1]).await["state"], "PASS");
}

#[tokio::test]
async fn an_undo_window_of_0_records_a_key_decision_at_once_and_601_is_refused() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["review"] = json!({"undo_seconds": 0});
    let session = app.scan(config.clone(), crate::helpers::companies(2)).await;
    let agent = app
        .token("agent", &crate::console::agent_token_name(&session))
        .await;
    let ids = reviews(&app, &agent, &session, 1).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    review_page(&app, &ana, "/ui/review").await;
    assert_eq!(
        decide(&app, &ana, &ids[0], true).await.location(),
        format!("/ui/review?last={}", ids[0])
    );
    assert_eq!(app.quest(&ids[0]).await["state"], "PASS");

    config["review"] = json!({"undo_seconds": 601});
    let items = crate::helpers::companies(1);
    let answer = app
        .post(
            "/v1/sessions",
            &app.admin,
            json!({"config": config, "items": items}),
        )
        .await;
    answer.refused(422, "invalid_config");
    assert!(
        answer
            .body
            .to_string()
            .contains("config.review.undo_seconds"),
        "{}",
        answer.body
    );
}

/// A decision that can no longer be recorded when due (the claim lapsed, and
/// another reviewer decided the quest) records nothing, and the page says so once.
#[tokio::test]
async fn a_held_decision_refused_when_due_records_nothing_and_the_page_says_so_once() {
    // No workers: the test takes the worker's step itself, at the moment it chooses.
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| c.workers = false).await;
    let (session, agent) = session(&app, 2).await;
    let ids = reviews(&app, &agent, &session, 1).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let ben = sign_in(&app, &app.token("reviewer", "ben").await).await;
    review_page(&app, &ana, "/ui/review").await;
    decide(&app, &ana, &ids[0], true).await;
    // Past ana's claim (15 minutes from opening the quest): ben may take it.
    app.clock.advance(std::time::Duration::from_secs(16 * 60));
    assert_eq!(
        review_page(&app, &ben, "/ui/review").await.0.as_deref(),
        Some(ids[0].as_str())
    );
    let path = format!("/ui/review/{}/decide", ids[0]);
    let reject = form(&[
        ("csrf", &ben.csrf),
        ("decision", "reject"),
        ("note", "wrong firm"),
    ]);
    let answer = post(&app, &path, Some(&ben), reject, &[]).await;
    assert_eq!(
        answer.location(),
        format!("/ui/review?last={}", ids[0]),
        "{}",
        answer.body
    );
    assert_eq!(app.quest(&ids[0]).await["state"], "DONE");

    let step = held_reviews::run_once(app.store.as_ref(), &CancellationToken::new()).await;
    assert_eq!(
        step,
        Some(Step {
            recorded: 0,
            dropped: 1
        })
    );
    let q = app.quest(&ids[0]).await;
    assert_eq!(
        (
            q["state"].as_str(),
            q["decided_by"].as_str(),
            reviews_of(&q)
        ),
        (Some("DONE"), Some("reviewer:ben"), 1)
    );
    let (_, body) = review_page(&app, &ana, "/ui/review").await;
    assert!(
        body.contains(&format!(r#"data-not-recorded="{}""#, ids[0])),
        "{body}"
    );
    assert!(body.contains("no longer in review"), "{body}");
    let (_, body) = review_page(&app, &ana, "/ui/review").await;
    assert!(!body.contains("data-not-recorded"), "said once");
    assert_eq!(
        held_reviews::run_once(app.store.as_ref(), &CancellationToken::new()).await,
        Some(Step::default()),
        "nothing left"
    );
}

/// A decision held when the server stops is recorded after the next start.
#[tokio::test]
async fn a_held_decision_outlives_a_restart_and_is_recorded_when_due() {
    let (dir, quest) = held_then_stopped().await;
    let app = spawn_app_in(dir).await;
    let q = app.fall_due(&quest).await;
    assert_eq!(
        (q["state"].as_str(), q["decided_by"].as_str()),
        (Some("PASS"), Some("reviewer:ana"))
    );
}

/// A server with ana's decision held on a quest in review, stopped: its data
/// dir, and the quest.
async fn held_then_stopped() -> (tempfile::TempDir, String) {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    review_page(&app, &ana, "/ui/review").await;
    decide(&app, &ana, &quest, true).await;
    assert_eq!(app.quest(&quest).await["state"], "REVIEW", "held");
    (app.stop().await, quest)
}

/// A decision that fell due while the server was down is recorded at start,
/// with no time passing after it.
#[tokio::test]
async fn a_decision_due_while_the_server_was_down_is_recorded_at_start() {
    let (dir, quest) = held_then_stopped().await;
    // The server comes back a minute later: the 5 s window is long past.
    let clock = std::sync::Arc::new(quest::testing::ManualClock::new());
    clock.advance(std::time::Duration::from_secs(60));
    let app = crate::helpers::spawn_app_in_clocked(dir, clock).await;
    let mut state = Value::Null;
    for _ in 0..1500 {
        state = app.quest(&quest).await["state"].clone();
        if state != "REVIEW" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(state, "PASS", "recorded at start, the clock unmoved");
    assert_eq!(app.quest(&quest).await["decided_by"], "reviewer:ana");
}

/// With several reviewers, each holds a decision of their own on one quest,
/// and both are recorded when due.
#[tokio::test]
async fn two_reviewers_hold_their_looks_on_one_quest_and_both_are_recorded() {
    let app = spawn_app().await;
    let quest = crate::console::two_reviewer_quests(&app, 1).await.remove(0);
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let ben = sign_in(&app, &app.token("reviewer", "ben").await).await;
    for who in [&ana, &ben] {
        assert_eq!(
            review_page(&app, who, "/ui/review").await.0.as_deref(),
            Some(quest.as_str())
        );
        assert_eq!(
            decide(&app, who, &quest, true).await.location(),
            "/ui/review"
        );
        // A reviewer takes a moment: the looks are ordered by their time.
        app.clock.advance(std::time::Duration::from_secs(1));
    }
    let (_, body) = review_page(&app, &ana, "/ui/review").await;
    assert!(
        body.contains(&format!(r#"data-held="{quest}""#)),
        "ana's is still hers to undo"
    );
    let q = app.fall_due(&quest).await;
    assert_eq!(
        (q["state"].as_str(), q["decided_by"].as_str()),
        (Some("PASS"), Some("reviewers:ana,ben"))
    );
}

/// A look held while the other reviewers came to disagree is not recorded
/// as an adjudication when due: its reviewer never read their notes.
#[tokio::test]
async fn a_held_look_is_not_recorded_as_an_adjudication_when_the_looks_disagreed_meanwhile() {
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| c.workers = false).await;
    let mut config = contact_config(3);
    config["review"] = json!({"reviewers": 3});
    let session = app.scan(config, crate::helpers::companies(2)).await;
    let agent = app
        .token("agent", &crate::console::agent_token_name(&session))
        .await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    // The admin may adjudicate: its held look must not become one.
    let admin = sign_in(&app, &app.admin).await;
    review_page(&app, &admin, "/ui/review").await;
    decide(&app, &admin, &quest, true).await;
    for (name, decision) in [("ana", "approve"), ("ben", "reject")] {
        let token = app.token("reviewer", name).await;
        let body = json!({"decision": decision, "note": "looked"});
        app.post(&format!("/v1/review/{quest}"), &token, body)
            .await
            .expect(200);
    }
    app.clock.advance(std::time::Duration::from_secs(60));
    let step = held_reviews::run_once(app.store.as_ref(), &CancellationToken::new()).await;
    assert_eq!(
        step,
        Some(Step {
            recorded: 0,
            dropped: 1
        })
    );
    assert_eq!(
        app.quest(&quest).await["state"],
        "REVIEW",
        "it waits for an adjudicator who read the looks"
    );
    let (_, body) = review_page(&app, &admin, "/ui/review").await;
    assert!(body.contains("an adjudicator decides it now"), "{body}");
}
