//! One slip is not final at once (issue 21, point 2), in a real browser:
//! `a` holds the approval for the session's undo window (here 1 second),
//! `z` undoes it and opens the quest again, and a decision left alone is
//! recorded when due. The server's clock is the test's: "due" is when the
//! test moves it, so no duration is asserted.

use serde_json::json;

use crate::browser::{launch, screenshot_on_failure};
use crate::console::{agent_token_name, reviews};
use crate::helpers::{companies, contact_config, spawn_app};

#[tokio::test]
async fn a_then_z_undoes_the_approval_and_a_decision_left_alone_is_recorded() {
    let test = "review_undo";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["review"] = json!({"undo_seconds": 1});
    let session = app.scan(config, companies(3)).await;
    let agent = app.token("agent", &agent_token_name(&session)).await;
    let ids = reviews(&app, &agent, &session, 2).await;
    let ana = app.token("reviewer", "ana").await;
    let current =
        "return (document.querySelector('[data-review-current]') || {dataset: {}}).dataset.questId";
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &ana).await;
        browser
            .open(&format!("{}/ui/review?session={session}", app.base))
            .await;
        assert_eq!(browser.js(current).await, ids[0].as_str());

        browser.press('a').await;
        browser
            .until(
                "the next quest, with the approval held",
                &format!(
                    "{current} === '{}' && !!document.querySelector('[data-held=\"{}\"]')",
                    ids[1], ids[0]
                ),
            )
            .await;
        let held = app.quest(&ids[0]).await;
        assert_eq!(
            (held["state"].as_str(), held["review_claimed_by"].as_str()),
            (Some("REVIEW"), Some("ana"))
        );

        browser.press('z').await;
        browser
            .until(
                "the undone quest, open again",
                &format!(
                    "{current} === '{}' && !!document.querySelector('[data-undone]')",
                    ids[0]
                ),
            )
            .await;
        let undone = app.quest(&ids[0]).await;
        assert_eq!(
            (
                undone["state"].as_str(),
                undone["review_claimed_by"].as_str()
            ),
            (Some("REVIEW"), Some("ana"))
        );
        assert_eq!(undone["reviews"], json!([]), "nothing was recorded");

        // Approved again and left alone: recorded when due.
        browser.press('a').await;
        browser
            .until(
                "the approval held again",
                &format!(
                    "return !!document.querySelector('[data-held=\"{}\"]')",
                    ids[0]
                ),
            )
            .await;
        let recorded = app.fall_due(&ids[0]).await;
        assert_eq!(
            (recorded["state"].as_str(), recorded["decided_by"].as_str()),
            (Some("PASS"), Some("reviewer:ana"))
        );
        // The notice goes by itself once its second is over.
        browser
            .until(
                "the undo notice gone",
                "return !document.querySelector('[data-held]')",
            )
            .await;
    })
    .await;
}
