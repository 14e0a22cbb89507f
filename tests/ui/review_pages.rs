//! The review page over HTTP: who may open it, the claim a reviewer takes by
//! opening a quest, skips, single and bulk decisions, and the AI verifiers'
//! answers beside the decision with the queue filtered by check.

use reqwest::StatusCode;
use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn a_viewer_is_refused_the_review_page_and_every_decision_and_nothing_changes() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    let review = get(&app, "/ui/review", Some(&vera)).await;
    assert_eq!(review.status, StatusCode::FORBIDDEN);
    assert!(
        review.body.contains("reviewer"),
        "the refusal names the role: {}",
        review.body
    );
    let page = get(&app, &format!("/ui/quests/{quest}"), Some(&vera)).await;
    assert!(
        !page.expect(200).contains("Review this quest"),
        "a viewer is offered no decision"
    );
    for path in [
        format!("/ui/review/{quest}/decide"),
        "/ui/review/bulk".to_owned(),
    ] {
        let body = form(&[
            ("csrf", &vera.csrf),
            ("decision", "approve"),
            ("quest", &quest),
        ]);
        assert_eq!(
            post(&app, &path, Some(&vera), body, &[]).await.status,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    let after = app.quest(&quest).await;
    assert_eq!(
        (
            after["state"].as_str(),
            after["reviews"].as_array().unwrap().len()
        ),
        (Some("REVIEW"), 0)
    );
}

#[tokio::test]
async fn opening_a_quest_claims_it_and_a_second_reviewer_sees_the_claim_and_no_decision() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let ids = reviews(&app, &agent, &session, 2).await;
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;
    let bob = sign_in(&app, &app.token("reviewer", "bob").await).await;
    let page = get(&app, "/ui/review", Some(&alice)).await;
    let body = page.expect(200);
    assert!(
        body.contains(&format!(
            r#"data-review-current data-quest-id="{}""#,
            ids[0]
        )),
        "{body}"
    );
    assert_eq!(app.quest(&ids[0]).await["review_claimed_by"], "alice");
    assert!(
        page.plain()
            .contains(&format!(r#"action="/ui/review/{}/decide""#, ids[0]))
    );

    let theirs = get(&app, &format!("/ui/review?quest={}", ids[0]), Some(&bob)).await;
    let body = theirs.expect(200);
    assert!(body.contains("In review by alice"), "{body}");
    assert!(
        !theirs
            .plain()
            .contains(&format!(r#"action="/ui/review/{}/decide""#, ids[0])),
        "no decision offered"
    );
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by"],
        "alice",
        "bob's look took nothing"
    );
    // By default bob gets the quest nobody holds.
    let next = get(&app, "/ui/review", Some(&bob)).await;
    assert!(next.expect(200).contains(&format!(
        r#"data-review-current data-quest-id="{}""#,
        ids[1]
    )));
    assert_eq!(app.quest(&ids[1]).await["review_claimed_by"], "bob");

    // A skip gives alice's claim back and opens the next quest.
    let skip = post(
        &app,
        &format!("/ui/review/{}/release", ids[0]),
        Some(&alice),
        form(&[("csrf", &alice.csrf), ("to", &ids[1])]),
        &[],
    )
    .await;
    assert_eq!(skip.location(), format!("/ui/review?quest={}", ids[1]));
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by"],
        serde_json::Value::Null
    );
    // A reject needs its note; without one it is refused, says why, and changes nothing.
    let path = format!("/ui/review/{}/decide", ids[1]);
    let body = form(&[("csrf", &bob.csrf), ("decision", "reject"), ("note", " ")]);
    let refused = post(&app, &path, Some(&bob), body, &[]).await;
    assert_eq!(
        refused.location(),
        format!("/ui/review?quest={}&error=note_required", ids[1])
    );
    let shown = get(&app, refused.location(), Some(&bob)).await;
    assert!(shown.expect(200).contains("A rejection needs a note"));
    assert_eq!(app.quest(&ids[1]).await["state"], "REVIEW");
    let body = form(&[
        ("csrf", &bob.csrf),
        ("decision", "reject"),
        ("note", "wrong company"),
    ]);
    assert_eq!(
        post(&app, &path, Some(&bob), body, &[]).await.location(),
        format!("/ui/review?last={}", ids[1])
    );
    let after = app.quest(&ids[1]).await;
    assert_eq!(
        (
            after["state"].as_str(),
            after["reviews"][0]["note"].as_str()
        ),
        (Some("DONE"), Some("wrong company"))
    );
    assert_eq!(after["reviews"][0]["reviewer"], "bob");
}

#[tokio::test]
async fn a_bulk_decision_decides_exactly_the_confirmed_quests_and_leaves_others_claims_alone() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 10).await;
    let ids = reviews(&app, &agent, &session, 4).await;
    let bob = app.token("reviewer", "bob").await;
    app.post(&format!("/v1/review/{}/claim", ids[3]), &bob, json!({}))
        .await
        .expect(200);
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;

    let confirm = get(
        &app,
        &format!("/ui/review/bulk?decision=reject&session={session}"),
        Some(&alice),
    )
    .await;
    let body = confirm.expect(200).to_owned();
    assert!(
        body.contains("Reject <span data-bulk-count>3</span> quests?"),
        "{body}"
    );
    assert!(
        body.contains("1 quest is in review by other reviewers and will be left alone"),
        "{body}"
    );
    let listed: Vec<&str> = body
        .match_indices(r#"name="quest" value=""#)
        .map(|(at, m)| &body[at + m.len()..at + m.len() + 36])
        .collect();
    assert_eq!(listed, &ids[..3]);
    // A quest that reaches REVIEW after the confirmation is not part of it.
    let late = reviews(&app, &agent, &session, 1).await.remove(0);

    let mut fields: Vec<(&str, &str)> = vec![
        ("csrf", &alice.csrf),
        ("decision", "reject"),
        ("session", &session),
    ];
    fields.extend(listed.iter().map(|id| ("quest", *id)));
    fields.push(("quest", &ids[3])); // claimed by bob since: left alone, and said so
    let no_note = post(&app, "/ui/review/bulk", Some(&alice), form(&fields), &[]).await;
    assert_eq!(
        no_note.location(),
        format!("/ui/review/bulk?session={session}&decision=reject&error=note_required")
    );
    for id in &ids {
        assert_eq!(
            app.quest(id).await["state"],
            "REVIEW",
            "a refused bulk run decides nothing"
        );
    }
    fields.push(("note", "not their address"));
    let done = post(&app, "/ui/review/bulk", Some(&alice), form(&fields), &[]).await;
    let body = done.expect(200);
    assert!(
        body.contains("Rejected <span data-bulk-decided>3</span> quests"),
        "{body}"
    );
    assert!(body.contains("in review by bob"), "{body}");
    for id in &ids[..3] {
        let q = app.quest(id).await;
        assert_eq!(
            (q["state"].as_str(), q["reviews"][0]["note"].as_str()),
            (Some("DONE"), Some("not their address"))
        );
        assert_eq!(q["reviews"][0]["reviewer"], "alice");
    }
    assert_eq!(app.quest(&ids[3]).await["state"], "REVIEW");
    assert_eq!(app.quest(&late).await["state"], "REVIEW");
}

#[tokio::test]
async fn the_quest_and_review_pages_show_each_ai_verifiers_answer_with_its_reason_and_filter_by_check()
 {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("judge.sh");
    std::fs::write(
        &script,
        "request=$(cat)\ncase \"$request\" in\n  *gmail.test*) echo '{\"answer\": \"yes\", \"reason\": \"a free-mail <b>inbox</b>\"}' ;;\n  *) echo '{\"answer\": \"no\", \"reason\": \"own domain\"}' ;;\nesac\n",
    )
    .unwrap();
    let toml = format!(
        "[verifiers.local]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"{}\"]\nenv = [\"PATH\"]\nmodel = \"house-rules\"\ntimeout_ms = 10000\n",
        script.display()
    );
    let app = crate::helpers::spawn_app_with(&toml).await;
    let mut config = crate::helpers::contact_config(3);
    config["verify"] = json!({"verifiers": ["local"], "questions": ["Is the address a personal one rather than the company's own?"]});
    let session = app.scan(config, crate::helpers::companies(3)).await;
    let agent = app.token("agent", "bot").await;
    let (flagged, _) = work(
        &app,
        &agent,
        &session,
        "bot",
        json!({"email": "boss@gmail.test"}),
    )
    .await;
    let (held, _) = work(
        &app,
        &agent,
        &session,
        "bot",
        json!({"email": "x@firm.test", "confidence": "low"}),
    )
    .await;
    assert_eq!(app.settled(&flagged).await["state"], "REVIEW");
    assert_eq!(app.settled(&held).await["state"], "REVIEW");
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;

    let page = get(&app, &format!("/ui/quests/{flagged}"), Some(&alice)).await;
    let body = page.expect(200);
    for shown in [
        "<strong>local</strong>",
        "house-rules",
        "Is the address a personal one rather than the company&#x27;s own?",
        "a free-mail &lt;b&gt;inbox&lt;&#x2f;b&gt;",
        "flagged",
    ] {
        assert!(
            body.contains(shown),
            "the quest page shows `{shown}`: {body}"
        );
    }
    // The review page, filtered as the API's queue: only the quest the verifier doubted.
    let review = get(
        &app,
        &format!("/ui/review?session={session}&check=l2%3A%2A"),
        Some(&alice),
    )
    .await;
    let body = review.expect(200);
    assert!(
        body.contains(&format!(r#"data-review-current data-quest-id="{flagged}""#)),
        "{body}"
    );
    assert!(
        body.contains("a free-mail &lt;b&gt;inbox&lt;"),
        "the answer beside the decision"
    );
    assert_eq!(
        count(body, "data-quest-id=\""),
        2,
        "the current quest, and a queue of one: {body}"
    );
    let other = get(&app, "/ui/review?check=review_when", Some(&alice)).await;
    assert!(
        other
            .expect(200)
            .contains(&format!(r#"data-review-current data-quest-id="{held}""#))
    );
    let none = get(&app, "/ui/review?check=nothing-like-this", Some(&alice)).await;
    assert!(none.expect(200).contains("Nothing to review"));
}

#[tokio::test]
async fn a_decision_the_store_refuses_comes_back_to_the_page_as_that_refusal_and_changes_nothing() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;
    let bob = sign_in(&app, &app.token("reviewer", "bob").await).await;
    get(&app, &format!("/ui/review?quest={quest}"), Some(&alice))
        .await
        .expect(200);
    let path = format!("/ui/review/{quest}/decide");
    let approve =
        |who: &crate::console::Browserless| form(&[("csrf", &who.csrf), ("decision", "approve")]);
    let claimed = post(&app, &path, Some(&bob), approve(&bob), &[]).await;
    assert_eq!(
        claimed.location(),
        format!("/ui/review?quest={quest}&error=review_claimed")
    );
    let shown = get(&app, claimed.location(), Some(&bob)).await;
    assert!(
        shown
            .expect(200)
            .contains("Another reviewer holds this quest now")
    );
    assert_eq!(
        app.quest(&quest).await["state"],
        "REVIEW",
        "bob decided nothing"
    );

    let decided = post(&app, &path, Some(&alice), approve(&alice), &[]).await;
    assert_eq!(decided.location(), format!("/ui/review?last={quest}"));
    let late = post(&app, &path, Some(&alice), approve(&alice), &[]).await;
    assert_eq!(
        late.location(),
        format!("/ui/review?quest={quest}&error=not_in_review")
    );
    let after = app.quest(&quest).await;
    assert_eq!(after["state"], "PASS");
    assert_eq!(after["reviews"].as_array().unwrap().len(), 1);
}
