//! Re-checks: a PASS quest's accepted result is re-run through its gate
//! against a local web server whose page changed since; the quest is marked,
//! never reopened, and a re-check cut by a restart finishes after it, once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::{Html, IntoResponse, Response};
use quest::gates::email::EmailWorld;
use quest::gates::fetch::{AddressPolicy, CACHE_BUDGET, FetchSettings, HttpFetcher, PageCache};
use quest::testing::{FakeResolver, ManualClock};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::ratchet::raw;

/// What the contact page answers.
#[derive(Clone)]
pub(crate) enum Page {
    Html(String),
    /// Never answers (the re-check stays in flight).
    Hang,
    /// An error status (the world cannot answer now).
    Status(u16),
}

/// A web server on loopback with one contact page that a test changes.
#[derive(Clone)]
pub(crate) struct Site {
    page: Arc<Mutex<Page>>,
    hits: Arc<AtomicUsize>,
    port: u16,
}

impl Site {
    pub(crate) async fn serve(body: &str) -> Site {
        let page = Arc::new(Mutex::new(Page::Html(body.to_owned())));
        let hits = Arc::new(AtomicUsize::new(0));
        let (p, h) = (page.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/contact",
            axum::routing::get(move || {
                let (page, hits) = (p.clone(), h.clone());
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let page = page.lock().unwrap().clone();
                    match page {
                        Page::Html(body) => Html(body).into_response(),
                        Page::Hang => std::future::pending::<Response>().await,
                        Page::Status(code) => axum::http::StatusCode::from_u16(code)
                            .unwrap()
                            .into_response(),
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Site { page, hits, port }
    }

    pub(crate) fn set(&self, page: Page) {
        *self.page.lock().unwrap() = page;
    }

    pub(crate) fn result(&self) -> Value {
        json!({
            "site": format!("http://acme.test:{}/", self.port),
            "email": "info@acme.test",
            "source": format!("http://acme.test:{}/contact", self.port),
        })
    }
}

/// The real fetcher (per-host limits, the SSRF guard allowing loopback only)
/// and page cache on the server's clock; names and MX from a fake resolver.
fn world(clock: &Arc<ManualClock>) -> EmailWorld {
    let resolver = Arc::new(
        FakeResolver::new()
            .host("acme.test", &["127.0.0.1"])
            .with_mx("acme.test")
            .with_mx("gmail.com"),
    );
    let allow = vec!["127.0.0.0/8".parse().unwrap()];
    let settings = FetchSettings::new(Duration::from_secs(60), allow.clone());
    let fetcher = HttpFetcher::new(settings, resolver.clone(), clock.clone()).unwrap();
    EmailWorld {
        fetcher: Arc::new(fetcher),
        resolver,
        pages: Arc::new(PageCache::with_limits(CACHE_BUDGET, clock.clone())),
        policy: AddressPolicy::new(allow),
    }
}

pub(crate) async fn spawn(site_clock: Option<Arc<ManualClock>>) -> TestApp {
    let clock = site_clock.unwrap_or_else(|| Arc::new(ManualClock::new()));
    spawn_app_in_world(tempfile::tempdir().unwrap(), world(&clock), clock).await
}

/// A session of one company whose quest the gate passed; its id and the quest's.
async fn passed(app: &TestApp, site: &Site) -> (String, String) {
    let config = json!({"key_column": "company", "gate": {"kind": "email"}});
    let session = app.scan(config, json!([{"company": "Acme"}])).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app.submit(&agent, &quest, &lease, site.result()).await;
    assert!(answer.status.is_success(), "{}", answer.body);
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "PASS", "{view}");
    (session, quest)
}

/// Polls the quest until it holds `n` re-checks and the quest row shows the
/// last one (the view reads the two apart).
pub(crate) async fn rechecked(app: &TestApp, quest: &str, n: usize) -> Value {
    for _ in 0..1500 {
        let view = app.quest(quest).await;
        let rechecks = view["rechecks"].as_array().cloned().unwrap_or_default();
        if rechecks.len() >= n && view["rechecked_at"] == rechecks[n - 1]["created_at"] {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "quest {quest} never got {n} re-checks: {}",
        app.quest(quest).await
    );
}

pub(crate) const PAGE: &str =
    "<h1>Acme</h1><p>Write to <a href=\"mailto:info@acme.test\">info@acme.test</a></p>";
const MOVED: &str = "<h1>Acme</h1><p>We moved. Write to sales@acme.test</p>";

#[tokio::test]
async fn a_recheck_of_a_changed_page_marks_the_quest_stale_and_unlocks_nothing() {
    let site = Site::serve(PAGE).await;
    let app = spawn(None).await;
    let (session, quest) = passed(&app, &site).await;
    let before = app.quest(&quest).await;
    let status_before = app.status(&session).await;
    assert_eq!(before["recheck_mark"], Value::Null);

    // Who may start one, and what it needs.
    let viewer = app.token("viewer", "eve").await;
    let agent = app.token("agent", "bot-2").await;
    for token in [&viewer, &agent] {
        app.post(&format!("/v1/sessions/{session}/recheck"), token, json!({}))
            .await
            .refused(403, "forbidden");
    }
    let unknown = quest::domain::ids::SessionId::new();
    app.post(
        &format!("/v1/sessions/{unknown}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .refused(404, "not_found");
    let empty = app
        .scan(
            json!({"key_column": "company", "gate": {"kind": "email"}}),
            json!([{"company": "Nobody"}]),
        )
        .await;
    app.post(
        &format!("/v1/sessions/{empty}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .refused(409, "nothing_to_recheck");

    // The events stream is open before the re-check.
    let mut events = app
        .client
        .get(format!("{}/v1/sessions/{session}/events", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();

    // A week later the page no longer holds the address.
    site.set(Page::Html(MOVED.to_owned()));
    app.clock.advance(Duration::from_secs(7 * 86_400));
    let run = app
        .post(
            &format!("/v1/sessions/{session}/recheck"),
            &app.admin,
            json!({}),
        )
        .await
        .expect(202);
    assert_eq!(run["total"], 1, "{run}");
    assert_eq!(run["started_by"], "admin");

    let view = rechecked(&app, &quest, 1).await;
    println!(
        "GET /v1/quests/{quest}\n{}",
        serde_json::to_string_pretty(&view).unwrap()
    );
    assert_eq!(view["recheck_mark"], "stale", "{view}");
    let facts = view["recheck_facts"].as_array().unwrap();
    assert!(
        facts
            .iter()
            .any(|f| f["check"] == "source"
                && f["hint"].as_str().unwrap().contains("sales@acme.test")),
        "the new facts say what the page holds now: {view}"
    );
    for frozen in [
        "state",
        "tries",
        "receipt",
        "result",
        "submissions",
        "last_facts",
        "decided_by",
    ] {
        assert_eq!(view[frozen], before[frozen], "{frozen} is unchanged");
    }
    let recheck = &view["rechecks"][0];
    assert_eq!(recheck["verdict"], "FAIL");
    assert_eq!(recheck["outcome"], "stale");
    assert_eq!(recheck["gate"], "email");
    assert_eq!(
        recheck["passed_gate_version"],
        before["submissions"][0]["gate_version"]
    );
    assert_eq!(recheck["gate_changed"], false);
    let digest = recheck["digest"].as_str().unwrap();
    let hex = digest
        .strip_prefix("sha256:")
        .expect("a receipt-style digest");
    assert!(
        hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{digest}"
    );
    assert_ne!(
        Some(digest),
        before["receipt"].as_str(),
        "a digest of its own"
    );
    assert_eq!(recheck["evidence"][0]["status"], 200, "{recheck}");

    let status = app.status(&session).await;
    assert_eq!(
        status["pass"], status_before["pass"],
        "still PASS, still counted"
    );
    assert_eq!(status["remaining"], status_before["remaining"]);
    assert_eq!(status["stale"], 1, "{status}");
    assert_eq!(status["unconfirmed"], 0);
    assert!(status["rechecked_at"].is_string(), "{status}");
    assert_eq!(status["recheck"]["done"], 1);
    assert_sums(&status);

    // The event is a re-check's, not a state change.
    let mut seen = String::new();
    while !seen.contains("event: rechecked") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), events.chunk())
            .await
            .expect("the rechecked event arrives")
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = seen
        .lines()
        .skip_while(|l| *l != "event: rechecked")
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let event: Value = serde_json::from_str(data).unwrap();
    assert_eq!(event["state"], "PASS", "{event}");
    assert_eq!(event["verdict"], "FAIL");
    assert_eq!(event["mark"], "stale");

    // Below the application, the database still refuses to move the quest.
    let mut db = raw(&app).await;
    for sql in [
        format!("UPDATE quests SET state = 'TODO', phase = 'open' WHERE id = '{quest}'"),
        format!("UPDATE quests SET receipt = 'forged' WHERE id = '{quest}'"),
        format!("UPDATE quests SET last_facts = '[{{}}]' WHERE id = '{quest}'"),
        format!("UPDATE quests SET recheck_mark = NULL WHERE id = '{quest}'"),
        "UPDATE rechecks SET mark = NULL".to_owned(),
        "DELETE FROM rechecks".to_owned(),
    ] {
        let refused = db.execute(&sql).await.expect_err(&sql);
        assert!(refused.contains("ratchet"), "{sql}: {refused}");
    }
    assert_eq!(app.quest(&quest).await["state"], "PASS");

    // The export carries the mark after the columns SPEC §6 lists.
    let (code, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    assert_eq!(code, 200);
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header[header.len() - 6..],
        [
            "quest_receipt",
            "quest_stale",
            "quest_rechecked_at",
            "quest_recheck_facts",
            "quest_suspect",
            "quest_audit"
        ]
    );
    let row = reader.records().next().unwrap().unwrap();
    let n = row.len();
    assert_eq!(&row[1], "PASS");
    assert_eq!(&row[n - 6], before["receipt"].as_str().unwrap());
    assert_eq!(&row[n - 5], "stale");
    assert!(row[n - 4].starts_with("2026-"), "{row:?}");
    assert!(row[n - 3].contains("sales@acme.test"), "{row:?}");
    assert_eq!(
        (&row[n - 2], &row[n - 1]),
        ("", ""),
        "neither suspect nor audited"
    );

    // The page is back: the next re-check clears the mark.
    site.set(Page::Html(PAGE.to_owned()));
    app.clock.advance(Duration::from_secs(7 * 86_400));
    app.post(
        &format!("/v1/sessions/{session}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(202);
    let view = rechecked(&app, &quest, 2).await;
    assert_eq!(view["recheck_mark"], Value::Null, "{view}");
    assert_eq!(view["rechecks"][1]["outcome"], "confirmed");
    assert_eq!(view["receipt"], before["receipt"]);
    assert_eq!(app.status(&session).await["stale"], 0);

    // An older record cannot stand for the quest: its mark is the latest re-check's.
    let mut db = raw(&app).await;
    let sql = format!(
        "UPDATE quests SET recheck_mark = r.mark, rechecked_at = r.created_at, recheck_facts = r.facts
         FROM (SELECT mark, created_at, facts FROM rechecks WHERE quest_id = '{quest}'
               ORDER BY created_at LIMIT 1) AS r
         WHERE quests.id = '{quest}'"
    );
    let refused = db.execute(&sql).await.expect_err(&sql);
    assert!(refused.contains("ratchet"), "{sql}: {refused}");
    assert_eq!(app.quest(&quest).await["recheck_mark"], Value::Null);
}

#[tokio::test]
async fn a_recheck_interrupted_by_a_restart_finishes_after_it_once() {
    let site = Site::serve(PAGE).await;
    let app = spawn(None).await;
    let (session, quest) = passed(&app, &site).await;
    let receipt = app.quest(&quest).await["receipt"].clone();

    // The re-check's fetch is in flight when the server stops.
    site.set(Page::Hang);
    let hits = site.hits.load(Ordering::SeqCst);
    app.clock.advance(Duration::from_secs(86_400));
    app.post(
        &format!("/v1/sessions/{session}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(202);
    for _ in 0..1500 {
        if site.hits.load(Ordering::SeqCst) > hits {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        site.hits.load(Ordering::SeqCst) > hits,
        "the re-check reached the page"
    );
    let view = app.quest(&quest).await;
    assert_eq!(view["rechecks"], json!([]), "nothing recorded yet: {view}");
    let dir = app.stop().await;

    // After the restart the page answers, without the address.
    site.set(Page::Html(MOVED.to_owned()));
    let clock = Arc::new(ManualClock::new());
    clock.advance(Duration::from_secs(2 * 86_400));
    let app = spawn_app_in_world(dir, world(&clock), clock).await;
    let view = rechecked(&app, &quest, 1).await;
    assert_eq!(view["recheck_mark"], "stale", "{view}");
    assert_eq!(view["state"], "PASS");
    assert_eq!(view["receipt"], receipt);

    // Once: one record for the run, and the run finished with it.
    let status = app.status(&session).await;
    assert_eq!(status["recheck"]["total"], 1, "{status}");
    assert_eq!(status["recheck"]["done"], 1, "{status}");
    assert!(status["recheck"]["finished_at"].is_string(), "{status}");
    let mut db = raw(&app).await;
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM rechecks WHERE quest_id = '{quest}'"
        ))
        .await,
        1
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM quests WHERE recheck_run IS NOT NULL")
            .await,
        0,
        "no quest awaits the run any more"
    );
    assert_eq!(
        app.quest(&quest).await["rechecks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_session_with_recheck_every_is_rechecked_on_schedule_and_a_bad_period_is_refused() {
    let refused = spawn_app().await;
    let mut config = contact_config(3);
    config["recheck"] = json!({"every": "7 days"});
    let answer = refused
        .post(
            "/v1/sessions",
            &refused.admin,
            json!({"config": config, "items": companies(1)}),
        )
        .await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("config.recheck.every") && message.contains("\"7d\""),
        "the message names the field and shows a good value: {message}"
    );

    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| c.sweep_seconds = 1).await;
    let mut config = contact_config(3);
    config["recheck"] = json!({"every": "1h"});
    let session = app.scan(config, companies(2)).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let pass = app
        .submit(&agent, &quest, &lease, json!({"email": "a@firm.test"}))
        .await
        .expect(200);
    assert_eq!(pass["state"], "PASS");
    assert_eq!(
        app.status(&session).await["recheck"],
        Value::Null,
        "not due yet"
    );

    app.clock.advance(Duration::from_secs(2 * 3600));
    let view = rechecked(&app, &quest, 1).await;
    assert_eq!(view["rechecks"][0]["outcome"], "confirmed", "{view}");
    assert_eq!(view["recheck_mark"], Value::Null);
    let status = app.status(&session).await;
    assert_eq!(status["recheck"]["started_by"], "schedule", "{status}");
    assert_eq!(status["recheck"]["total"], 1, "only the PASS quest");
    assert_eq!(status["remaining"], 1);
}

/// An operator's command gate `check` that passes every result, run as `script`.
fn check_gate(dir: &std::path::Path, script: &str) -> String {
    std::fs::write(
        dir.join(script),
        "cat > /dev/null\necho '{\"verdict\": \"PASS\"}'\n",
    )
    .unwrap();
    format!(
        "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./{script}\"]\nworkdir = \"{}\"\n\
         timeout_ms = 10000\n",
        dir.display()
    )
}

#[tokio::test]
async fn a_recheck_by_another_version_of_the_gate_says_the_gate_changed() {
    let scripts = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&check_gate(scripts.path(), "check-v1.sh")).await;
    let config = json!({
        "key_column": "company",
        "gate": {"kind": "command", "name": "check"},
        "prompt": {"instructions": "Find the contact email of the company."}
    });
    let session = app.scan(config, companies(1)).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .submit(&agent, &quest, &lease, json!({"email": "a@firm.test"}))
        .await;
    assert!(answer.status.is_success(), "{}", answer.body);
    let passed = app.settled(&quest).await;
    assert_eq!(passed["state"], "PASS", "{passed}");
    let passed_version = passed["submissions"][0]["gate_version"].clone();

    // The operator upgrades the program behind the gate and restarts the server.
    let dir = app.stop().await;
    let app = spawn_app_in_with(dir, Some(&check_gate(scripts.path(), "check-v2.sh"))).await;
    app.post(
        &format!("/v1/sessions/{session}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(202);
    let view = rechecked(&app, &quest, 1).await;
    let recheck = &view["rechecks"][0];
    assert_eq!(recheck["outcome"], "confirmed", "{view}");
    assert_eq!(recheck["gate"], "command");
    assert_eq!(recheck["passed_gate_version"], passed_version);
    assert!(
        recheck["gate_version"].is_string() && recheck["gate_version"] != passed_version,
        "{recheck}"
    );
    assert_eq!(recheck["gate_changed"], true, "{recheck}");
    assert_eq!(view["receipt"], passed["receipt"], "the receipt stays");
}

#[tokio::test]
async fn a_recheck_a_minute_after_the_page_changed_asks_the_world_again_in_every_run() {
    let site = Site::serve(PAGE).await;
    let app = spawn(None).await;
    let (session, quest) = passed(&app, &site).await;
    let start = || async {
        app.post(
            &format!("/v1/sessions/{session}/recheck"),
            &app.admin,
            json!({}),
        )
        .await
        .expect(202)
    };

    // Well within the five minutes the submissions' page cache keeps a page.
    site.set(Page::Html(MOVED.to_owned()));
    app.clock.advance(Duration::from_secs(60));
    let hits = site.hits.load(Ordering::SeqCst);
    start().await;
    let view = rechecked(&app, &quest, 1).await;
    assert_eq!(view["recheck_mark"], "stale", "{view}");
    assert!(
        site.hits.load(Ordering::SeqCst) > hits,
        "the page was read again"
    );

    // The next run, a minute later, does not read the last run's page either.
    site.set(Page::Html(PAGE.to_owned()));
    app.clock.advance(Duration::from_secs(60));
    start().await;
    let view = rechecked(&app, &quest, 2).await;
    assert_eq!(view["rechecks"][1]["outcome"], "confirmed", "{view}");
    assert_eq!(view["recheck_mark"], Value::Null, "{view}");
}
