//! A session whose agents are done while quests wait for a person (issue 21,
//! point 3): the dashboard and the session page do not call it decided, its
//! ETA is the reviewers', the live stream carries the same figures, and the
//! checks that fail most are apart from the reasons quests go to a person.

use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn agents_done_with_quests_in_review_is_not_called_decided() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let (_, pass) = work(
        &app,
        &agent,
        &session,
        "bot",
        json!({"email": "a@firm.test"}),
    )
    .await;
    assert_eq!(pass["state"], "PASS");
    let waiting = reviews(&app, &agent, &session, 2).await;
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;

    let dashboard = words(&get(&app, "/ui", Some(&vera)).await.plain());
    assert!(
        dashboard.contains("33% decided · agents are done; 2 wait for a person"),
        "{dashboard}"
    );
    let page = get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    let html = page.expect(200).to_owned();
    let text = words(&page.plain());
    assert!(
        text.contains("agents are done; 2 wait for a person"),
        "{text}"
    );
    assert!(!text.contains("100% decided"), "{text}");
    // Nobody reviewed yet: the people's ETA is unknown, not "0 s".
    assert!(html.contains("data-eta>\u{2014}<"), "{html}");
    let failing = html
        .split("data-failing")
        .nth(1)
        .unwrap()
        .split("</section>")
        .next()
        .unwrap();
    assert!(failing.contains("No check has failed yet."), "{failing}");
    let reasons = html
        .split("data-review-reasons")
        .nth(1)
        .unwrap()
        .split("</section>")
        .next()
        .unwrap();
    assert!(
        reasons.contains("2 review"),
        "the review reasons apart: {reasons}"
    );

    // The live stream sends the same figures, worked out by the server.
    let mut events = Events::open(&app, &vera, &format!("session={session}")).await;
    events.until("event: ready").await;
    events.text.clear();
    app.post(
        &format!("/v1/review/{}", waiting[0]),
        &app.admin,
        json!({"decision": "approve", "note": ""}),
    )
    .await
    .expect(200);
    events.until(r#""review":1"#).await;
    let status: serde_json::Value = events
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.contains(r#""review":1"#))
        .map(|d| serde_json::from_str(d).unwrap())
        .next_back()
        .unwrap();
    let live = &status["live"];
    assert_eq!(live["progress"], 66, "{status}");
    assert_eq!(live["eta_seconds"], 900, "{status}");
    assert_eq!(
        live["eta"], "15 min",
        "the page writes it as sent: {status}"
    );
    assert_eq!(
        live["backlog"], "agents are done; 1 waits for a person",
        "{status}"
    );
    let bar: Vec<(&str, u64)> = live["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        bar,
        [
            ("pass", 2),
            ("review", 1),
            ("done", 0),
            ("verifying", 0),
            ("checking", 0),
            ("leased", 0),
            ("open", 0)
        ],
        "the bar in the order it is drawn: {status}"
    );
}

/// The text of a page as a person reads it: tags dropped, spaces folded.
fn words(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "Checks that fail most" counts FAILs, and a FAIL is not a reason to review.
#[tokio::test]
async fn a_fail_is_counted_among_the_checks_that_fail_and_not_among_review_reasons() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let (_, fail) = work(
        &app,
        &agent,
        &session,
        "bot",
        json!({"email": "no-at-sign"}),
    )
    .await;
    assert_eq!(fail["verdict"], "FAIL", "{fail}");
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    let html = get(&app, &format!("/ui/sessions/{session}"), Some(&vera))
        .await
        .expect(200)
        .to_owned();
    let section = |marker: &str| {
        let part = html
            .split(marker)
            .nth(1)
            .unwrap()
            .split("</section>")
            .next()
            .unwrap();
        words(part)
    };
    let failing = section("data-failing");
    // (The page escapes the field's slash.)
    assert!(failing.contains("schema &#x2f;email 1 fail"), "{failing}");
    let reasons = section("data-review-reasons");
    assert!(
        reasons.contains("No quest has gone to a person yet."),
        "{reasons}"
    );
}
