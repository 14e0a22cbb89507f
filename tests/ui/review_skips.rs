//! Skip means skip (issue 21, point 1): a skipped quest's claim goes back and
//! it comes again only after every other quest was offered, the one skipped
//! longest ago first; a reload keeps the skips, a new browser session has none.

use crate::console::*;
use crate::helpers::spawn_app;
use quest::service::REVIEW_CLAIM_SECONDS;

/// The quest the review page opens.
async fn current(app: &crate::helpers::TestApp, who: &Browserless) -> String {
    let page = get(app, "/ui/review", Some(who)).await;
    let body = page.expect(200);
    body.split(r#"data-review-current data-quest-id=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no current quest: {body}"))
        .to_owned()
}

async fn skip(app: &crate::helpers::TestApp, who: &Browserless, quest: &str) {
    // A reviewer takes a moment over each quest: skips are ordered by their time.
    app.clock.advance(std::time::Duration::from_secs(1));
    let path = format!("/ui/review/{quest}/release");
    let answer = post(
        app,
        &path,
        Some(who),
        form(&[("csrf", &who.csrf), ("skip", "1")]),
        &[],
    )
    .await;
    assert_eq!(
        answer.location(),
        "/ui/review",
        "the page picks what comes next"
    );
}

async fn approve(app: &crate::helpers::TestApp, who: &Browserless, quest: &str) {
    let path = format!("/ui/review/{quest}/decide");
    let body = form(&[("csrf", &who.csrf), ("decision", "approve")]);
    assert_eq!(
        post(app, &path, Some(who), body, &[]).await.location(),
        format!("/ui/review?last={quest}")
    );
}

#[tokio::test]
async fn skip_skip_approve_approve_comes_back_to_the_first_skipped_not_the_last() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 5).await;
    let ids = reviews(&app, &agent, &session, 5).await;
    let token = app.token("reviewer", "ana").await;
    let ana = sign_in(&app, &token).await;

    assert_eq!(current(&app, &ana).await, ids[0]);
    skip(&app, &ana, &ids[0]).await;
    assert_eq!(
        app.quest(&ids[0]).await["review_claimed_by"],
        serde_json::Value::Null,
        "a skip gives the claim back"
    );
    assert_eq!(current(&app, &ana).await, ids[1]);
    skip(&app, &ana, &ids[1]).await;
    assert_eq!(current(&app, &ana).await, ids[2]);
    // A reload after ana's claim on it has ended: were the skips lost, the
    // oldest (ids[0]) would open.
    let claim_ends = std::time::Duration::from_secs(u64::from(REVIEW_CLAIM_SECONDS) + 1);
    app.clock.advance(claim_ends);
    assert_eq!(
        current(&app, &ana).await,
        ids[2],
        "a reload keeps the skips"
    );
    approve(&app, &ana, &ids[2]).await;
    assert_eq!(current(&app, &ana).await, ids[3]);
    approve(&app, &ana, &ids[3]).await;
    assert_eq!(
        current(&app, &ana).await,
        ids[4],
        "every unskipped quest first"
    );
    approve(&app, &ana, &ids[4]).await;
    assert_eq!(
        current(&app, &ana).await,
        ids[0],
        "then the one skipped longest ago"
    );
    skip(&app, &ana, &ids[0]).await;
    assert_eq!(
        current(&app, &ana).await,
        ids[1],
        "skipped again, ids[0] is now the latest"
    );

    // The skips are this browser session's: a new sign-in with the same
    // token starts with none. (Were they the token's, ids[1], skipped longest
    // ago, would open.)
    app.clock.advance(claim_ends);
    let again = sign_in(&app, &token).await;
    assert_eq!(
        current(&app, &again).await,
        ids[0],
        "the oldest, skipped or not in another browser session"
    );
}

/// The same in a real browser on the keys: `s`, `s`, `a`, `a` opens a quest
/// not yet offered, not the first one skipped, and a reload keeps it so.
#[tokio::test]
async fn in_the_browser_s_s_a_a_opens_a_quest_not_yet_offered_and_a_reload_keeps_the_skips() {
    use crate::browser::{launch, screenshot_on_failure};
    let test = "review_skips";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 5).await;
    let ids = reviews(&app, &agent, &session, 5).await;
    let ana = app.token("reviewer", "ana").await;
    let current =
        "return (document.querySelector('[data-review-current]') || {dataset: {}}).dataset.questId";
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &ana).await;
        browser
            .open(&format!("{}/ui/review?session={session}", app.base))
            .await;
        assert_eq!(browser.js(current).await, ids[0].as_str());
        for (key, then) in [('s', 1), ('s', 2), ('a', 3), ('a', 4)] {
            browser.press(key).await;
            browser
                .until(
                    &format!("quest {then} after `{key}`"),
                    &format!("{current} === '{}'", ids[then]),
                )
                .await;
        }
        assert_eq!(app.fall_due(&ids[2]).await["state"], "PASS");
        assert_eq!(
            app.quest(&ids[0]).await["review_claimed_by"],
            serde_json::Value::Null
        );
        // Once ana's claim on it has ended, a reload opens it again: were
        // the skips lost, the oldest (ids[0]) would open.
        app.clock.advance(std::time::Duration::from_secs(
            u64::from(REVIEW_CLAIM_SECONDS) + 1,
        ));
        browser
            .open(&format!("{}/ui/review?session={session}", app.base))
            .await;
        assert_eq!(
            browser.js(current).await,
            ids[4].as_str(),
            "a reload keeps the skips"
        );
    })
    .await;
}
