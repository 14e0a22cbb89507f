//! Speaking to the console like a browser without a browser: sign in with a
//! form, keep the session cookie, read pages, send forms; and the sessions
//! the tests work on.

use reqwest::header::{self, HeaderMap};
use reqwest::{StatusCode, redirect};
use serde_json::{Value, json};

use crate::helpers::{TestApp, assigned, companies, contact_config};

/// A client that follows no redirect, so a test sees each answer.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

/// An answer of the console: status, headers, body text.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The `Location` of a redirect.
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The body with `/` unescaped, as a browser reads attribute values.
    pub fn plain(&self) -> String {
        self.body.replace("&#x2f;", "/")
    }

    /// Asserts the status and returns the body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &str {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected answer: {}",
            self.body
        );
        &self.body
    }
}

/// A signed-in browser: its cookie and the CSRF token its pages carry.
#[derive(Debug, Clone)]
pub struct Browserless {
    pub cookie: String,
    pub csrf: String,
}

/// A urlencoded form body.
pub fn form(fields: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

/// The value of the first `name="csrf"` input of a page.
pub fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("the page carries a CSRF token");
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// GETs a console page, with a session cookie when given.
pub async fn get(app: &TestApp, path: &str, who: Option<&Browserless>) -> Page {
    let mut request = client().get(format!("{}{path}", app.base));
    if let Some(who) = who {
        request = request.header(header::COOKIE, format!("quest_console={}", who.cookie));
    }
    read(request.send().await.expect("the server answers")).await
}

/// POSTs a form as a page of the console would (same Origin), or with the
/// extra headers given instead.
pub async fn post(
    app: &TestApp,
    path: &str,
    who: Option<&Browserless>,
    body: String,
    headers: &[(&str, &str)],
) -> Page {
    let mut request = client()
        .post(format!("{}{path}", app.base))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body);
    if let Some(who) = who {
        request = request.header(header::COOKIE, format!("quest_console={}", who.cookie));
    }
    if headers.is_empty() {
        request = request.header(header::ORIGIN, app.base.clone());
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    read(request.send().await.expect("the server answers")).await
}

async fn read(response: reqwest::Response) -> Page {
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap_or_default(),
    }
}

/// Signs in with a token's secret through the sign-in form.
pub async fn sign_in(app: &TestApp, secret: &str) -> Browserless {
    let answer = post(
        app,
        "/ui/login",
        None,
        form(&[("token", secret), ("next", "/ui")]),
        &[],
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::SEE_OTHER,
        "sign-in failed: {}",
        answer.body
    );
    let set = answer
        .headers
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .expect("sign-in sets a cookie");
    let cookie = set
        .split(';')
        .next()
        .and_then(|p| p.strip_prefix("quest_console="))
        .expect("the session cookie")
        .to_owned();
    let mut who = Browserless {
        cookie,
        csrf: String::new(),
    };
    let dashboard = get(app, "/ui", Some(&who)).await;
    who.csrf = csrf_of(dashboard.expect(200));
    who
}

/// A session of `n` companies under the schema gate, and an agent token for it.
pub async fn session(app: &TestApp, n: usize) -> (String, String) {
    let session = app.scan(contact_config(3), companies(n)).await;
    let agent = app.token("agent", &agent_token_name(&session)).await;
    (session, agent)
}

/// The agent `name` leases a quest and submits `result`; returns the quest id and the answer.
pub async fn work(
    app: &TestApp,
    agent: &str,
    session: &str,
    name: &str,
    result: Value,
) -> (String, Value) {
    let next = app.next(agent, session, name).await;
    let (quest, lease) = assigned(&next);
    let answer = app.submit(agent, &quest, &lease, result).await.expect(200);
    (quest, answer)
}

/// The name of the agent token [`session`] makes for a session.
pub fn agent_token_name(session: &str) -> String {
    format!("agent-{}", &session[session.len() - 8..])
}

/// `n` quests sent to REVIEW (low confidence); their ids in queue order.
pub async fn reviews(app: &TestApp, agent: &str, session: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let result = json!({"email": format!("person{i}@firm.test"), "confidence": "low"});
        let (quest, answer) = work(app, agent, session, "bot", result).await;
        assert_eq!(answer["state"], "REVIEW", "{answer}");
        ids.push(quest);
    }
    ids
}

/// A session whose quests need two reviewers (`review.reviewers = 2`), and
/// `n` of its quests in REVIEW.
pub async fn two_reviewer_quests(app: &TestApp, n: usize) -> Vec<String> {
    let mut config = contact_config(3);
    config["review"] = json!({"reviewers": 2});
    let session = app.scan(config, companies(n + 1)).await;
    let agent = app.token("agent", &agent_token_name(&session)).await;
    reviews(app, &agent, &session, n).await
}

/// Two reviewers' decisions on 12 shared quests, the first's then the
/// second's, whose Cohen's kappa is 32/68 by hand: both reject 3, the first
/// rejects and the second approves 1, the first approves and the second
/// rejects 2, both approve 6.
pub fn kappa_table() -> impl Iterator<Item = (&'static str, &'static str)> {
    [
        (3, "reject", "reject"),
        (1, "reject", "approve"),
        (2, "approve", "reject"),
        (6, "approve", "approve"),
    ]
    .into_iter()
    .flat_map(|(n, a, b)| std::iter::repeat_n((a, b), n))
}

/// A reviewer token's secret; with `adjudicate`, one that may adjudicate.
pub async fn reviewer_token(app: &TestApp, name: &str, adjudicate: bool) -> String {
    let body = json!({"name": name, "role": "reviewer", "adjudicate": adjudicate});
    let created = app.post("/v1/tokens", &app.admin, body).await.expect(201);
    assert_eq!(created["adjudicate"], adjudicate);
    created["secret"].as_str().unwrap().to_owned()
}

/// `who`'s review page at `path`: the quest it opens, and the page.
pub async fn review_page(app: &TestApp, who: &Browserless, path: &str) -> (Option<String>, String) {
    let body = get(app, path, Some(who)).await.expect(200).to_owned();
    let current = body
        .split(r#"data-review-current data-quest-id=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned);
    (current, body)
}

/// How many times `needle` occurs in `haystack`.
pub fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// A console event stream (`/ui/events?...`) being read as a browser's
/// EventSource would: what came so far, and more on demand.
pub struct Events {
    stream: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    pub text: String,
}

impl Events {
    /// Opens the stream of `query` for the signed-in browser `who`.
    pub async fn open(app: &TestApp, who: &Browserless, query: &str) -> Events {
        let response = client()
            .get(format!("{}/ui/events?{query}", app.base))
            .header(header::COOKIE, format!("quest_console={}", who.cookie))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        Events {
            stream: Box::pin(response.bytes_stream()),
            text: String::new(),
        }
    }

    /// Reads until what came holds `needle` (30 s at most).
    pub async fn until(&mut self, needle: &str) {
        use futures_util::StreamExt;
        while !self.text.contains(needle) {
            let chunk =
                tokio::time::timeout(std::time::Duration::from_secs(30), self.stream.next())
                    .await
                    .expect("the stream sends in time")
                    .expect("the stream is open")
                    .unwrap();
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
