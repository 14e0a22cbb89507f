//! The email gate end to end, with real components on loopback only: the real
//! `quest serve` binary, a real DNS server (dnsmasq) serving a `.test` world,
//! and a local web server with the companies' pages. Scripted agents lease and
//! submit over HTTP; every verdict, fact, piece of evidence and the export are
//! checked.
//!
//! dnsmasq missing: the tests print why and skip, except with `CI=true`, where
//! that is a failure.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
#[path = "support/dnsmasq.rs"]
mod dnsmasq;

use dnsmasq::Dnsmasq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------- the web

/// What the web server answers at one host and path.
#[derive(Clone)]
enum Answer {
    Page(String),
    Status(u16),
    /// Never answers.
    Hang,
    Redirect(String),
    /// Echoes the `q` query parameter, as a careless search page does.
    Echo,
    /// A body with its own content type.
    Typed(&'static str, Vec<u8>),
    /// At `/~`: every `/~user` page shows `user@host`, as a careless user
    /// directory does.
    UserDir,
}

#[derive(Clone, Default)]
struct Web {
    pages: Arc<Mutex<HashMap<(String, String), Answer>>>,
    hits: Arc<AtomicUsize>,
}

impl Web {
    fn add(&self, host: &str, path: &str, answer: Answer) {
        self.pages
            .lock()
            .unwrap()
            .insert((host.to_owned(), path.to_owned()), answer);
    }

    /// The body served at a page, for checking its digest.
    fn body(&self, host: &str, path: &str) -> String {
        match &self.pages.lock().unwrap()[&(host.to_owned(), path.to_owned())] {
            Answer::Page(body) => body.clone(),
            _ => panic!("{host}{path} is not a page"),
        }
    }

    /// Serves the pages on 127.0.0.1 at a free port; routes by Host header and path.
    async fn serve(&self) -> u16 {
        let web = self.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, uri: Uri| {
            let web = web.clone();
            async move { web.answer(&headers, &uri).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    async fn answer(&self, headers: &HeaderMap, uri: &Uri) -> Response {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let host = host.split(':').next().unwrap_or_default().to_owned();
        let answer = {
            let pages = self.pages.lock().unwrap();
            let user_dir = uri
                .path()
                .starts_with("/~")
                .then(|| pages.get(&(host.clone(), "/~".to_owned())).cloned())
                .flatten();
            user_dir.or_else(|| pages.get(&(host.clone(), uri.path().to_owned())).cloned())
        };
        match answer {
            Some(Answer::Page(body)) => Html(body).into_response(),
            Some(Answer::Status(code)) => StatusCode::from_u16(code).unwrap().into_response(),
            Some(Answer::Hang) => std::future::pending().await,
            Some(Answer::Redirect(to)) => Redirect::temporary(&to).into_response(),
            Some(Answer::Typed(content_type, body)) => {
                ([(header::CONTENT_TYPE, content_type)], body).into_response()
            }
            Some(Answer::UserDir) => {
                let user = uri.path().trim_start_matches("/~");
                Html(format!("<p>Write to {user}@{host}</p>")).into_response()
            }
            Some(Answer::Echo) => {
                let q = uri
                    .query()
                    .unwrap_or_default()
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("q="))
                    .unwrap_or_default();
                let q = percent_decode(q);
                Html(format!("<p>Results for: {q}</p><p>No results.</p>")).into_response()
            }
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------- the server

/// A `quest serve` child process, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    child: Child,
    base: String,
    token: String,
    http: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Server {
    async fn start(env: &[(&str, String)]) -> Server {
        Server::start_with(env, None).await
    }

    /// Starts the server with an operator configuration file (TOML) as well.
    async fn start_with(env: &[(&str, String)], config_toml: Option<&str>) -> Server {
        let data = tempfile::tempdir().unwrap();
        let mut config_args = Vec::new();
        if let Some(toml) = config_toml {
            let path = data.path().join("quest.toml");
            std::fs::write(&path, toml).unwrap();
            config_args = vec!["--config".to_owned(), path.display().to_string()];
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let token = "e2e-admin-token-0123456789".to_owned();
        let log = std::fs::File::create(data.path().join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_quest"))
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(data.path())
            .args(&config_args)
            .env("QUEST_ADMIN_TOKEN", &token)
            .env("QUEST_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the quest binary starts");
        let mut server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            token,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            _data: data,
        };
        server.wait_healthy().await;
        server
    }

    async fn wait_healthy(&mut self) {
        for _ in 0..400 {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self._data.path().join("server.log"));
                panic!("quest serve exited with {status}: {log:?}");
            }
            let ok = self
                .http
                .get(format!("{}/healthz", self.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("quest serve did not answer /healthz");
    }

    async fn call(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> Value {
        let (status, value) = self
            .call(token, reqwest::Method::POST, path, Some(body))
            .await;
        assert!(
            (200..300).contains(&status),
            "POST {path}: {status} {value}"
        );
        value
    }

    async fn get(&self, path: &str) -> Value {
        let (status, value) = self
            .call(&self.token, reqwest::Method::GET, path, None)
            .await;
        assert_eq!(status, 200, "GET {path}: {value}");
        value
    }

    async fn agent_token(&self, name: &str) -> String {
        let created = self
            .post(
                &self.token,
                "/v1/tokens",
                json!({"name": name, "role": "agent"}),
            )
            .await;
        created["secret"].as_str().unwrap().to_owned()
    }

    /// Scans a CSV with a session config (multipart upload); returns the session id.
    async fn scan_csv(&self, csv: String, config: Value) -> String {
        let (status, session) = self.try_scan_csv(csv, config).await;
        assert_eq!(status, 201, "{session}");
        session["id"].as_str().unwrap().to_owned()
    }

    /// Scans a CSV with a session config; returns the status and the answer.
    async fn try_scan_csv(&self, csv: String, config: Value) -> (u16, Value) {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::text(csv)
                    .file_name("companies.csv")
                    .mime_str("text/csv")
                    .unwrap(),
            )
            .text("config", config.to_string());
        let response = self
            .http
            .post(format!("{}/v1/sessions", self.base))
            .bearer_auth(&self.token)
            .multipart(form)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first, so the server shuts down cleanly (and a coverage run
        // gets its profile written); SIGKILL if it does not stop.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- the world

const FETCH_TIMEOUT_MS: u64 = 1500;

/// The DNS records of the `.test` world. `hole` is a UDP port that never answers.
fn dns_records(hole: u16) -> Vec<String> {
    let mut records = Vec::new();
    let with_mx = [
        "acme", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "mu", "xi",
        "omicron", "pi", "rho", "sigma", "tau", "upsilon", "mailbox",
    ];
    for name in with_mx {
        records.push(format!("--mx-host={name}.test,mail.{name}.test,10"));
        records.push(format!("--host-record={name}.test,127.0.0.1"));
    }
    records.extend([
        // RFC 7505 null MX: preference 0, exchange ".".
        "--mx-host=kappa.test,.,0".to_owned(),
        "--host-record=kappa.test,127.0.0.1".to_owned(),
        // An address but no MX: implicit MX.
        "--host-record=lambda.test,127.0.0.1".to_owned(),
        // Questions about nu.test go to a server that never answers; its web host is local.
        format!("--server=/nu.test/127.0.0.1#{hole}"),
        "--host-record=www.nu.test,127.0.0.1".to_owned(),
        "--host-record=dir.test,127.0.0.1".to_owned(),
        // A name inside a company's domain that points into a private network.
        "--host-record=intranet.tau.test,10.0.0.1".to_owned(),
    ]);
    records
}

fn pages(web: &Web) {
    // Each company's pages carry its name, as real ones do: the gate looks for it.
    let names = HashMap::from([
        ("acme", "Acme Corp"),
        ("beta", "Beta Labs"),
        ("gamma", "Gamma Trading"),
        ("delta", "Delta Foods"),
        ("epsilon", "Epsilon Soft"),
        ("zeta", "Zeta Design"),
        ("iota", "Iota Media"),
        ("kappa", "Kappa Steel"),
        ("lambda", "Lambda Farms"),
        ("mu", "Mu Textiles"),
        ("xi", "Xi Robotics"),
        ("omicron", "Omicron Health"),
        ("upsilon", "Upsilon Games"),
    ]);
    let contact = |name: &str, body: &str| {
        let title = names.get(name).copied().unwrap_or(name);
        web.add(
            &format!("{name}.test"),
            "/contact",
            Answer::Page(format!(
                "<!doctype html><html><head><title>{title}</title></head><body><h1>Contact</h1>{body}</body></html>"
            )),
        )
    };
    contact("acme", "<p>Write to info@acme.test or call us.</p>");
    contact(
        "beta",
        "<p>Sales: sales@beta.test</p><p>Press: press@beta.test</p>",
    );
    contact("gamma", "<p>info@gamma.test</p>");
    contact("delta", "<p>Orders: deltafoods@mailbox.test</p>");
    contact("epsilon", "<p>Mail: info&#64;epsilon&#46;test</p>");
    contact("zeta", "<p>Mail: info [at] zeta.test</p>");
    web.add("eta.test", "/contact", Answer::Status(404));
    contact_at(
        web,
        "eta.test",
        "/about",
        "<p>About Eta Motors. Contact: hello@eta.test</p>",
    );
    web.add("theta.test", "/contact", Answer::Hang);
    contact("iota", "<p>info@iota.test</p>");
    contact("kappa", "<p>info@kappa.test</p>");
    contact("lambda", "<p>info@lambda.test</p>");
    contact("mu", "<p>Our old address info@old.mu.test still works.</p>");
    contact_at(
        web,
        "www.nu.test",
        "/contact",
        "<h1>Nu Logistics</h1><p>info@nu.test</p>",
    );
    contact(
        "xi",
        "<a href=\"mailto:hello%40xi.test?subject=Hello\">Write to us</a>",
    );
    contact(
        "omicron",
        "<p>Use the form.</p><!-- old: info@omicron.test -->",
    );
    web.add("pi.test", "/search", Answer::Echo);
    contact_at(
        web,
        "dir.test",
        "/rho",
        "<p>Rho Chemicals: info@rho.test</p>",
    );
    web.add(
        "sigma.test",
        "/contact",
        Answer::Redirect("http://169.254.169.254/latest/meta-data/".into()),
    );
    contact("upsilon", "<p>info@upsilon.test</p>");
}

fn contact_at(web: &Web, host: &str, path: &str, body: &str) {
    web.add(
        host,
        path,
        Answer::Page(format!("<html><body>{body}</body></html>")),
    );
}

/// One scripted attempt: the result an agent submits and the verdict it must get.
struct Attempt {
    result: Value,
    verdict: &'static str,
    /// (check, field) of every fact, in order.
    facts: Vec<(&'static str, &'static str)>,
}

fn attempt(
    result: Value,
    verdict: &'static str,
    facts: &[(&'static str, &'static str)],
) -> Attempt {
    Attempt {
        result,
        verdict,
        facts: facts.to_vec(),
    }
}

struct Company {
    name: &'static str,
    city: &'static str,
    script: Vec<Attempt>,
    final_state: &'static str,
}

/// The 20 companies and what the agents submit for each.
fn companies(port: u16) -> Vec<Company> {
    let url = |host: &str, path: &str| format!("http://{host}:{port}{path}");
    let r = |email: &str, host: &str, source: String| json!({"site": url(host, "/"), "email": email, "source": source});
    let honest = |name: &str, email: &str| {
        r(
            email,
            &format!("{name}.test"),
            url(&format!("{name}.test"), "/contact"),
        )
    };
    // The same claim again, cited with a fragment: a different result, the same page.
    let again = |mut result: Value| {
        let source = format!("{}#again", result["source"].as_str().unwrap());
        result["source"] = json!(source);
        result
    };
    let company = |name, city, script, final_state| Company {
        name,
        city,
        script,
        final_state,
    };
    vec![
        company(
            "Acme Corp",
            "Seoul",
            vec![attempt(honest("acme", "info@acme.test"), "PASS", &[])],
            "PASS",
        ),
        company(
            "Beta Labs",
            "Busan",
            vec![
                attempt(
                    honest("beta", "ceo@beta.test"),
                    "FAIL",
                    &[("source", "/email")],
                ),
                attempt(honest("beta", "sales@beta.test"), "PASS", &[]),
            ],
            "PASS",
        ),
        company(
            "Gamma Trading",
            "Incheon",
            vec![
                attempt(
                    r(
                        "info@gamma-trading.test",
                        "gamma.test",
                        url("gamma.test", "/contact"),
                    ),
                    "FAIL",
                    &[("domain", "/email"), ("source", "/email"), ("mx", "/email")],
                ),
                attempt(
                    r(
                        "sales@gamma-trading.test",
                        "gamma.test",
                        url("gamma.test", "/contact"),
                    ),
                    "FAIL",
                    &[("domain", "/email"), ("source", "/email"), ("mx", "/email")],
                ),
            ],
            "DONE",
        ),
        company(
            "Delta Foods",
            "Daegu",
            vec![attempt(
                honest("delta", "deltafoods@mailbox.test"),
                "REVIEW",
                &[("freemail", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Epsilon Soft",
            "Daejeon",
            vec![attempt(honest("epsilon", "info@epsilon.test"), "PASS", &[])],
            "PASS",
        ),
        company(
            "Zeta Design",
            "Gwangju",
            vec![attempt(
                honest("zeta", "info@zeta.test"),
                "REVIEW",
                &[("source", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Eta Motors",
            "Ulsan",
            vec![
                attempt(
                    honest("eta", "hello@eta.test"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    r("hello@eta.test", "eta.test", url("eta.test", "/about")),
                    "PASS",
                    &[],
                ),
            ],
            "PASS",
        ),
        company(
            "Theta Bank",
            "Suwon",
            vec![attempt(
                honest("theta", "info@theta.test"),
                "REVIEW",
                &[("source", "/source")],
            )],
            "REVIEW",
        ),
        company(
            "Iota Media",
            "Jeonju",
            vec![
                attempt(
                    honest("iota", "name@domain.com"),
                    "FAIL",
                    &[
                        ("blacklist", "/email"),
                        ("domain", "/email"),
                        ("source", "/email"),
                    ],
                ),
                attempt(honest("iota", "info@iota.test"), "PASS", &[]),
            ],
            "PASS",
        ),
        company(
            "Kappa Steel",
            "Pohang",
            vec![
                attempt(
                    honest("kappa", "info@kappa.test"),
                    "FAIL",
                    &[("mx", "/email")],
                ),
                attempt(
                    again(honest("kappa", "info@kappa.test")),
                    "FAIL",
                    &[("mx", "/email")],
                ),
            ],
            "DONE",
        ),
        company(
            "Lambda Farms",
            "Jeju",
            vec![attempt(
                honest("lambda", "info@lambda.test"),
                "REVIEW",
                &[("mx", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Mu Textiles",
            "Daegu",
            vec![
                attempt(
                    honest("mu", "info@old.mu.test"),
                    "FAIL",
                    &[("mx", "/email")],
                ),
                attempt(
                    again(honest("mu", "info@old.mu.test")),
                    "FAIL",
                    &[("mx", "/email")],
                ),
            ],
            "DONE",
        ),
        company(
            "Nu Logistics",
            "Busan",
            vec![attempt(
                r(
                    "info@nu.test",
                    "www.nu.test",
                    url("www.nu.test", "/contact"),
                ),
                "REVIEW",
                &[("mx", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Xi Robotics",
            "Seoul",
            vec![attempt(honest("xi", "hello@xi.test"), "PASS", &[])],
            "PASS",
        ),
        company(
            "Omicron Health",
            "Seoul",
            vec![attempt(
                honest("omicron", "info@omicron.test"),
                "REVIEW",
                &[("source", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Pi Energy",
            "Ulsan",
            vec![
                attempt(
                    r(
                        "info@pi.test",
                        "pi.test",
                        url("pi.test", "/search?q=info@pi.test"),
                    ),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    r(
                        "info@pi.test",
                        "pi.test",
                        url("pi.test", "/search?q=info%40pi.test"),
                    ),
                    "FAIL",
                    &[("source", "/source")],
                ),
            ],
            "DONE",
        ),
        company(
            "Rho Chemicals",
            "Yeosu",
            vec![attempt(
                r("info@rho.test", "rho.test", url("dir.test", "/rho")),
                "REVIEW",
                &[("domain", "/source")],
            )],
            "REVIEW",
        ),
        company(
            "Sigma Games",
            "Pangyo",
            vec![
                attempt(
                    honest("sigma", "info@sigma.test"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    again(honest("sigma", "info@sigma.test")),
                    "FAIL",
                    &[("source", "/source")],
                ),
            ],
            "DONE",
        ),
        company(
            "Tau Shipping",
            "Mokpo",
            vec![
                attempt(
                    r(
                        "info@tau.test",
                        "tau.test",
                        url("intranet.tau.test", "/contact"),
                    ),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    r("info@tau.test", "tau.test", url("intranet.tau.test", "/")),
                    "FAIL",
                    &[("source", "/source")],
                ),
            ],
            "DONE",
        ),
        company(
            "Upsilon Games",
            "Seoul",
            vec![
                attempt(
                    honest("upsilon", "INFO@upsilon.test"),
                    "FAIL",
                    &[("source", "/email")],
                ),
                attempt(honest("upsilon", "info@upsilon.test"), "PASS", &[]),
            ],
            "PASS",
        ),
    ]
}

/// What an agent saw for one quest: its id and every submit response, in order.
#[derive(Default, Clone)]
struct Seen {
    quest_id: String,
    responses: Vec<Value>,
}

/// One scripted agent: leases quests until the session is finished, submitting
/// each company's next scripted attempt.
async fn run_agent(
    server: Arc<Server>,
    token: String,
    session: String,
    scripts: Arc<HashMap<&'static str, Vec<Value>>>,
    seen: Arc<Mutex<HashMap<String, Seen>>>,
) {
    loop {
        let next = server
            .post(&token, &format!("/v1/sessions/{session}/next"), json!({}))
            .await;
        match next["status"].as_str().unwrap() {
            "finished" => return,
            "wait" => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            "assigned" => {}
            other => panic!("unexpected next status {other}"),
        }
        let quest = &next["quest"];
        let key = quest["key"].as_str().unwrap().to_owned();
        let quest_id = quest["id"].as_str().unwrap().to_owned();
        let tries = seen
            .lock()
            .unwrap()
            .get(&key)
            .map_or(0, |s| s.responses.len());
        let result = scripts[key.as_str()]
            .get(tries)
            .unwrap_or_else(|| {
                panic!(
                    "{key}: no scripted attempt {tries}; last: {:?}",
                    seen.lock()
                        .unwrap()
                        .get(&key)
                        .map(|s| s.responses.last().cloned())
                )
            })
            .clone();
        let response = server
            .post(
                &token,
                &format!("/v1/quests/{quest_id}/submit?wait=60"),
                json!({"lease_id": next["lease"]["id"], "result": result}),
            )
            .await;
        let mut seen = seen.lock().unwrap();
        let entry = seen.entry(key).or_default();
        entry.quest_id = quest_id;
        entry.responses.push(response);
    }
}

fn csv_of(companies: &[Company]) -> String {
    let mut csv = String::from("company,city,segment\n");
    for (i, c) in companies.iter().enumerate() {
        csv.push_str(&format!(
            "{},{},{}\n",
            c.name,
            c.city,
            if i % 2 == 0 { "b2b" } else { "b2c" }
        ));
    }
    csv
}

fn where_(facts: &Value) -> Vec<(String, String)> {
    facts
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_owned(),
                f["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn evidence<'a>(submission: &'a Value, check: &str) -> &'a Value {
    submission["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["check"] == check)
        .unwrap_or_else(|| panic!("no {check} evidence: {submission}"))
}

/// Every attempt got the scripted verdict and exactly the scripted facts; every
/// quest ended in its scripted state, with evidence on every verdict and a
/// receipt on every PASS.
async fn assert_scripts(server: &Server, companies: &[Company], seen: &HashMap<String, Seen>) {
    for company in companies {
        let Seen {
            quest_id,
            responses,
        } = &seen[company.name];
        assert_eq!(responses.len(), company.script.len(), "{}", company.name);
        for (i, (attempt, response)) in company.script.iter().zip(responses).enumerate() {
            assert_eq!(
                response["verdict"], attempt.verdict,
                "{} attempt {i}: {response}",
                company.name
            );
            let expected: Vec<(String, String)> = attempt
                .facts
                .iter()
                .map(|(c, f)| (c.to_string(), f.to_string()))
                .collect();
            assert_eq!(
                where_(&response["facts"]),
                expected,
                "{} attempt {i}: {response}",
                company.name
            );
        }
        let last = responses.last().unwrap();
        assert_eq!(
            last["state"], company.final_state,
            "{}: {last}",
            company.name
        );
        let quest = server.get(&format!("/v1/quests/{quest_id}")).await;
        assert_eq!(quest["state"], company.final_state, "{}", company.name);
        // Evidence on every verdict: the page (or why it was not read) and the MX answer.
        for submission in quest["submissions"].as_array().unwrap() {
            assert_eq!(submission["gate"], "email");
            assert!(evidence(submission, "source")["check"] == "source");
            assert!(evidence(submission, "mx")["check"] == "mx");
        }
        if company.final_state == "PASS" {
            assert!(
                last["receipt"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("sha256:") && r.len() == 71),
                "{}: {last}",
                company.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scanned_session_of_twenty_companies_is_decided_by_the_email_gate() {
    // A UDP socket that never answers: the upstream of the "failing" names.
    let hole = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let Some(dns) = Dnsmasq::start_or_skip(
        "a_scanned_session_of_twenty_companies_is_decided_by_the_email_gate",
        &dns_records(hole.local_addr().unwrap().port()),
    )
    .await
    else {
        return;
    };
    let web = Web::default();
    let port = web.serve().await;
    pages(&web);
    let server = Arc::new(
        Server::start(&[
            ("QUEST_DNS_SERVERS", dns.addr().to_string()),
            ("QUEST_FETCH_ALLOW", "127.0.0.0/8".into()),
            ("QUEST_FETCH_TIMEOUT_MS", FETCH_TIMEOUT_MS.to_string()),
            ("QUEST_DNS_TIMEOUT_MS", "1000".into()),
        ])
        .await,
    );

    let companies = companies(port);
    assert_eq!(companies.len(), 20);
    let session = server
        .scan_csv(
            csv_of(&companies),
            json!({
                "name": "e2e companies",
                "key_column": "company",
                "gate": {"kind": "email", "freemail": ["mailbox.test"]},
                "max_tries": 2,
                "prompt": {
                    "instructions": "Find the company's website and the contact email it publishes.",
                    "examples": [{"input": {"company": "Acme Corp"}, "result": {"site": "https://acme.co.kr", "email": "info@acme.co.kr", "source": "https://acme.co.kr/contact"}}]
                }
            }),
        )
        .await;

    let scripts: Arc<HashMap<&'static str, Vec<Value>>> = Arc::new(
        companies
            .iter()
            .map(|c| (c.name, c.script.iter().map(|a| a.result.clone()).collect()))
            .collect(),
    );
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let mut agents = Vec::new();
    for name in ["bot-1", "bot-2"] {
        let token = server.agent_token(name).await;
        agents.push(tokio::spawn(run_agent(
            server.clone(),
            token,
            session.clone(),
            scripts.clone(),
            seen.clone(),
        )));
    }
    for agent in agents {
        agent.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();

    // Every attempt got the scripted verdict and exactly the scripted facts.
    assert_scripts(&server, &companies, &seen).await;
    let quest = |name: &str| {
        let server = server.clone();
        let id = seen[name].quest_id.clone();
        async move { server.get(&format!("/v1/quests/{id}")).await }
    };
    let fact = |name: &str, attempt: usize, index: usize| {
        seen[name].responses[attempt]["facts"][index].clone()
    };

    // Honest: the page's digest, status and snippet, and the MX hosts.
    let acme = quest("Acme Corp").await;
    let submission = &acme["submissions"][0];
    let page = evidence(submission, "source");
    let body = web.body("acme.test", "/contact");
    assert_eq!(page["status"], 200);
    assert_eq!(page["url"], format!("http://acme.test:{port}/contact"));
    assert_eq!(page["final_url"], page["url"]);
    assert_eq!(page["sha256"], hex::encode(Sha256::digest(body.as_bytes())));
    assert_eq!(page["found"], "exact");
    assert!(
        page["snippet"]
            .as_str()
            .unwrap()
            .contains("Write to info@acme.test")
    );
    assert!(page["fetched_at"].as_str().is_some());
    assert_eq!(
        evidence(submission, "mx")["hosts"],
        json!(["10 mail.acme.test"])
    );
    assert_eq!(acme["receipt"], submission["receipt"]);

    // Invented: the hint names the addresses that are on the page.
    let invented = fact("Beta Labs", 0, 0);
    assert_eq!(invented["actual"], "not on the page");
    assert!(
        invented["hint"]
            .as_str()
            .unwrap()
            .contains("sales@beta.test, press@beta.test"),
        "{invented}"
    );
    assert_eq!(seen["Beta Labs"].responses[1]["tries"], 1);

    // Wrong domain, twice: DONE by the limit.
    let wrong = fact("Gamma Trading", 0, 0);
    assert_eq!(
        wrong["expected"],
        "an address at gamma.test or a subdomain of it"
    );
    assert_eq!(wrong["actual"], "gamma-trading.test");
    assert!(
        fact("Gamma Trading", 0, 2)["actual"]
            .as_str()
            .unwrap()
            .contains("NXDOMAIN")
    );
    assert_eq!(quest("Gamma Trading").await["decided_by"], "limit");

    // Freemail, entity-encoded, obfuscated.
    assert_eq!(fact("Delta Foods", 0, 0)["actual"], "mailbox.test");
    let epsilon = quest("Epsilon Soft").await;
    assert!(
        evidence(&epsilon["submissions"][0], "source")["snippet"]
            .as_str()
            .unwrap()
            .contains("info@epsilon.test")
    );
    assert!(
        fact("Zeta Design", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("info [at] zeta.test")
    );

    // Dead page, then the right page; slow page.
    assert_eq!(fact("Eta Motors", 0, 0)["actual"], "HTTP 404");
    let slow = fact("Theta Bank", 0, 0);
    assert_eq!(
        slow["actual"],
        format!("no complete answer within {FETCH_TIMEOUT_MS} ms")
    );
    let theta = quest("Theta Bank").await;
    assert!(
        evidence(&theta["submissions"][0], "source")["error"]
            .as_str()
            .unwrap()
            .contains("no complete answer")
    );

    // Placeholder: no MX lookup for it.
    assert!(
        fact("Iota Media", 0, 0)["hint"]
            .as_str()
            .unwrap()
            .contains("placeholder")
    );
    let iota = quest("Iota Media").await;
    assert_eq!(
        evidence(&iota["submissions"][0], "mx")["skipped"],
        "the address is a placeholder"
    );

    // DNS: null MX, implicit MX, NXDOMAIN, no answer.
    assert!(
        fact("Kappa Steel", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("null MX")
    );
    let kappa = quest("Kappa Steel").await;
    assert_eq!(
        evidence(&kappa["submissions"][0], "mx")["answer"],
        "null_mx"
    );
    assert!(
        fact("Lambda Farms", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("implicit MX")
    );
    assert!(
        fact("Mu Textiles", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("old.mu.test does not exist")
    );
    assert!(
        fact("Nu Logistics", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("no DNS answer")
    );

    // A mailto link counts; a comment only does not; an echoing URL proves nothing.
    assert_eq!(
        evidence(&quest("Xi Robotics").await["submissions"][0], "source")["found"],
        "exact"
    );
    assert!(
        fact("Omicron Health", 0, 0)["actual"]
            .as_str()
            .unwrap()
            .contains("HTML comment")
    );
    assert!(
        fact("Pi Energy", 1, 0)["expected"]
            .as_str()
            .unwrap()
            .contains("does not carry the address")
    );
    assert_eq!(fact("Rho Chemicals", 0, 0)["actual"], "dir.test");

    // SSRF: a redirect to the metadata address and a name in a private network.
    let ssrf = fact("Sigma Games", 0, 0);
    assert!(
        ssrf["actual"]
            .as_str()
            .unwrap()
            .contains("169.254.169.254 is a link-local"),
        "{ssrf}"
    );
    // The fact names the host the agent gave, never the addresses behind it.
    let private = fact("Tau Shipping", 0, 0);
    assert_eq!(
        private["actual"],
        "refused before connecting: intranet.tau.test resolves only to non-public addresses"
    );
    let tau = quest("Tau Shipping").await;
    assert!(!tau.to_string().contains("10.0.0.1"), "{tau}");

    // Other letter case: the fact shows the address as written.
    assert_eq!(
        fact("Upsilon Games", 0, 0)["actual"],
        "only info@upsilon.test"
    );

    // Status, and the export: original columns and values in order, then the quest columns.
    let status = server.get(&format!("/v1/sessions/{session}/status")).await;
    assert_eq!(
        (
            status["total"].as_u64(),
            status["remaining"].as_u64(),
            status["pass"].as_u64(),
            status["review"].as_u64(),
            status["done"].as_u64()
        ),
        (Some(20), Some(0), Some(7), Some(7), Some(6))
    );
    let export = server
        .http
        .get(format!(
            "{}/v1/sessions/{session}/export?format=csv",
            server.base
        ))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut reader = csv::Reader::from_reader(export.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        [
            "company",
            "city",
            "segment",
            "quest_state",
            "quest_decided_by",
            "quest_tries",
            "result_site",
            "result_email",
            "result_source",
            "quest_facts",
            "quest_evidence",
            "quest_receipt",
            "quest_stale",
            "quest_rechecked_at",
            "quest_recheck_facts",
            "quest_suspect",
            "quest_audit"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 20);
    for (row, company) in rows.iter().zip(&companies) {
        assert_eq!(&row[0], company.name);
        assert_eq!(&row[1], company.city);
        assert_eq!(&row[3], company.final_state, "{}", company.name);
        let evidence: Value = serde_json::from_str(&row[10]).unwrap();
        assert_eq!(evidence[0]["check"], "source", "{}", company.name);
        assert_eq!(evidence[1]["check"], "mx", "{}", company.name);
        match company.final_state {
            "PASS" => {
                assert_eq!(&row[4], "gate");
                assert!(row[11].starts_with("sha256:"), "{}", company.name);
                let last = company.script.last().unwrap();
                assert_eq!(&row[7], last.result["email"].as_str().unwrap());
            }
            "REVIEW" => assert!(!row[9].is_empty(), "{}: the facts say why", company.name),
            _ => assert_eq!(&row[4], "limit"),
        }
    }
    drop(dns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_empty_allow_list_the_server_fetches_no_page_on_loopback() {
    let Some(dns) = Dnsmasq::start_or_skip(
        "with_an_empty_allow_list_the_server_fetches_no_page_on_loopback",
        &[
            "--mx-host=acme.test,mail.acme.test,10".to_owned(),
            "--host-record=acme.test,127.0.0.1".to_owned(),
        ],
    )
    .await
    else {
        return;
    };
    let web = Web::default();
    let port = web.serve().await;
    contact_at(&web, "acme.test", "/contact", "<p>info@acme.test</p>");
    let server = Server::start(&[("QUEST_DNS_SERVERS", dns.addr().to_string())]).await;
    let created = server
        .post(
            &server.token.clone(),
            "/v1/sessions",
            json!({"config": {"gate": {"kind": "email"}, "max_tries": 10}, "items": [{"company": "Acme Corp"}]}),
        )
        .await;
    let session = created["id"].as_str().unwrap();
    let agent = server.agent_token("bot").await;
    for source in [
        format!("http://acme.test:{port}/contact"),
        format!("http://127.0.0.1:{port}/contact"),
        format!("http://[::1]:{port}/contact"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let next = server
            .post(&agent, &format!("/v1/sessions/{session}/next"), json!({}))
            .await;
        let id = next["quest"]["id"].as_str().unwrap();
        let response = server
            .post(
                &agent,
                &format!("/v1/quests/{id}/submit?wait=60"),
                json!({"lease_id": next["lease"]["id"], "result": {"site": format!("http://acme.test:{port}/"), "email": "info@acme.test", "source": source}}),
            )
            .await;
        assert_eq!(response["verdict"], "FAIL", "{source}: {response}");
        let facts = &response["facts"];
        let refusal = facts
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == "/source" && f["check"] == "source")
            .unwrap_or_else(|| panic!("{source}: {response}"));
        assert!(
            refusal["actual"]
                .as_str()
                .unwrap()
                .starts_with("refused before connecting"),
            "{source}: {refusal}"
        );
    }
    assert_eq!(
        web.hits.load(Ordering::SeqCst),
        0,
        "no request reached the web server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cheap_tricks_fail_and_a_reused_address_goes_to_review_with_settings_from_the_file() {
    let names = ["acme", "chi", "phi", "psi", "omega", "tau"];
    let mut records = Vec::new();
    for name in names {
        records.push(format!("--mx-host={name}.test,mail.{name}.test,10"));
        records.push(format!("--host-record={name}.test,127.0.0.1"));
    }
    let Some(dns) = Dnsmasq::start_or_skip(
        "cheap_tricks_fail_and_a_reused_address_goes_to_review_with_settings_from_the_file",
        &records,
    )
    .await
    else {
        return;
    };
    let web = Web::default();
    let port = web.serve().await;
    // A port nothing listens on (bound a moment ago, then let go).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let contact =
        |name: &str, body: &str| contact_at(&web, &format!("{name}.test"), "/contact", body);
    contact(
        "acme",
        "<h1>Acme Corp, part of Acme Holdings</h1><p>Write to info@acme.test</p>",
    );
    contact("chi", "<h1>Chi Tools</h1><p>info@chi.test</p>");
    contact("phi", "<h1>Phi Photo</h1><p>info@phi.test</p>");
    web.add(
        "phi.test",
        "/logo.png",
        Answer::Typed("image/png", b"\x89PNG\r\n\x1a\n info@phi.test".to_vec()),
    );
    contact_at(&web, "psi.test", "/", "<h1>Psi Bank</h1>");
    web.add("psi.test", "/contact", Answer::Status(403));
    web.add("psi.test", "/team", Answer::Status(401));
    web.add(
        "psi.test",
        "/catalogue",
        Answer::Page(format!(
            "<p>{}</p><p>info@psi.test</p>",
            "x".repeat(3 << 20)
        )),
    );
    web.add("omega.test", "/~", Answer::UserDir);
    contact("omega", "<h1>Omega Books</h1><p>contact@omega.test</p>");
    contact(
        "tau",
        "<h1>Tau Forms</h1><form><input type=\"hidden\" name=\"to\" value=\"info@tau.test\"><button>Send</button></form>",
    );
    // Every web and DNS setting comes from the file: without it, no name resolves.
    let server = Arc::new(
        Server::start_with(
            &[],
            Some(&format!(
                "[email]\ndns_servers = [\"{}\"]\nfetch_allow = [\"127.0.0.0/8\"]\nfetch_timeout_ms = {FETCH_TIMEOUT_MS}\ndns_timeout_ms = 1000\n",
                dns.addr()
            )),
        )
        .await,
    );

    let url = |host: &str, p: u16, path: &str| format!("http://{host}:{p}{path}");
    let r = |email: &str, host: &str, site_port: u16, source: String| json!({"site": url(host, site_port, "/"), "email": email, "source": source});
    let honest = |name: &str, email: &str, path: &str| {
        let host = format!("{name}.test");
        r(email, &host, port, url(&host, port, path))
    };
    let company = |name, script, final_state| Company {
        name,
        city: "Seoul",
        script,
        final_state,
    };
    let companies = vec![
        company(
            "Acme Corp",
            vec![attempt(
                honest("acme", "info@acme.test", "/contact"),
                "PASS",
                &[],
            )],
            "PASS",
        ),
        company(
            "Acme Holdings",
            vec![attempt(
                honest("acme", "info@acme.test", "/contact"),
                "REVIEW",
                &[("duplicate", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Chi Tools",
            vec![
                attempt(
                    r(
                        "info@chi.test",
                        "chi.test",
                        port,
                        url("chi.test", closed, "/contact"),
                    ),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    r(
                        "info@chi.test",
                        "chi.test",
                        closed,
                        url("chi.test", closed, "/contact"),
                    ),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(honest("chi", "info@chi.test", "/contact"), "PASS", &[]),
            ],
            "PASS",
        ),
        company(
            "Phi Photo",
            vec![
                attempt(
                    honest("phi", "info@phi.test", "/logo.png"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(honest("phi", "info@phi.test", "/contact"), "PASS", &[]),
            ],
            "PASS",
        ),
        company(
            "Psi Bank",
            vec![
                attempt(
                    honest("psi", "info@psi.test", "/contact"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    honest("psi", "info@psi.test", "/team"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    honest("psi", "info@psi.test", "/catalogue"),
                    "FAIL",
                    &[("source", "/email")],
                ),
            ],
            "DONE",
        ),
        company(
            "Omega Books",
            vec![
                attempt(
                    honest("omega", "info@omega.test", "/~info"),
                    "FAIL",
                    &[("source", "/source")],
                ),
                attempt(
                    honest("omega", "contact@omega.test", "/contact"),
                    "PASS",
                    &[],
                ),
            ],
            "PASS",
        ),
        company(
            "Tau Forms",
            vec![attempt(
                honest("tau", "info@tau.test", "/contact"),
                "REVIEW",
                &[("source", "/email")],
            )],
            "REVIEW",
        ),
    ];
    let session = server
        .scan_csv(
            csv_of(&companies),
            json!({"name": "tricks", "key_column": "company", "gate": {"kind": "email"}, "max_tries": 3}),
        )
        .await;
    let scripts: Arc<HashMap<&'static str, Vec<Value>>> = Arc::new(
        companies
            .iter()
            .map(|c| (c.name, c.script.iter().map(|a| a.result.clone()).collect()))
            .collect(),
    );
    let seen = Arc::new(Mutex::new(HashMap::new()));
    // One agent: quests are leased in upload order, so Acme Corp is decided
    // before Acme Holdings cites the same address.
    let token = server.agent_token("bot").await;
    run_agent(server.clone(), token, session, scripts, seen.clone()).await;
    let seen = seen.lock().unwrap().clone();
    assert_scripts(&server, &companies, &seen).await;

    let fact = |name: &str, attempt: usize| {
        let facts = &seen[name].responses[attempt]["facts"];
        facts[facts.as_array().unwrap().len() - 1]["actual"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        fact("Acme Holdings", 0),
        "info@acme.test is also the result for \"Acme Corp\""
    );
    assert!(
        fact("Chi Tools", 0).contains(&format!(
            "asks for port {closed}, the site's port is {port}"
        )),
        "{}",
        fact("Chi Tools", 0)
    );
    assert_eq!(
        fact("Chi Tools", 1),
        format!("no connection to port {closed}: connection refused")
    );
    assert_eq!(fact("Phi Photo", 0), "image/png, not a web page");
    assert!(
        fact("Psi Bank", 0).contains("while the site's home page"),
        "{}",
        fact("Psi Bank", 0)
    );
    assert_eq!(fact("Psi Bank", 1), "HTTP 401");
    assert_eq!(
        fact("Psi Bank", 2),
        "not in the first 2097152 bytes of a longer page"
    );
    assert!(
        fact("Omega Books", 0).ends_with("@omega.test: the page repeats its URL"),
        "{}",
        fact("Omega Books", 0)
    );
    assert!(
        fact("Tau Forms", 0).contains("visitors do not see"),
        "{}",
        fact("Tau Forms", 0)
    );
    drop(dns);
}

/// The site must be the company's (its domain from a column of the row, its
/// name on a page), and no answer tells an agent about the server's network.
#[tokio::test]
async fn the_site_must_be_the_companys_and_no_answer_maps_the_servers_network() {
    let mut records = Vec::new();
    for name in ["acme", "beta", "gamma"] {
        records.push(format!("--mx-host={name}.test,mail.{name}.test,10"));
        records.push(format!("--host-record={name}.test,127.0.0.1"));
    }
    // split.test has no MX, and its address is one of the server's own network.
    records.push("--host-record=split.test,10.0.0.7".to_owned());
    records.push("--host-record=www.split.test,127.0.0.1".to_owned());
    let name = "the_site_must_be_the_companys_and_no_answer_maps_the_servers_network";
    let Some(dns) = Dnsmasq::start_or_skip(name, &records).await else {
        return;
    };
    let web = Web::default();
    let port = web.serve().await;
    contact_at(
        &web,
        "acme.test",
        "/contact",
        "<h1>Acme Corp</h1><p>info@acme.test</p>",
    );
    contact_at(
        &web,
        "beta.test",
        "/contact",
        "<h1>Beta Labs</h1><p>info@beta.test</p>",
    );
    contact_at(
        &web,
        "gamma.test",
        "/contact",
        "<p>Write to info@gamma.test</p>",
    );
    contact_at(&web, "gamma.test", "/", "<h1>Welcome to our shop</h1>");
    contact_at(
        &web,
        "www.split.test",
        "/contact",
        "<h1>Split Co</h1><p>info@split.test</p>",
    );
    let server = Arc::new(
        Server::start_with(
            &[],
            Some(&format!(
                "[email]\ndns_servers = [\"{}\"]\nfetch_allow = [\"127.0.0.0/8\"]\nfetch_timeout_ms = {FETCH_TIMEOUT_MS}\ndns_timeout_ms = 1000\n",
                dns.addr()
            )),
        )
        .await,
    );
    let url = |host: &str, path: &str| format!("http://{host}:{port}{path}");
    let claim = |email: &str, host: &str| json!({"site": url(host, "/"), "email": email, "source": url(host, "/contact")});
    let company = |name, script, final_state| Company {
        name,
        city: "",
        script,
        final_state,
    };
    let companies = vec![
        company(
            "Acme Corp",
            vec![attempt(claim("info@acme.test", "acme.test"), "PASS", &[])],
            "PASS",
        ),
        // A real address on a real site with the company's name, but the table
        // says the company's domain is another one.
        company(
            "Beta Labs",
            vec![attempt(
                claim("info@beta.test", "beta.test"),
                "FAIL",
                &[("company", "/site")],
            )],
            "DONE",
        ),
        company(
            "Gamma Trading",
            vec![attempt(
                claim("info@gamma.test", "gamma.test"),
                "REVIEW",
                &[("company", "/source")],
            )],
            "REVIEW",
        ),
        company(
            "Split Co",
            vec![attempt(
                claim("info@split.test", "www.split.test"),
                "REVIEW",
                &[("mx", "/email")],
            )],
            "REVIEW",
        ),
        company(
            "Db Corp",
            vec![attempt(
                json!({"site": "http://db.corp.internal/", "email": "x@db.corp.internal", "source": "http://wiki/contact"}),
                "FAIL",
                &[
                    ("blacklist", "/email"),
                    ("blacklist", "/site"),
                    ("blacklist", "/source"),
                    ("domain", "/source"),
                ],
            )],
            "DONE",
        ),
    ];
    let csv = "company,domain\nAcme Corp,www.acme.test\nBeta Labs,beta.co.kr\nGamma Trading,\nSplit Co,split.test\nDb Corp,\n";
    let config = json!({"key_column": "company", "gate": {"kind": "email", "site_column": "domain"}, "max_tries": 1});
    let mut unknown = config.clone();
    unknown["gate"]["site_column"] = json!("website");
    let (status, refused) = server.try_scan_csv(csv.to_owned(), unknown).await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`website`") && message.contains("company, domain"),
        "{message}"
    );

    let session = server.scan_csv(csv.to_owned(), config).await;
    let scripts: Arc<HashMap<&'static str, Vec<Value>>> = Arc::new(
        companies
            .iter()
            .map(|c| (c.name, c.script.iter().map(|a| a.result.clone()).collect()))
            .collect(),
    );
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let token = server.agent_token("bot").await;
    run_agent(server.clone(), token, session, scripts, seen.clone()).await;
    let seen = seen.lock().unwrap().clone();
    assert_scripts(&server, &companies, &seen).await;

    let fact = |name: &str| seen[name].responses[0]["facts"][0].clone();
    assert!(
        fact("Beta Labs")["expected"]
            .as_str()
            .unwrap()
            .starts_with("a site on beta.co.kr"),
        "{}",
        fact("Beta Labs")
    );
    assert!(
        fact("Gamma Trading")["actual"]
            .as_str()
            .unwrap()
            .ends_with("names Gamma Trading"),
        "{}",
        fact("Gamma Trading")
    );
    // What any agent can read about the quests: no address of the server's network.
    for company in &companies {
        let quest = server
            .get(&format!("/v1/quests/{}", seen[company.name].quest_id))
            .await;
        let text = quest.to_string();
        assert!(!text.contains("10.0.0.7"), "{}: {text}", company.name);
    }
    let split = server
        .get(&format!("/v1/quests/{}", seen["Split Co"].quest_id))
        .await;
    let mx = evidence(&split["submissions"][0], "mx");
    assert_eq!(mx["answer"], "address_only");
    assert_eq!(mx["addresses"], json!([]));
    assert!(
        mx["withheld"]
            .as_str()
            .unwrap()
            .starts_with("1 non-public address"),
        "{mx}"
    );
}
