//! Every page and form of the console over HTTP: statuses, sign-in and its
//! cookie, role refusals, CSRF and cross-site refusals, escaping. The review
//! page's own tests are `review_pages`'s.

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app;

#[tokio::test]
async fn a_browser_without_a_session_is_sent_to_sign_in_and_back() {
    let app = spawn_app().await;
    let root = get(&app, "/", None).await;
    assert_eq!((root.status.as_u16(), root.location()), (303, "/ui"));
    let dashboard = get(&app, "/ui", None).await;
    assert_eq!(
        (dashboard.status.as_u16(), dashboard.location()),
        (303, "/ui/login?next=%2Fui")
    );
    let review = get(&app, "/ui/review?check=l2%3A%2A", None).await;
    assert_eq!(review.status, StatusCode::SEE_OTHER);
    assert_eq!(
        review.location(),
        "/ui/login?next=%2Fui%2Freview%3Fcheck%3Dl2%253A%252A"
    );
    let login = get(&app, "/ui/login?next=%2Fui%2Freview", None).await;
    let body = login.expect(200);
    assert!(
        body.contains(r#"name="token""#),
        "one field named token: {body}"
    );
    assert!(
        body.contains(r#"name="next" value="&#x2f;ui&#x2f;review""#),
        "{body}"
    );
    // A form without a session changes nothing and says what to do.
    let refused = post(&app, "/ui/logout", None, form(&[]), &[]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains("Sign in again"), "{}", refused.body);
    let unknown = get(&app, "/ui/nothing-here", None).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_valid_token_starts_a_strict_http_only_session_and_a_bad_one_starts_none() {
    let app = spawn_app().await;
    let viewer = app.token("viewer", "vera").await;
    let bad = post(&app, "/ui/login", None, form(&[("token", "qst_nope")]), &[]).await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.headers.get(header::SET_COOKIE).is_none());
    assert!(bad.body.contains("unknown or revoked"), "{}", bad.body);

    let ok = post(
        &app,
        "/ui/login",
        None,
        form(&[("token", &viewer), ("next", "/ui/review")]),
        &[],
    )
    .await;
    assert_eq!((ok.status.as_u16(), ok.location()), (303, "/ui/review"));
    let cookie = ok.headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    for part in [
        "quest_console=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/ui",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP without a proxy: {cookie}"
    );
    assert!(
        !cookie.contains(&viewer),
        "the cookie is a session id, not the token"
    );

    let proxied = post(
        &app,
        "/ui/login",
        None,
        form(&[("token", &viewer), ("next", "https://evil.test/")]),
        &[
            ("origin", app.base.as_str()),
            ("x-forwarded-proto", "https"),
        ],
    )
    .await;
    assert_eq!(
        proxied.location(),
        "/ui",
        "sign-in sends the browser only to console pages"
    );
    assert!(
        proxied.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
}

#[tokio::test]
async fn every_page_answers_a_viewer_under_a_strict_content_security_policy() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 3).await;
    let (quest, _) = work(
        &app,
        &agent,
        &session,
        "bot-1",
        json!({"email": "a@firm.test"}),
    )
    .await;
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    for path in [
        "/ui".to_owned(),
        format!("/ui/sessions/{session}"),
        format!("/ui/quests/{quest}"),
    ] {
        let page = get(&app, &path, Some(&vera)).await;
        page.expect(200);
        let csp = page.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "form-action 'self'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("http"),
            "{csp}"
        );
        assert_eq!(page.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(page.headers[header::CACHE_CONTROL], "no-store");
        for outside in [
            "src=\"http",
            "href=\"//",
            "src=\"//",
            "<script>",
            "style=\"",
        ] {
            assert!(!page.body.contains(outside), "{path} holds `{outside}`");
        }
    }
    let dashboard = get(&app, "/ui", Some(&vera)).await;
    let row = format!(r#"<tr data-session-id="{session}">"#);
    assert!(dashboard.body.contains(&row), "{}", dashboard.body);
    for name in ["total", "remaining", "pass", "review", "done"] {
        assert!(
            dashboard.body.contains(&format!(r#"data-count="{name}""#)),
            "{name}"
        );
    }
    assert!(
        dashboard
            .body
            .contains(r#"data-label="Pass" data-count="pass">1<"#),
        "{}",
        dashboard.body
    );
    let css = get(&app, "/ui/assets/console.css", None).await;
    assert_eq!(css.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
    assert!(css.body.contains("prefers-color-scheme: dark"));
    assert_eq!(
        get(&app, "/ui/assets/other.js", None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/ui/quests/not-a-uuid", Some(&vera)).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_form_without_the_sessions_token_or_from_another_site_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 2).await;
    let quest = reviews(&app, &agent, &session, 1).await.remove(0);
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;
    let path = format!("/ui/review/{quest}/decide");
    let approve = |csrf: &str| form(&[("csrf", csrf), ("decision", "approve")]);
    let refusals = [
        (approve(""), vec![]),
        (approve("forged"), vec![]),
        (approve(&alice.csrf), vec![("origin", "http://evil.test")]),
        (approve(&alice.csrf), vec![("origin", "null")]),
        (approve(&alice.csrf), vec![("sec-fetch-site", "cross-site")]),
    ];
    for (body, headers) in refusals {
        let answer = post(&app, &path, Some(&alice), body.clone(), &headers).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{body} {headers:?}: {}",
            answer.body
        );
        assert_eq!(app.quest(&quest).await["state"], "REVIEW");
    }
    // Sign-in itself refuses another site's form, so no page can sign a browser in as someone else.
    let login = post(
        &app,
        "/ui/login",
        None,
        form(&[("token", &app.admin)]),
        &[("origin", "http://evil.test")],
    )
    .await;
    assert_eq!(login.status, StatusCode::FORBIDDEN);
    assert!(login.headers.get(header::SET_COOKIE).is_none());

    let decided = post(&app, &path, Some(&alice), approve(&alice.csrf), &[]).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let after = app.quest(&quest).await;
    assert_eq!(after["state"], "PASS");
    assert_eq!(after["decided_by"], "reviewer:alice");
    assert_eq!(after["reviews"][0]["reviewer"], "alice");
}

#[tokio::test]
async fn signing_out_expiry_and_revoking_the_token_each_end_the_browser_session() {
    let app = spawn_app().await;
    let secret = app.token("reviewer", "alice").await;
    let first = sign_in(&app, &secret).await;
    let out = post(
        &app,
        "/ui/logout",
        Some(&first),
        form(&[("csrf", &first.csrf)]),
        &[],
    )
    .await;
    assert_eq!((out.status.as_u16(), out.location()), (303, "/ui/login"));
    assert!(
        out.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(
        get(&app, "/ui", Some(&first)).await.status,
        StatusCode::SEE_OTHER
    );

    let second = sign_in(&app, &secret).await;
    let third = sign_in(&app, &secret).await;
    app.clock.advance(Duration::from_secs(11 * 3600));
    assert_eq!(
        get(&app, "/ui", Some(&second)).await.status,
        StatusCode::OK,
        "still within 12 hours"
    );
    app.clock.advance(Duration::from_secs(3601));
    assert_eq!(
        get(&app, "/ui", Some(&second)).await.location(),
        "/ui/login?next=%2Fui",
        "expired on the server"
    );

    let fresh = sign_in(&app, &secret).await;
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    let id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "alice")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Some(&app.admin),
        None,
    )
    .await
    .expect(200);
    for who in [&fresh, &third] {
        assert_eq!(
            get(&app, "/ui", Some(who)).await.status,
            StatusCode::SEE_OTHER,
            "revoked with its token"
        );
    }
    let again = post(&app, "/ui/login", None, form(&[("token", &secret)]), &[]).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn agent_supplied_markup_is_text_on_every_page_and_only_web_links_are_links() {
    let app = spawn_app().await;
    let items = json!([{"company": "<b>Bold & Co</b>", "city": "<i>Seoul</i>"}]);
    let session = app.scan(crate::helpers::contact_config(3), items).await;
    let agent = app.token("agent", "bot").await;
    let result = json!({
        "email": "<script>alert(1)</script>@x.test",
        "confidence": "low",
        "note": "<img src=x onerror=alert(2)>",
        "site": "javascript:alert(3)",
        "source": "https://firm.test/contact?a=1&b=\"2\"",
    });
    let (quest, answer) = work(&app, &agent, &session, "<svg onload=alert(4)>", result).await;
    assert_eq!(answer["state"], "REVIEW", "{answer}");
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;
    for path in [
        format!("/ui/quests/{quest}"),
        "/ui/review".to_owned(),
        format!("/ui/sessions/{session}"),
        "/ui/review/bulk?decision=approve".to_owned(),
    ] {
        let body = get(&app, &path, Some(&alice)).await.expect(200).to_owned();
        for raw in [
            "<script>alert",
            "<img src=x",
            "<svg onload",
            "<b>Bold",
            "<i>Seoul",
            "href=\"javascript:",
        ] {
            assert!(!body.contains(raw), "{path} holds `{raw}` unescaped");
        }
        assert!(
            body.contains("&lt;b&gt;Bold &amp; Co&lt;"),
            "{path} shows the key as text"
        );
    }
    let page = get(&app, &format!("/ui/quests/{quest}"), Some(&alice)).await;
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;"),
        "the result is shown, as text"
    );
    assert!(
        page.body.contains("&lt;svg onload=alert(4)&gt;"),
        "the agent's name too"
    );
    let link = r#"<a href="https:&#x2f;&#x2f;firm.test&#x2f;contact?a=1&amp;b=%222%22" rel="noopener noreferrer nofollow" target="_blank">"#;
    assert!(
        page.body.contains(link),
        "an agent's web link is a link, marked as untrusted: {}",
        page.body
    );
    assert!(
        page.body.contains("javascript:alert(3)"),
        "a non-web URL stays text"
    );
}

#[tokio::test]
async fn the_session_page_shows_agents_failing_checks_throughput_and_a_paged_filtered_table() {
    let app = spawn_app().await;
    let (session, agent) = session(&app, 120).await;
    // bot-a passes three quests on the first try; bot-b fails twice, then passes.
    for i in 0..3 {
        work(
            &app,
            &agent,
            &session,
            "bot-a",
            json!({"email": format!("a{i}@firm.test")}),
        )
        .await;
    }
    let (flailed, _) = work(
        &app,
        &agent,
        &session,
        "bot-b",
        json!({"email": "x@example.com"}),
    )
    .await;
    work(
        &app,
        &agent,
        &session,
        "bot-b",
        json!({"email": "y@example.com"}),
    )
    .await;
    let (same, last) = work(
        &app,
        &agent,
        &session,
        "bot-b",
        json!({"email": "b@firm.test"}),
    )
    .await;
    assert_eq!(
        (same.as_str(), last["verdict"].as_str()),
        (flailed.as_str(), Some("PASS"))
    );
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    let page = get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    let body = page.expect(200);

    let row = |agent: &str| {
        let at = body
            .find(&format!(r#"data-agent="{agent}""#))
            .unwrap_or_else(|| panic!("{agent} has a row"));
        body[at..at + body[at..].find("</tr>").unwrap()].to_owned()
    };
    let cells = |row: &str| -> Vec<String> {
        row.split("class=\"num")
            .skip(1)
            .map(|c| {
                let v = &c[c.find('>').unwrap() + 1..];
                v[..v.find('<').unwrap()].to_owned()
            })
            .collect()
    };
    // leased, submissions, pass, first try, fail, review, done, lapses, tries
    // per pass, and the share of its PASS quests that went stale
    assert_eq!(
        cells(&row("bot-a")),
        ["3", "3", "3", "3", "0", "0", "0", "0", "1.0", "0%"]
    );
    assert_eq!(
        cells(&row("bot-b")),
        ["1", "3", "1", "0", "2", "0", "0", "0", "3.0", "0%"]
    );
    assert!(
        row("bot-b").contains(&agent_token_name(&session)),
        "the token's name is shown"
    );

    assert!(
        body.contains("<code>deny</code>"),
        "the failing check is listed"
    );
    assert!(
        body.contains("<span class=\"c-done\">2 fail</span>"),
        "{body}"
    );
    assert!(
        body.contains("quests decided per minute · last 15 min · 4 in all"),
        "the chart counts decided quests: {body}"
    );
    assert_eq!(count(body, "data-quest-id="), 50, "one page of the table");
    assert!(
        page.plain()
            .contains(&format!("/ui/sessions/{session}?after=49#quests")),
        "a next page"
    );

    let second = get(
        &app,
        &format!("/ui/sessions/{session}?after=49"),
        Some(&vera),
    )
    .await;
    assert_eq!(count(second.expect(200), "data-quest-id="), 50);
    assert!(
        second.body.contains("rows 51–100") && second.plain().contains("?before=50#quests"),
        "{}",
        second.body
    );
    let back = get(
        &app,
        &format!("/ui/sessions/{session}?before=50"),
        Some(&vera),
    )
    .await;
    assert!(
        back.expect(200).contains("rows 1–50") && !back.body.contains("?before=0"),
        "the first page again"
    );

    let passed = get(
        &app,
        &format!("/ui/sessions/{session}?state=PASS"),
        Some(&vera),
    )
    .await;
    assert_eq!(count(passed.expect(200), "data-quest-id="), 4);
    assert_eq!(count(&passed.body, "badge state-pass"), 4);
    let found = get(
        &app,
        &format!("/ui/sessions/{session}?q=company%200107"),
        Some(&vera),
    )
    .await;
    assert_eq!(count(found.expect(200), "data-quest-id="), 1);
    assert!(found.body.contains(">Company 0107</a>"));
    let failing = get(
        &app,
        &format!("/ui/sessions/{session}?check=deny&field=%2Femail"),
        Some(&vera),
    )
    .await;
    assert_eq!(count(failing.expect(200), "data-quest-id="), 1);
    assert!(
        failing
            .body
            .contains(&format!(r#"data-quest-id="{flailed}""#))
    );
    // The chart covers the session's life so far, up to an hour.
    app.clock.advance(Duration::from_secs(30 * 60));
    let later = get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    assert!(
        later.expect(200).contains("last 31 min · 4 in all"),
        "{}",
        later.body
    );
    app.clock.advance(Duration::from_secs(60 * 60));
    let much_later = get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    assert!(
        much_later.expect(200).contains("last 60 min · 0 in all"),
        "{}",
        much_later.body
    );
    let bad = get(
        &app,
        &format!("/ui/sessions/{session}?state=LOST"),
        Some(&vera),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("TODO, PASS, REVIEW or DONE"));

    for (format, kind) in [
        ("csv", "text/csv"),
        ("jsonl", "application/x-ndjson"),
        ("xlsx", "spreadsheetml"),
    ] {
        let export = client()
            .get(format!(
                "{}/ui/sessions/{session}/export?format={format}",
                app.base
            ))
            .header(header::COOKIE, format!("quest_console={}", vera.cookie))
            .send()
            .await
            .unwrap();
        assert_eq!(export.status(), StatusCode::OK);
        assert!(
            export.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .contains(kind),
            "{format}"
        );
        assert!(
            export.headers()[header::CONTENT_DISPOSITION]
                .to_str()
                .unwrap()
                .starts_with("attachment")
        );
        let bytes = export.bytes().await.unwrap();
        if format != "xlsx" {
            assert_eq!(
                bytes.to_vec(),
                app.bytes(&format!("/v1/sessions/{session}/export?format={format}"))
                    .await
                    .1
            );
        }
    }
}

#[tokio::test]
async fn the_event_stream_needs_a_session_and_carries_every_session_it_names() {
    let app = spawn_app().await;
    let (one, agent) = session(&app, 2).await;
    let (two, _) = session(&app, 2).await;
    assert_eq!(
        get(&app, &format!("/ui/events?session={one}"), None)
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    assert_eq!(
        get(&app, "/ui/events?session=nope", Some(&vera))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let mut events = Events::open(&app, &vera, &format!("session={one}&session={two}")).await;
    events.until("event: ready").await;
    events.until(&format!(r#""session_id":"{two}""#)).await;
    events.until(&format!(r#""session_id":"{one}""#)).await;
    events.text.clear();
    work(&app, &agent, &one, "bot", json!({"email": "a@firm.test"})).await;
    events.until(r#""pass":1"#).await;
    assert!(
        events.text.contains(&format!(r#""session_id":"{one}""#)),
        "{}",
        events.text
    );
}
