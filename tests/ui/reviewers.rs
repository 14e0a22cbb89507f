//! Several reviewers in the console (issue 21, point 6): two reviewers open
//! the same quest at once, neither page shows the other's look, a
//! disagreement goes to an adjudicator whose page shows both looks with
//! their notes; over HTTP and in a real browser on the keys.

use serde_json::json;

use crate::console::{
    Browserless, form, get, post, review_page, reviewer_token, sign_in, two_reviewer_quests,
};
use crate::helpers::{TestApp, spawn_app};

async fn adjudicator(app: &TestApp, name: &str) -> String {
    reviewer_token(app, name, true).await
}

/// The review page of `who`: the quest it opens, and the page.
async fn page(app: &TestApp, who: &Browserless) -> (Option<String>, String) {
    review_page(app, who, "/ui/review").await
}

async fn decide(app: &TestApp, who: &Browserless, quest: &str, decision: &str, note: &str) {
    let path = format!("/ui/review/{quest}/decide");
    let fields = form(&[("csrf", &who.csrf), ("decision", decision), ("note", note)]);
    let answer = post(app, &path, Some(who), fields, &[]).await;
    assert!(
        !answer.location().contains("error="),
        "{}",
        answer.location()
    );
}

#[tokio::test]
async fn two_reviewers_look_at_once_apart_and_an_adjudicator_sees_both_looks() {
    let app = spawn_app().await;
    let quest = two_reviewer_quests(&app, 1).await.remove(0);
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let ben = sign_in(&app, &app.token("reviewer", "ben").await).await;
    let cy = sign_in(&app, &adjudicator(&app, "cy").await).await;

    let (for_ana, body) = page(&app, &ana).await;
    assert_eq!(for_ana.as_deref(), Some(quest.as_str()));
    assert!(body.contains("needs 2 reviewers who agree"), "{body}");
    let (for_ben, body) = page(&app, &ben).await;
    assert_eq!(for_ben.as_deref(), Some(quest.as_str()), "two look at once");
    assert!(!body.contains("data-held-by"), "{body}");
    assert!(
        body.contains("Claimed by you"),
        "a look's claim is shown as the reviewer's: {body}"
    );

    decide(&app, &ana, &quest, "approve", "the address is on the page").await;
    let (_, body) = page(&app, &ben).await;
    assert!(
        !body.contains("data-looks"),
        "ben judges without ana's look"
    );
    assert!(!body.contains("the address is on the page"));
    assert_eq!(page(&app, &ana).await.0, None, "ana has nothing left to do");
    decide(&app, &ben, &quest, "reject", "another company's address").await;
    assert_eq!(app.quest(&quest).await["state"], "REVIEW");

    let (for_cy, body) = page(&app, &cy).await;
    assert_eq!(for_cy.as_deref(), Some(quest.as_str()));
    assert!(
        body.contains("The reviewers disagree: you adjudicate"),
        "{body}"
    );
    assert!(
        body.contains("the address is on the page") && body.contains("another company"),
        "{body}"
    );
    decide(&app, &cy, &quest, "reject", "ben is right").await;
    let decided = app.quest(&quest).await;
    assert_eq!(
        (decided["state"].as_str(), decided["decided_by"].as_str()),
        (Some("DONE"), Some("adjudicator:cy"))
    );
    // The quest's page then shows every decision, the adjudication marked.
    let body = get(&app, &format!("/ui/quests/{quest}"), Some(&ben))
        .await
        .expect(200)
        .to_owned();
    assert_eq!(
        crate::console::count(&body, "data-look=\"first\""),
        2,
        "{body}"
    );
    assert_eq!(
        crate::console::count(&body, "data-look=\"adjudication\""),
        1
    ); // The session's page measures the reviewers: cy overruled ana's look.
    let session = decided["session_id"].as_str().unwrap();
    let body = get(&app, &format!("/ui/sessions/{session}"), Some(&cy))
        .await
        .expect(200)
        .to_owned();
    assert!(body.contains("data-reviewers"), "{body}");
    let row = |name: &str| {
        let start = body
            .find(&format!("data-reviewer=\"{name}\""))
            .unwrap_or_else(|| panic!("{name}: {body}"));
        body[start..start + body[start..].find("</tr>").unwrap()].to_owned()
    };
    assert!(
        row("ana").contains("data-overruled=\"1\""),
        "{}",
        row("ana")
    );
    assert!(
        row("ben").contains("data-overruled=\"0\""),
        "{}",
        row("ben")
    );
    assert!(body.contains("data-pair=\"ana|ben\""), "{body}");
    assert!(
        body.contains("fewer than 10 shared quests (1)"),
        "the kappa says why it is missing"
    );
}

/// The session page's reviewers panel: the kappa of two reviewers who
/// decided 12 quests in the console, against one computed by hand.
#[tokio::test]
async fn the_session_page_shows_the_kappa_of_two_reviewers_as_computed_by_hand() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 12).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let ben = sign_in(&app, &app.token("reviewer", "ben").await).await;
    let cy = sign_in(&app, &adjudicator(&app, "cy").await).await;
    // crate::console::kappa_table: kappa 32/68 by hand.
    for (q, (a, b)) in quests.iter().zip(crate::console::kappa_table()) {
        decide(&app, &ana, q, a, "ana's note").await;
        decide(&app, &ben, q, b, "ben's note").await;
        if a != b {
            decide(&app, &cy, q, b, "as ben says").await;
        }
        assert_ne!(
            app.quest(q).await["state"],
            "REVIEW",
            "decided in the console"
        );
    }
    let session = app.quest(&quests[0]).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = get(&app, &format!("/ui/sessions/{session}"), Some(&cy))
        .await
        .expect(200)
        .to_owned();
    let pair = body
        .split("data-pair=\"ana|ben\"")
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("the pair's row: {body}"));
    // po = 9/12; ana rejects 4/12, ben 5/12; pe = (4*5 + 8*7) / 144 = 76/144; kappa = 32/68.
    let kappa: f64 = pair
        .split("data-kappa=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {pair}"));
    assert!((kappa - 32.0 / 68.0).abs() < 1e-9, "{pair}");
    assert!(
        pair.contains(">0.47<") && pair.contains(">75%<") && pair.contains(">12<"),
        "{pair}"
    );
}

/// A third reviewer's page opens the next quest when two look at the
/// oldest already, and the queue says who holds it.
#[tokio::test]
async fn a_third_reviewer_is_sent_past_a_quest_whose_looks_are_all_taken() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 2).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let ben = sign_in(&app, &app.token("reviewer", "ben").await).await;
    let cara = sign_in(&app, &app.token("reviewer", "cara").await).await;
    assert_eq!(
        page(&app, &ana).await.0.as_deref(),
        Some(quests[0].as_str())
    );
    assert_eq!(
        page(&app, &ben).await.0.as_deref(),
        Some(quests[0].as_str())
    );

    let (for_cara, body) = page(&app, &cara).await;
    assert_eq!(
        for_cara.as_deref(),
        Some(quests[1].as_str()),
        "both looks of the oldest are taken: the next one opens"
    );
    let listed = body
        .split(&format!(r#"data-quest-id="{}""#, quests[0]))
        .nth(1)
        .and_then(|rest| rest.split("</li>").next())
        .unwrap_or_else(|| panic!("the oldest is listed: {body}"));
    assert!(
        listed.contains(r#"title="in review by ana and ben""#),
        "the queue says who holds it: {listed}"
    );
    // Asked for by name, it opens as theirs, with no decision offered.
    let (_, body) = review_page(&app, &cara, &format!("/ui/review?quest={}", quests[0])).await;
    assert!(body.contains(r#"data-held-by="ana and ben""#), "{body}");
}

/// In a real browser: the adjudicator's page shows both looks and `a`
/// decides it (held, then recorded when due).
#[tokio::test]
async fn in_the_browser_an_adjudicator_reads_both_looks_and_decides_with_a_key() {
    use crate::browser::{launch, screenshot_on_failure};
    let test = "review_adjudication";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let quest = two_reviewer_quests(&app, 1).await.remove(0);
    for (name, decision, note) in [
        ("ana", "approve", "it is on the contact page"),
        ("ben", "reject", "wrong firm"),
    ] {
        let token = app.token("reviewer", name).await;
        let body = json!({"decision": decision, "note": note});
        app.post(&format!("/v1/review/{quest}"), &token, body)
            .await
            .expect(200);
    }
    let cy = adjudicator(&app, "cy").await;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &cy).await;
        browser.open(&format!("{}/ui/review", app.base)).await;
        let looks = browser
            .js("return Array.from(document.querySelectorAll('[data-looks] li')).map(li => li.innerText)")
            .await;
        let looks = looks.as_array().unwrap();
        assert_eq!(looks.len(), 2, "{looks:?}");
        assert!(looks[0].as_str().unwrap().contains("it is on the contact page"), "{looks:?}");
        assert!(looks[1].as_str().unwrap().contains("wrong firm"), "{looks:?}");
        browser.press('a').await;
        browser
            .until("the decision, held", &format!("return !!document.querySelector('[data-held=\"{quest}\"]')"))
            .await;
        let decided = app.fall_due(&quest).await;
        assert_eq!((decided["state"].as_str(), decided["decided_by"].as_str()), (Some("PASS"), Some("adjudicator:cy")));
    })
    .await;
}

/// In two real browsers: ana and ben each press `a` on the quest both
/// opened; ben's page never shows ana's look, and their agreement decides it.
#[tokio::test]
async fn in_two_browsers_two_reviewers_agree_without_seeing_each_others_look() {
    use crate::browser::{launch_two, screenshot_on_failure};
    let test = "review_two_agree";
    let Some((for_ana, for_ben)) = launch_two(test).await else {
        return;
    };
    let app = spawn_app().await;
    let quest = two_reviewer_quests(&app, 1).await.remove(0);
    let ana = app.token("reviewer", "ana").await;
    let ben = app.token("reviewer", "ben").await;
    let current =
        "return (document.querySelector('[data-review-current]') || {dataset: {}}).dataset.questId";
    let looks = "return document.querySelectorAll('[data-looks]').length";
    screenshot_on_failure(test, &[&for_ana, &for_ben], async {
        for (browser, token) in [(&for_ana, &ana), (&for_ben, &ben)] {
            browser.sign_in(&app.base, token).await;
            browser.open(&format!("{}/ui/review", app.base)).await;
            assert_eq!(
                browser.js(current).await,
                quest.as_str(),
                "both open it at once"
            );
        }
        for_ana.press('a').await;
        for_ana
            .until(
                "ana's look, held",
                &format!("return !!document.querySelector('[data-held=\"{quest}\"]')"),
            )
            .await;
        // Recorded once due; the quest waits for its second look.
        app.clock.advance(std::time::Duration::from_secs(6));
        for _ in 0..1500 {
            if app.quest(&quest).await["reviews"]
                .as_array()
                .is_some_and(|r| r.len() == 1)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(
            app.quest(&quest).await["state"],
            "REVIEW",
            "one look of two decides nothing"
        );
        for_ben.open(&format!("{}/ui/review", app.base)).await;
        assert_eq!(for_ben.js(current).await, quest.as_str());
        assert_eq!(for_ben.js(looks).await, 0, "ben judges without ana's look");
        let text = for_ben.js("return document.body.innerText").await;
        assert!(
            text.as_str()
                .unwrap()
                .contains("needs 2 reviewers who agree"),
            "{text}"
        );
        for_ben.press('a').await;
        for_ben
            .until(
                "ben's look, held",
                &format!("return !!document.querySelector('[data-held=\"{quest}\"]')"),
            )
            .await;
        let decided = app.fall_due(&quest).await;
        assert_eq!(
            (decided["state"].as_str(), decided["decided_by"].as_str()),
            (Some("PASS"), Some("reviewers:ana,ben"))
        );
    })
    .await;
}

/// A bulk approval is one first look on each quest it lists, hidden like any
/// other from viewer and agent tokens until a second reviewer decides.
#[tokio::test]
async fn a_bulk_decision_is_one_first_look_each_and_stays_hidden_until_decided() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 2).await;
    let session = app.quest(&quests[0]).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let fields = [
        ("csrf", ana.csrf.as_str()),
        ("decision", "approve"),
        ("session", session.as_str()),
        ("quest", quests[0].as_str()),
        ("quest", quests[1].as_str()),
        ("note", "all fine"),
    ];
    post(&app, "/ui/review/bulk", Some(&ana), form(&fields), &[])
        .await
        .expect(200);
    let viewer = app.token("viewer", "vera").await;
    let agent = app.token("agent", "another agent").await;
    for q in &quests {
        let seen = app.quest(q).await;
        assert_eq!(seen["state"], "REVIEW", "one look of two: {seen}");
        assert_eq!(
            seen["reviews"].as_array().unwrap().len(),
            1,
            "one look each"
        );
        for (who, token) in [("viewer", &viewer), ("agent", &agent)] {
            let view = app.get(&format!("/v1/quests/{q}"), token).await.expect(200);
            assert_eq!(view["reviews"], json!([]), "{who} sees no look: {view}");
        }
    }
    let ben = app.token("reviewer", "ben").await;
    let body = json!({"decision": "approve", "note": ""});
    let decided = app
        .post(&format!("/v1/review/{}", quests[0]), &ben, body)
        .await
        .expect(200);
    assert_eq!(
        (decided["state"].as_str(), decided["decided_by"].as_str()),
        (Some("PASS"), Some("reviewers:ana,ben"))
    );
    let view = app
        .get(&format!("/v1/quests/{}", quests[0]), &viewer)
        .await
        .expect(200);
    assert_eq!(
        view["reviews"].as_array().unwrap().len(),
        2,
        "decided: every look shows"
    );
}
