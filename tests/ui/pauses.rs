//! A paused token on a session's page, in a real browser: the admin clicks
//! Resume and the token's `next` leases again.

use fantoccini::Locator;
use serde_json::json;

use crate::browser::{launch, screenshot_on_failure};
use crate::helpers::{assigned, companies, contact_config, spawn_app};

#[tokio::test]
async fn an_admin_clicks_resume_on_the_session_page_and_the_paused_token_works_again() {
    let test = "resume_pause";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let mut config = contact_config(1);
    config["max_consecutive_done"] = json!(2);
    let session = app.scan(config, companies(5)).await;
    let bot = app.token("agent", "bot").await;
    // One try each: two FAILs end two quests DONE in a row, which pauses the token.
    for _ in 0..2 {
        let (quest, lease) = assigned(&app.next(&bot, &session, "inventing").await);
        let answer = app
            .submit(&bot, &quest, &lease, json!({"email": "nobody"}))
            .await;
        assert_eq!(answer.expect(200)["state"], "DONE");
    }
    let next = format!("/v1/sessions/{session}/next");
    app.post(&next, &bot, json!({"agent": "inventing"}))
        .await
        .refused(409, "agent_paused");
    let c = &browser.client;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &app.admin).await;
        browser
            .open(&format!("{}/ui/sessions/{session}", app.base))
            .await;
        c.find(Locator::Css("[data-pause] [data-form='resume'] button"))
            .await
            .expect("a Resume button on the live pause")
            .click()
            .await
            .unwrap();
        browser
            .until(
                "the page to show the pause resumed",
                "return document.querySelector('[data-pause][data-live=\"false\"]') !== null",
            )
            .await;
        let row = c.find(Locator::Css("[data-pause]")).await.unwrap();
        assert!(row.text().await.unwrap().contains("by admin"));
        assert!(c.find(Locator::Css("[data-form='resume']")).await.is_err());
    })
    .await;
    assigned(&app.next(&bot, &session, "inventing").await);
}
