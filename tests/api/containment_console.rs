//! Containment in the console (issue 18, point 6): a browser signed in with a
//! token limited to sessions sees and decides nothing of another session,
//! and a session's page lists its pauses with a Resume button for admins.
//! Plain HTTP against the console, signed in through its form; both backends.

use serde_json::json;

use crate::console::{Browserless, csrf_of, form, get, post, reviews, session, sign_in};
use crate::containment::{burn, pausing, scoped_token};
use crate::helpers::{TestApp, assigned, companies, spawn_app};

/// The rows of the pauses table of a session's page (`/` unescaped).
fn pause_rows(html: &str) -> Vec<String> {
    html.split("<tr data-pause")
        .skip(1)
        .map(|rest| rest[..rest.find("</tr>").unwrap()].to_owned())
        .collect()
}

/// Sends a console form of `who`, with its CSRF token, as its page would.
async fn send(app: &TestApp, path: &str, who: &Browserless, fields: &[(&str, &str)]) -> u16 {
    let mut fields = fields.to_vec();
    fields.push(("csrf", &who.csrf));
    post(app, path, Some(who), form(&fields), &[])
        .await
        .status
        .as_u16()
}

#[tokio::test]
async fn a_scoped_tokens_console_opens_decides_and_lists_only_its_sessions() {
    let app = spawn_app().await;
    let (mine, mine_agent) = session(&app, 3).await;
    let (other, other_agent) = session(&app, 3).await;
    let my_reviews = reviews(&app, &mine_agent, &mine, 2).await;
    let other_reviews = reviews(&app, &other_agent, &other, 2).await;
    let (secret, _) = scoped_token(&app, "reviewer", &[&mine]).await;
    let who = sign_in(&app, &secret).await;

    // Its own session, quest and review entry open.
    for path in [
        format!("/ui/sessions/{mine}"),
        format!("/ui/quests/{}", my_reviews[1]),
        format!("/ui/review?session={mine}&quest={}", my_reviews[1]),
    ] {
        get(&app, &path, Some(&who)).await.expect(200);
    }
    // Another session's page, export, quest, review entry and stream do not.
    let foreign = &other_reviews[0];
    for path in [
        format!("/ui/sessions/{other}"),
        format!("/ui/sessions/{other}/export?format=csv"),
        format!("/ui/quests/{foreign}"),
        format!("/ui/review?quest={foreign}"),
        format!("/ui/review?session={other}"),
        format!("/ui/review/bulk?session={other}&decision=approve"),
        format!("/ui/events?session={other}"),
    ] {
        let page = get(&app, &path, Some(&who)).await;
        assert_eq!(page.status.as_u16(), 403, "{path}: {}", page.body);
        assert!(page.body.contains("Out of scope"), "{path}: {}", page.body);
    }

    // The lists show only its sessions: the dashboard, the review queue, a bulk decision.
    let dashboard = get(&app, "/ui", Some(&who)).await;
    assert!(dashboard.expect(200).contains(&mine));
    assert!(!dashboard.body.contains(&other), "{}", dashboard.body);
    for path in ["/ui/review", "/ui/review/bulk?decision=approve"] {
        let page = get(&app, path, Some(&who)).await;
        let body = page.expect(200);
        for id in &my_reviews {
            assert!(body.contains(id.as_str()), "{path} lists {id}");
        }
        for id in &other_reviews {
            assert!(!body.contains(id.as_str()), "{path} must not list {id}");
        }
    }

    // Its forms cannot claim, decide or bulk-decide another session's quests.
    let decide = format!("/ui/review/{foreign}/decide");
    let release = format!("/ui/review/{foreign}/release");
    let bulk = [
        ("decision", "approve"),
        ("quest", other_reviews[1].as_str()),
    ];
    assert_eq!(
        send(&app, &decide, &who, &[("decision", "approve")]).await,
        403
    );
    assert_eq!(send(&app, &release, &who, &[]).await, 403);
    assert_eq!(send(&app, "/ui/review/bulk", &who, &bulk).await, 403);
    let mixed = [
        ("decision", "approve"),
        ("quest", my_reviews[0].as_str()),
        ("quest", other_reviews[1].as_str()),
    ];
    assert_eq!(send(&app, "/ui/review/bulk", &who, &mixed).await, 403);
    for id in my_reviews.iter().chain(&other_reviews) {
        let quest = app.quest(id).await;
        assert_eq!(quest["state"], "REVIEW", "{quest}");
    }
    assert!(app.quest(foreign).await["review_claimed_by"].is_null());
}

#[tokio::test]
async fn the_session_page_lists_a_pause_and_only_an_admins_resume_button_resumes_it() {
    let app = spawn_app().await;
    let session = app.scan(pausing(3), companies(10)).await;
    let bot = app.token("agent", "bot").await;
    for _ in 0..3 {
        burn(&app, &bot, &session, "inventing").await;
    }
    let next = format!("/v1/sessions/{session}/next");
    let refused = app.post(&next, &bot, json!({"agent": "inventing"})).await;
    refused.refused(409, "agent_paused");
    let token_id = refused.body["pause"]["token_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let page_path = format!("/ui/sessions/{session}");
    let resume = format!("/ui/sessions/{session}/tokens/{token_id}/resume");
    let button = format!(r#"action="{resume}""#);

    // A viewer sees the pause, with what made it, but no button; its post is refused.
    let viewer = app.token("viewer", "vera").await;
    let vera = sign_in(&app, &viewer).await;
    let page = get(&app, &page_path, Some(&vera)).await;
    page.expect(200);
    let rows = pause_rows(&page.plain());
    assert_eq!(rows.len(), 1, "{}", page.body);
    for shown in [
        r#"data-live="true""#,
        "<strong>inventing</strong>",
        ">bot<",
        "consecutive_done</code>",
        "max_consecutive_done</code> 3",
    ] {
        assert!(rows[0].contains(shown), "{shown} in {}", rows[0]);
    }
    assert!(!page.plain().contains(&button), "{}", page.body);
    assert_eq!(send(&app, &resume, &vera, &[]).await, 403);
    app.post(&next, &bot, json!({"agent": "inventing"}))
        .await
        .refused(409, "agent_paused");

    // An admin's page has the button; without the session's CSRF token the post is refused.
    let admin = sign_in(&app, &app.admin).await;
    let page = get(&app, &page_path, Some(&admin)).await;
    assert!(page.plain().contains(&button), "{}", page.body);
    let forged = post(&app, &resume, Some(&admin), form(&[("csrf", "x")]), &[]).await;
    assert_eq!(forged.status.as_u16(), 403);
    app.post(&next, &bot, json!({"agent": "inventing"}))
        .await
        .refused(409, "agent_paused");

    // The button's form resumes the token and goes back to the session's page.
    let csrf = csrf_of(&page.body);
    let sent = post(&app, &resume, Some(&admin), form(&[("csrf", &csrf)]), &[]).await;
    assert_eq!(sent.status.as_u16(), 303, "{}", sent.body);
    assert_eq!(sent.location(), format!("{page_path}#pauses"));
    assigned(&app.next(&bot, &session, "inventing").await);

    // The page now says when and by whom, and offers no button.
    let page = get(&app, &page_path, Some(&vera)).await;
    let rows = pause_rows(&page.plain());
    assert!(rows[0].contains(r#"data-live="false""#), "{}", rows[0]);
    assert!(rows[0].contains("by admin"), "{}", rows[0]);
    let page = get(&app, &page_path, Some(&admin)).await;
    assert!(!page.plain().contains(&button), "{}", page.body);
    let pauses = app
        .get(&format!("/v1/sessions/{session}/pauses"), &app.admin)
        .await
        .expect(200);
    assert_eq!(pauses[0]["resumed_by"], "admin");
}

/// The console's stream of every session, as an agent's browser follows it:
/// it never carries the figures of a session with gold (nor of its gold
/// companion), whose moves would tell the agent its quest is gold.
#[tokio::test]
async fn an_agents_console_stream_never_carries_a_session_with_gold() {
    use crate::helpers::contact_config;
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 1.0, "warmup": 0});
    let gold = app.scan(config, companies(3)).await;
    let item = json!({"input": {"company": "Gold 0000", "city": "Busan"},
                      "expected": {"email": "g@gold.test"}});
    app.post(
        &format!("/v1/sessions/{gold}/gold"),
        &app.admin,
        json!({"items": [item]}),
    )
    .await
    .expect(201);
    let plain = app.scan(contact_config(3), companies(3)).await;
    let secret = app.token("agent", "watcher").await;
    let who = sign_in(&app, &secret).await;
    let mut stream = reqwest::Client::new()
        .get(format!("{}/ui/events", app.base))
        .header("cookie", format!("quest_console={}", who.cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // A gold quest moves the companion's figures, a real one of the gold
    // session that session's; then a real one moves the plain session's.
    let next = app.next(&secret, &gold, "bot").await;
    assert_eq!(next["quest"]["key"], "Gold 0000", "{next}");
    let (quest, lease) = assigned(&next);
    let result = json!({"email": "g@gold.test", "confidence": "high"});
    app.submit(&secret, &quest, &lease, result)
        .await
        .expect(200);
    let next = app.next(&secret, &gold, "bot").await;
    assert_ne!(next["quest"]["key"], "Gold 0000", "{next}");
    assert_eq!(app.next(&secret, &plain, "bot").await["status"], "assigned");
    let mut seen = crate::helpers::read_until(&mut stream, &plain).await;
    // Once more, so that every figure of the first flush has arrived.
    let other = app.token("agent", "other").await;
    assert_eq!(app.next(&other, &plain, "bot").await["status"], "assigned");
    while seen.matches(plain.as_str()).count() < 2 {
        seen.push_str(&crate::helpers::read_until(&mut stream, &plain).await);
    }
    let sessions: Vec<&str> = seen
        .match_indices("\"session_id\":\"")
        .map(|(at, m)| &seen[at + m.len()..at + m.len() + 36])
        .collect();
    assert!(!sessions.is_empty(), "{seen}");
    assert!(sessions.iter().all(|s| *s == plain), "{seen}");
}
