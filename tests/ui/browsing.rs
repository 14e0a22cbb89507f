//! The console in a real headless Chromium: sign-in, live counts, the review
//! keys, two reviewers, a viewer, and pages that run no agent's markup and
//! load nothing from another origin.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use fantoccini::Locator;

use crate::browser::{Window, launch, launch_two, launch_with, screenshot_on_failure};
use crate::console::{reviews, session, work};
use crate::helpers::spawn_app;

/// A selector's text as a JavaScript expression.
fn text_of(selector: &str) -> String {
    format!("(document.querySelector('{selector}') || {{}}).textContent")
}

#[tokio::test]
async fn a_reviewer_signs_in_and_the_dashboard_pass_count_rises_without_a_reload() {
    let test = "dashboard_live";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let alice = app.token("reviewer", "alice").await;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &alice).await;
        let pass = format!(r#"[data-session-id="{session}"] [data-count="pass"]"#);
        let remaining = format!(r#"[data-session-id="{session}"] [data-count="remaining"]"#);
        assert_eq!(browser.js(&format!("return {}", text_of(&pass))).await, "0");
        browser.js("window.stillTheSamePage = true").await;
        browser.until("the live stream", "return document.documentElement.dataset.live === 'on'").await;

        let (_, answer) = work(&app, &agent, &session, "bot-1", json!({"email": "a@firm.test"})).await;
        assert_eq!(answer["verdict"], "PASS");
        browser.until("pass to rise to 1", &format!("return {} === '1'", text_of(&pass))).await;
        browser.until("remaining to fall to 2", &format!("return {} === '2'", text_of(&remaining))).await;
        assert_eq!(browser.js("return window.stillTheSamePage === true").await, true, "the page was not reloaded");
        let width = browser.js(&format!(r#"return document.querySelector('[data-session-id="{session}"] [data-segment="pass"]').getAttribute('width')"#)).await;
        assert!(width.as_str().unwrap().starts_with("33.33"), "the bar follows: {width}");
    })
    .await;
}

#[tokio::test]
async fn review_keys_move_claim_approve_with_a_and_reject_with_r_a_note_and_enter() {
    let test = "review_keys";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let ids = reviews(&app, &agent, &session, 2).await;
    let alice = app.token("reviewer", "alice").await;
    let current =
        "return (document.querySelector('[data-review-current]') || {dataset: {}}).dataset.questId";
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &alice).await;
        browser.open(&format!("{}/ui/review?session={session}", app.base)).await;
        assert_eq!(browser.js(current).await, ids[0].as_str());
        assert_eq!(app.quest(&ids[0]).await["review_claimed_by"], "alice", "opening it claimed it");

        browser.press('?').await;
        assert_eq!(browser.js("return document.getElementById('keys').open").await, true, "? shows the keys");
        browser.press('?').await;
        assert_eq!(browser.js("return document.getElementById('keys').open").await, false);

        browser.press('j').await;
        browser.until("the next quest", &format!("{current} === '{}'", ids[1])).await;
        assert_eq!(app.quest(&ids[0]).await["review_claimed_by"], Value::Null, "moving away gave the claim back");
        assert_eq!(app.quest(&ids[1]).await["review_claimed_by"], "alice");
        browser.press('k').await;
        browser.until("the previous quest", &format!("{current} === '{}'", ids[0])).await;

        browser.press('a').await;
        browser.until("the next quest to open by itself, the decision held", &format!(
            "{current} === '{}' && !!document.querySelector('[data-held=\"{}\"]')", ids[1], ids[0])).await;
        assert_eq!(app.quest(&ids[0]).await["state"], "REVIEW", "held: not recorded before its undo window ends");
        let approved = app.fall_due(&ids[0]).await;
        assert_eq!(approved["state"], "PASS");
        assert_eq!(approved["decided_by"], "reviewer:alice");
        assert_eq!((approved["reviews"][0]["reviewer"].as_str(), approved["reviews"][0]["decision"].as_str()), (Some("alice"), Some("approve")));

        browser.press('r').await;
        browser.until("the note field, open and focused", "return document.activeElement.id === 'reject-note' && document.activeElement.offsetParent !== null").await;
        browser.press('\u{e007}').await; // Enter on an empty note sends nothing
        assert_eq!(app.quest(&ids[1]).await["state"], "REVIEW");
        browser.type_text("the address belongs to another company").await;
        browser.press('\u{e007}').await;
        browser.until("the empty queue, the rejection held", &format!(
            "return !document.querySelector('[data-review-current]') && !!document.querySelector('[data-held=\"{}\"]')", ids[1])).await;
        let rejected = app.fall_due(&ids[1]).await;
        assert_eq!(rejected["state"], "DONE");
        assert_eq!(rejected["reviews"][0]["note"], "the address belongs to another company");
        assert_eq!(rejected["reviews"][0]["reviewer"], "alice");
    })
    .await;
}

#[tokio::test]
async fn a_second_reviewer_sees_the_first_ones_claim_and_cannot_decide_it() {
    let test = "two_reviewers";
    let Some((first, second)) = launch_two(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let (alice, bob) = (
        app.token("reviewer", "alice").await,
        app.token("reviewer", "bob").await,
    );
    screenshot_on_failure(test, &[&first, &second], async {
        first.sign_in(&app.base, &alice).await;
        first.open(&format!("{}/ui/review", app.base)).await;
        second.sign_in(&app.base, &bob).await;
        second.open(&format!("{}/ui/review", app.base)).await;
        assert_eq!(
            second
                .js("return document.querySelector('[data-review-current]').dataset.questId")
                .await,
            quest.as_str()
        );
        assert_eq!(
            second
                .js("return document.querySelector('[data-held-by]').dataset.heldBy")
                .await,
            "alice"
        );
        let shown = second
            .js("return document.querySelector('[data-held-by]').textContent")
            .await;
        assert!(
            shown.as_str().unwrap().contains("In review by alice"),
            "{shown}"
        );
        assert_eq!(
            second
                .js("return document.querySelector('[data-key=\"a\"]') === null")
                .await,
            true,
            "no decision offered"
        );
        second.press('a').await;
        second.press('r').await;
        assert_eq!(
            second
                .js("return document.getElementById('reject-note') === null")
                .await,
            true
        );
        let q = app.quest(&quest).await;
        assert_eq!(
            (q["state"].as_str(), q["review_claimed_by"].as_str()),
            (Some("REVIEW"), Some("alice"))
        );
        // The first reviewer still decides it.
        first.press('a').await;
        first
            .until(
                "the decision, held",
                "return !!document.querySelector('[data-held]')",
            )
            .await;
        assert_eq!(app.fall_due(&quest).await["decided_by"], "reviewer:alice");
    })
    .await;
}

#[tokio::test]
async fn a_viewers_browser_session_can_watch_but_not_decide() {
    let test = "viewer";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let vera = app.token("viewer", "vera").await;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &vera).await;
        assert_eq!(browser.js("return document.querySelector('a[href=\"/ui/review\"]') === null").await, true, "no review link");
        browser.open(&format!("{}/ui/review", app.base)).await;
        let text = browser.js("return document.body.innerText").await;
        assert!(text.as_str().unwrap().contains("This needs the `reviewer` or `admin` role"), "{text}");
        browser.open(&format!("{}/ui/quests/{quest}", app.base)).await;
        assert_eq!(browser.js("return document.body.innerText.includes('Review this quest')").await, false);
        // Even a request made by hand from the page, with the session's own token, is refused.
        let status = browser.js(&format!(
            "return fetch('/ui/review/{quest}/decide', {{method: 'POST', redirect: 'manual', \
             headers: {{'content-type': 'application/x-www-form-urlencoded'}}, \
             body: 'decision=approve&csrf=' + document.querySelector('input[name=csrf]').value}}).then(r => r.status)"
        )).await;
        assert_eq!(status, 403);
        assert_eq!(app.quest(&quest).await["state"], "REVIEW");
    })
    .await;
}

/// A server on another origin that counts every connection made to it.
async fn sentinel() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (origin, hits)
}

#[tokio::test]
async fn an_agents_markup_runs_no_script_and_the_pages_load_nothing_from_another_origin() {
    let test = "markup";
    let Some(browser) = launch(test).await else {
        return;
    };
    let app = spawn_app().await;
    let (other, hits) = sentinel().await;
    let items = json!([{"company": "<script>window.pwned = 'key'</script>", "city": format!("<img src=\"{other}/city.png\" onerror=\"window.pwned = 'city'\">")}]);
    let session = app.scan(crate::helpers::contact_config(3), items).await;
    let agent = app.token("agent", "bot").await;
    let result = json!({
        "email": format!("<img src=\"{other}/pixel.png\" onerror=\"window.pwned = 'img'\">@x.test"),
        "confidence": "low",
        "note": "<script>window.pwned = 'script'</script>",
        "style": format!("<link rel=\"stylesheet\" href=\"{other}/x.css\"><style>body{{display:none}}</style>"),
        "source": format!("{other}/contact"),
    });
    let (quest, answer) = work(
        &app,
        &agent,
        &session,
        "<b onmouseover=\"window.pwned = 'agent'\">bot</b>",
        result,
    )
    .await;
    assert_eq!(answer["state"], "REVIEW", "{answer}");
    let alice = app.token("reviewer", "alice").await;
    screenshot_on_failure(test, &[&browser], async {
        browser.sign_in(&app.base, &alice).await;
        for path in ["/ui".to_owned(), format!("/ui/sessions/{session}"), format!("/ui/quests/{quest}"), "/ui/review".to_owned()] {
            browser.open(&format!("{}{path}", app.base)).await;
            browser.js("document.querySelectorAll('b, td, dd, a').forEach(e => e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})))").await;
            assert_eq!(browser.js("return typeof window.pwned").await, "undefined", "{path} ran an agent's script");
            let all_here = browser.js(
                "return performance.getEntriesByType('resource').every(e => new URL(e.name).origin === location.origin) \
                 && performance.getEntriesByType('resource').length >= 2",
            ).await;
            assert_eq!(all_here, true, "{path} loaded something from another origin");
            assert_eq!(browser.js("return getComputedStyle(document.body).display").await, "block", "{path}: no agent style applied");
        }
        browser.open(&format!("{}/ui/quests/{quest}", app.base)).await;
        let text = browser.js("return document.body.innerText").await;
        let text = text.as_str().unwrap();
        for shown in ["<script>window.pwned = 'script'</script>", "<script>window.pwned = 'key'</script>", "onerror=\"window.pwned = 'img'\""] {
            assert!(text.contains(shown), "shown as text: {shown}");
        }
        let rel = browser.js(&format!("return document.querySelector('a[href=\"{other}/contact\"]').rel")).await;
        assert_eq!(rel, "noopener noreferrer nofollow");
        assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was fetched from the other origin");
    })
    .await;
}

#[tokio::test]
async fn with_javascript_off_a_reviewer_still_signs_in_approves_and_rejects_with_a_note() {
    let test = "no_javascript";
    let Some(browser) = launch_with(
        test,
        Window {
            scripts: false,
            ..Window::DESKTOP
        },
    )
    .await
    else {
        return;
    };
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let ids = reviews(&app, &agent, &session, 2).await;
    let alice = app.token("reviewer", "alice").await;
    let c = &browser.client;
    // A click that submits a form returns before the next page is there: wait for it.
    let arrive = |path: &'static str| async move {
        for _ in 0..300 {
            if c.current_url().await.is_ok_and(|u| u.path() == path) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("waited in vain for {path}");
    };
    let current_is = |id: String| async move {
        for _ in 0..300 {
            let found = match c.find(Locator::Css("[data-review-current]")).await {
                Ok(e) => e.attr("data-quest-id").await.ok().flatten(),
                Err(_) => None,
            };
            if found.as_deref() == Some(id.as_str()) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("waited in vain for quest {id} to be the current one");
    };
    screenshot_on_failure(test, &[&browser], async {
        browser.open(&format!("{}/ui/review", app.base)).await;
        assert_eq!(c.current_url().await.unwrap().path(), "/ui/login");
        c.find(Locator::Css("input[name=token]"))
            .await
            .unwrap()
            .send_keys(&alice)
            .await
            .unwrap();
        c.find(Locator::Css("form[action='/ui/login'] button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        arrive("/ui/review").await; // back where sign-in began
        current_is(ids[0].clone()).await;
        assert!(
            !c.find(Locator::Css("[data-key='r']"))
                .await
                .unwrap()
                .is_displayed()
                .await
                .unwrap(),
            "the key-only button hides"
        );
        assert!(
            c.find(Locator::Id("reject-note"))
                .await
                .unwrap()
                .is_displayed()
                .await
                .unwrap(),
            "the note field is there"
        );

        c.find(Locator::Css("button[data-key='a']"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        current_is(ids[1].clone()).await; // the next quest opened
        assert_eq!(app.quest(&ids[0]).await["decided_by"], "reviewer:alice");

        c.find(Locator::Id("reject-note"))
            .await
            .unwrap()
            .send_keys("not the company's address")
            .await
            .unwrap();
        c.find(Locator::Css("#reject-form button[type=submit]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        c.wait()
            .at_most(std::time::Duration::from_secs(30))
            .for_element(Locator::Css(&format!("[data-last-decision='{}']", ids[1])))
            .await
            .unwrap();
        let rejected = app.quest(&ids[1]).await;
        assert_eq!(
            (
                rejected["state"].as_str(),
                rejected["reviews"][0]["note"].as_str()
            ),
            (Some("DONE"), Some("not the company's address"))
        );
    })
    .await;
}
