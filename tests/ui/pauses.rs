//! A paused token on a session's page, in a real browser: the admin clicks
//! Resume and the token's `next` leases again.

use fantoccini::Locator;
use serde_json::json;

use crate::browser::{Browser, launch, screenshot_on_failure};
use crate::helpers::{assigned, companies, contact_config, spawn_app};

/// Clicks Resume on the page's live pause and waits for the page to show it resumed.
async fn click_resume(browser: &Browser) {
    browser
        .client
        .find(Locator::Css("[data-pause] [data-form='resume'] button"))
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
}

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
        click_resume(&browser).await;
        let row = c.find(Locator::Css("[data-pause]")).await.unwrap();
        assert!(row.text().await.unwrap().contains("by admin"));
        assert!(c.find(Locator::Css("[data-form='resume']")).await.is_err());
    })
    .await;
    assigned(&app.next(&bot, &session, "inventing").await);
}

#[tokio::test]
async fn a_canary_pause_shows_on_every_session_page_of_its_token_and_is_resumed_from_there() {
    let test = "resume_canary_pause";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 0, "warmup": 1});
    let trap = app.scan(config, companies(5)).await;
    let canary = json!({"kind": "canary", "input": {"company": "Hollow Ltd", "city": "Nowhere"}});
    app.post(
        &format!("/v1/sessions/{trap}/gold"),
        &app.admin,
        json!({"items": [canary]}),
    )
    .await
    .expect(201);
    let other = app.scan(contact_config(3), companies(5)).await;
    let bot = app.token("agent", "bot").await;
    // The token works in the other session, then passes the canary.
    assigned(&app.next(&bot, &other, "eager").await);
    let next = app.next(&bot, &trap, "eager").await;
    assert_eq!(next["quest"]["key"], "Hollow Ltd", "{next}");
    let (quest, lease) = assigned(&next);
    let result = json!({"email": "info@hollow.test", "confidence": "high"});
    assert_eq!(
        app.submit(&bot, &quest, &lease, result).await.expect(200)["state"],
        "PASS"
    );
    let c = &browser.client;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &app.admin).await;
        browser
            .open(&format!("{}/ui/sessions/{other}", app.base))
            .await;
        let row = c
            .find(Locator::Css("[data-pause][data-live='true']"))
            .await
            .expect("the canary pause on the other session's page");
        assert!(row.text().await.unwrap().contains("canary"));
        click_resume(&browser).await;
    })
    .await;
    assert_eq!(app.next(&bot, &other, "eager").await["status"], "assigned");
}
