//! The review queue helps choose (issue 21, point 5): each item shows a line
//! of its result and its first reason, the reason filters the queue, a
//! search narrows it, and the current item is kept in view.

use serde_json::Value;

use crate::browser::{launch, screenshot_on_failure};
use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn each_queued_quest_shows_its_result_and_first_reason_which_filters_the_queue() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let ids = reviews(&app, &agent, &session, 2).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let page = get(&app, "/ui/review", Some(&ana)).await;
    let html = page.plain();
    let item = html
        .split(&format!(r#"data-quest-id="{}" data-search="#, ids[1]))
        .nth(1)
        .and_then(|rest| rest.split("</li>").next())
        .unwrap_or_else(|| panic!("a queue item: {html}"));
    assert!(
        item.contains(r#"<span class="queue-line">person1@firm.test · low</span>"#),
        "{item}"
    );
    assert!(
        item.contains(r#"href="/ui/review?check=review_when""#) && item.contains("/confidence"),
        "{item}"
    );
    let filtered = get(&app, "/ui/review?check=review_when", Some(&ana)).await;
    assert_eq!(count(filtered.expect(200), "data-search="), 2);
    let none = get(&app, "/ui/review?check=schema", Some(&ana)).await;
    assert_eq!(count(none.expect(200), "data-search="), 0);
}

#[tokio::test]
async fn in_the_browser_the_search_narrows_the_queue_and_the_current_item_stays_in_view() {
    let test = "review_queue";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 40).await;
    let ids = reviews(&app, &agent, &session, 40).await;
    let ana = app.token("reviewer", "ana").await;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &ana).await;
        browser
            .open(&format!("{}/ui/review?session={session}&quest={}", app.base, ids[35]))
            .await;
        let in_view = browser
            .js("const l = document.querySelector('.queue-list'), c = l.querySelector('li.current');
                 const a = l.getBoundingClientRect(), b = c.getBoundingClientRect();
                 return b.top >= a.top && b.bottom <= a.bottom;")
            .await;
        assert_eq!(in_view, Value::Bool(true), "the current item is scrolled into the list's view");
        browser
            .js("const s = document.querySelector('[data-queue-search]'); s.value = 'person7@';
                 s.dispatchEvent(new Event('input')); return true;")
            .await;
        let shown = browser
            .js("return [...document.querySelectorAll('.queue-list li')].filter(li => !li.hidden).map(li => li.dataset.questId);")
            .await;
        assert_eq!(shown, serde_json::json!([ids[7]]), "only the quest whose result matches");
        // A reason in the queue filters it by that reason: the page opens on
        // it, its filter says so, and a check no quest has empties the queue.
        browser.js("document.querySelector('.queue-list [data-reason]').click(); return true;").await;
        browser
            .until("the queue filtered by its reason", "return location.search.includes('check=review_when')")
            .await;
        let filter = browser.js("return document.querySelector('#f-check').value").await;
        assert_eq!(filter, Value::from("review_when"));
        let listed = browser.js("return document.querySelectorAll('.queue-list li').length").await;
        assert_eq!(listed, Value::from(40));
        browser.open(&format!("{}/ui/review?check=schema", app.base)).await;
        let listed = browser.js("return document.querySelectorAll('.queue-list li').length").await;
        assert_eq!(listed, Value::from(0), "no quest is in review for that check");
    })
    .await;
}

/// The subtitle counts what waits: 200 when 200 wait, 200+ past the 200 it lists.
#[tokio::test]
async fn the_queue_says_200_when_200_wait_and_200_plus_past_them() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 201).await;
    reviews(&app, &agent, &session, 200).await;
    let ana = sign_in(&app, &app.token("reviewer", "ana").await).await;
    let html = get(&app, "/ui/review", Some(&ana)).await.plain();
    assert!(html.contains(">200 quests waiting"), "{html}");
    reviews(&app, &agent, &session, 1).await;
    let html = get(&app, "/ui/review", Some(&ana)).await.plain();
    assert!(html.contains(">200+ quests waiting"), "{html}");
    assert_eq!(count(&html, "data-search="), 200, "it lists 200");
}
