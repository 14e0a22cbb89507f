//! `spawn_app()`: a real server on a random loopback port with a fresh data dir,
//! and request helpers that speak the API like a client would.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quest::app::App;
use quest::config::Config;
use quest::gates::email::EmailWorld;
use quest::testing::ManualClock;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;

use crate::postgres::TestDatabase;
use quest::store::SqliteStore;
use quest::store::postgres::{PgStore, TimeSource};

/// A running server and a client for it.
pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub admin: String,
    pub clock: Arc<ManualClock>,
    pub data_dir: TempDir,
    /// The server's own store, to drive a worker's step directly.
    pub store: Arc<dyn quest::store::Store>,
    /// The PostgreSQL database the server keeps its data in, if not SQLite.
    pub database_url: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// An HTTP answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// Reads a response's status and JSON body.
    pub async fn read(response: reqwest::Response) -> Answer {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// The `error.code` of a refusal.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("<none>")
    }

    /// Asserts the status and returns the body.
    #[track_caller]
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected answer: {}",
            self.body
        );
        self.body
    }

    /// Asserts a refusal with this status and code, in the error envelope.
    #[track_caller]
    pub fn refused(&self, status: u16, code: &str) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected answer: {}",
            self.body
        );
        assert_eq!(self.code(), code, "unexpected code: {}", self.body);
        let message = self.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty(),
            "a refusal says what to do: {}",
            self.body
        );
    }
}

/// Starts a server on a fresh data dir.
pub async fn spawn_app() -> TestApp {
    let data_dir = tempfile::tempdir().expect("a temp dir");
    spawn_app_in(data_dir).await
}

/// Starts a server on an existing data dir (a restart).
pub async fn spawn_app_in(data_dir: TempDir) -> TestApp {
    spawn_app_in_with(data_dir, None).await
}

/// Starts a server on a fresh data dir with an operator configuration file (TOML).
pub async fn spawn_app_with(config_toml: &str) -> TestApp {
    let data_dir = tempfile::tempdir().expect("a temp dir");
    spawn_app_in_with(data_dir, Some(config_toml)).await
}

/// Starts a server on an existing data dir, with an operator configuration
/// file when given (written into the data dir as `quest.toml`).
pub async fn spawn_app_in_with(data_dir: TempDir, config_toml: Option<&str>) -> TestApp {
    spawn_app_tuned(data_dir, config_toml, |_| {}).await
}

/// [`spawn_app_in_with`], with the server's settings changed by `tune` first.
pub async fn spawn_app_tuned(
    data_dir: TempDir,
    config_toml: Option<&str>,
    tune: impl FnOnce(&mut Config),
) -> TestApp {
    spawn_app_world(data_dir, config_toml, tune, None).await
}

/// Starts a server on a fresh data dir with an operator configuration file and
/// a simulated web and DNS for the email gate (fakes, no network).
pub async fn spawn_app_with_world(config_toml: &str, world: EmailWorld) -> TestApp {
    let data_dir = tempfile::tempdir().expect("a temp dir");
    spawn_app_world(data_dir, Some(config_toml), |_| {}, Some(world)).await
}

async fn spawn_app_world(
    data_dir: TempDir,
    config_toml: Option<&str>,
    tune: impl FnOnce(&mut Config),
    world: Option<EmailWorld>,
) -> TestApp {
    spawn_app_clocked(
        data_dir,
        config_toml,
        tune,
        world,
        Arc::new(ManualClock::new()),
    )
    .await
}

/// Starts a server on an existing data dir whose clock is `clock` (a restart
/// after time has passed).
pub async fn spawn_app_in_clocked(data_dir: TempDir, clock: Arc<ManualClock>) -> TestApp {
    spawn_app_clocked(data_dir, None, |_| {}, None, clock).await
}

/// Starts a server on `data_dir` with a world for the email gate whose parts
/// (a page cache, a fetcher) tell time by the server's own `clock`.
pub async fn spawn_app_in_world(
    data_dir: TempDir,
    world: EmailWorld,
    clock: Arc<ManualClock>,
) -> TestApp {
    spawn_app_clocked(data_dir, None, |_| {}, Some(world), clock).await
}

async fn spawn_app_clocked(
    data_dir: TempDir,
    config_toml: Option<&str>,
    tune: impl FnOnce(&mut Config),
    world: Option<EmailWorld>,
    clock: Arc<ManualClock>,
) -> TestApp {
    let mut config = Config::with_data_dir(data_dir.path());
    // The server runs every command program under its own binary (the trampoline).
    config.runner_exe = Some(env!("CARGO_BIN_EXE_quest").into());
    if on_postgres() {
        config.database_url = Some(postgres_for(data_dir.path()).await);
    }
    tune(&mut config);
    if let Some(toml) = config_toml {
        let path = data_dir.path().join("quest.toml");
        std::fs::write(&path, toml).expect("the config file is written");
        config.config_file = Some(path);
    }
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.admin_token = Some("test-admin-token".into());
    let app_database_url = config.database_url.clone();
    let app = App::build_with(config, clock.clone(), world)
        .await
        .expect("the app builds");
    let base = format!("http://{}", app.local_addr());
    let admin = app
        .admin_token()
        .expect("the configured admin token")
        .to_owned();
    let store = app.store();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));
    TestApp {
        base,
        client: reqwest::Client::new(),
        admin,
        clock,
        database_url: app_database_url,
        data_dir,
        store,
        stop: Some(stop),
        server: Some(server),
    }
}

/// Whether the black-box suite runs its servers on PostgreSQL: the test's own
/// switch `QUEST_TEST_DATABASE=postgres` (SQLite otherwise).
pub fn on_postgres() -> bool {
    std::env::var("QUEST_TEST_DATABASE").as_deref() == Ok("postgres")
}

/// The test databases of the data dirs in use, so that a restart on the same
/// data dir finds the same database.
static DATABASES: std::sync::Mutex<Vec<(PathBuf, TestDatabase)>> =
    std::sync::Mutex::new(Vec::new());

/// The URL of the PostgreSQL database that belongs to `data_dir`, created on
/// first use. PostgreSQL was asked for, so its absence fails the test.
pub(crate) async fn postgres_for(data_dir: &Path) -> String {
    if let Some(url) = database_url_of(data_dir) {
        return url;
    }
    // The databases of data dirs that are gone (a stopped server's dir the
    // test dropped without a restart) go with them.
    let gone: Vec<(PathBuf, TestDatabase)> = {
        let mut all = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
        let (gone, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|(dir, _)| !dir.exists());
        *all = kept;
        gone
    };
    drop(gone);
    let db = TestDatabase::create()
        .await
        .unwrap_or_else(|why| panic!("QUEST_TEST_DATABASE=postgres, but {why}"));
    let url = db.url.clone();
    DATABASES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((data_dir.to_owned(), db));
    url
}

/// Starts a server on PostgreSQL, on a fresh database of its own, or returns
/// `None` after printing why the test named `test` skips that backend (a
/// failure with `CI=true`).
pub async fn spawn_app_on_postgres(test: &str) -> Option<TestApp> {
    let db = TestDatabase::create_or_skip(test).await?;
    let data_dir = tempfile::tempdir().expect("a temp dir");
    let url = db.url.clone();
    DATABASES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((data_dir.path().to_owned(), db));
    Some(spawn_app_tuned(data_dir, None, move |c| c.database_url = Some(url)).await)
}

/// The store of a stopped server's data dir, opened the way the server opens
/// it: its PostgreSQL database when it ran on one, else its SQLite file.
pub async fn open_store_of(data_dir: &Path) -> Arc<dyn quest::store::Store> {
    let clock = Arc::new(ManualClock::new());
    let events = tokio::sync::broadcast::channel(8).0;
    match database_url_of(data_dir) {
        Some(url) => Arc::new(
            PgStore::open(&url, TimeSource::Clock(clock), events)
                .await
                .expect("the server's PostgreSQL database opens"),
        ),
        None => Arc::new(
            SqliteStore::open(&data_dir.join("quest.db"), clock, events)
                .await
                .expect("the server's database opens"),
        ),
    }
}

/// The PostgreSQL database of a data dir whose server ran on one (`None`: SQLite).
pub fn database_url_of(data_dir: &Path) -> Option<String> {
    DATABASES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(dir, _)| dir == data_dir)
        .map(|(_, db)| db.url.clone())
}

impl Drop for TestApp {
    /// The data dir goes, and its database with it (a data dir handed back
    /// by [`TestApp::stop`] keeps its database for the restart).
    fn drop(&mut self) {
        let dir = self.data_dir.path().to_owned();
        let gone = {
            let mut all = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
            all.iter()
                .position(|(d, _)| *d == dir)
                .map(|i| all.remove(i))
        };
        drop(gone);
    }
}

impl TestApp {
    /// Stops the server gracefully and hands back its data dir.
    pub async fn stop(mut self) -> TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("the server task")
                .expect("the server ran");
        }
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data_dir, dir)
    }

    /// Sends a request with an optional JSON body and bearer token.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Answer::read(request.send().await.expect("the server answers")).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Answer {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// Creates a token with `role` and returns its secret.
    pub async fn token(&self, role: &str, name: &str) -> String {
        let body = self
            .post(
                "/v1/tokens",
                &self.admin,
                json!({"name": name, "role": role}),
            )
            .await
            .expect(201);
        body["secret"].as_str().unwrap().to_owned()
    }

    /// Scans JSON items into a session; returns the session id.
    pub async fn scan(&self, config: Value, items: Value) -> String {
        let body = self
            .post(
                "/v1/sessions",
                &self.admin,
                json!({"config": config, "items": items}),
            )
            .await
            .expect(201);
        body["id"].as_str().unwrap().to_owned()
    }

    /// Uploads a file as multipart.
    pub async fn scan_file(&self, name: &str, bytes: Vec<u8>, config: Value) -> Answer {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()),
            )
            .text("config", config.to_string());
        let response = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .bearer_auth(&self.admin)
            .multipart(form)
            .send()
            .await
            .expect("the server answers");
        Answer::read(response).await
    }

    /// `next` for an agent name on a token.
    pub async fn next(&self, token: &str, session: &str, agent: &str) -> Value {
        self.post(
            &format!("/v1/sessions/{session}/next"),
            token,
            json!({"agent": agent}),
        )
        .await
        .expect(200)
    }

    /// Submits a result and returns the answer.
    pub async fn submit(&self, token: &str, quest: &str, lease: &str, result: Value) -> Answer {
        self.post(
            &format!("/v1/quests/{quest}/submit"),
            token,
            json!({"lease_id": lease, "result": result}),
        )
        .await
    }

    /// The session's status.
    pub async fn status(&self, session: &str) -> Value {
        self.get(&format!("/v1/sessions/{session}/status"), &self.admin)
            .await
            .expect(200)
    }

    /// A quest with its history.
    pub async fn quest(&self, quest: &str) -> Value {
        self.get(&format!("/v1/quests/{quest}"), &self.admin)
            .await
            .expect(200)
    }

    /// Polls a quest until it leaves TODO (e.g. once its AI verifiers are done).
    pub async fn settled(&self, quest: &str) -> Value {
        for _ in 0..1500 {
            let view = self.quest(quest).await;
            if view["state"] != "TODO" {
                return view;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("quest {quest} never left TODO: {}", self.quest(quest).await);
    }

    /// Lets the review page's held decision on `quest` fall due: moves the
    /// server's clock past the default undo window, then polls until the
    /// worker has recorded it (the quest leaves REVIEW).
    pub async fn fall_due(&self, quest: &str) -> Value {
        self.clock.advance(std::time::Duration::from_secs(6));
        for _ in 0..1500 {
            let view = self.quest(quest).await;
            if view["state"] != "REVIEW" {
                return view;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!(
            "the held decision on {quest} was never recorded: {}",
            self.quest(quest).await
        );
    }

    /// Raw bytes of a GET.
    pub async fn bytes(&self, path: &str) -> (StatusCode, Vec<u8>) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .send()
            .await
            .unwrap();
        (response.status(), response.bytes().await.unwrap().to_vec())
    }
}

/// A schema gate config: results need a string `email` containing `@`;
/// `@example.com` is denied and `"confidence": "low"` goes to review.
pub fn contact_config(max_tries: u32) -> Value {
    json!({
        "name": "contacts",
        "key_column": "company",
        "max_tries": max_tries,
        "gate": {
            "kind": "schema",
            "schema": {
                "type": "object",
                "required": ["email"],
                "properties": {"email": {"type": "string", "pattern": "@"}, "confidence": {"enum": ["high", "low"]}}
            },
            "deny": [{"pointer": "/email", "pattern": "@example\\.com$"}],
            "review_when": [{"pointer": "/confidence", "pattern": "^low$"}]
        },
        "prompt": {
            "instructions": "Find the contact email of the company.",
            "examples": [{"input": {"company": "Foo"}, "result": {"email": "info@foo.test", "confidence": "high"}}]
        }
    })
}

/// `config` (a schema gate) with `fields` added to the schema's `properties`
/// as "anything": declared, so that the export gives each its own column.
pub fn declaring(mut config: Value, fields: &[&str]) -> Value {
    let properties = config["gate"]["schema"]["properties"]
        .as_object_mut()
        .expect("a schema gate with properties");
    for field in fields {
        properties.insert((*field).to_owned(), json!({}));
    }
    config
}

/// A server whose command gate `slow` passes every result after a short
/// pause: a gate that runs a process, so a submission stays PENDING until
/// the gate runner decides it. The returned dir holds the gate's script.
pub async fn spawn_app_with_slow_gate() -> (TestApp, TempDir) {
    spawn_app_with_slow_gate_tuned(|_| {}).await
}

/// [`spawn_app_with_slow_gate`], with the server's settings changed by `tune` first.
pub async fn spawn_app_with_slow_gate_tuned(tune: impl FnOnce(&mut Config)) -> (TestApp, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.sh"),
        "cat > /dev/null\n/bin/sleep 0.2\necho '{\"verdict\": \"PASS\"}'\n",
    )
    .unwrap();
    let toml = format!(
        "[gates.slow]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./slow.sh\"]\nworkdir = \"{}\"\n\
         timeout_ms = 10000\n",
        dir.path().display()
    );
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), Some(&toml), tune).await;
    (app, dir)
}

/// A session config for the `slow` gate of [`spawn_app_with_slow_gate`].
pub fn slow_config(max_tries: u32) -> Value {
    json!({
        "key_column": "company",
        "max_tries": max_tries,
        "gate": {"kind": "command", "name": "slow"},
        "prompt": {"instructions": "Find the contact email of the company."}
    })
}

/// `n` companies as JSON items.
pub fn companies(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"company": format!("Company {i:04}"), "city": "Seoul"}))
            .collect(),
    )
}

/// The quest id and lease id of an `assigned` answer.
#[track_caller]
pub fn assigned(next: &Value) -> (String, String) {
    assert_eq!(next["status"], "assigned", "expected an assignment: {next}");
    (
        next["quest"]["id"].as_str().unwrap().to_owned(),
        next["lease"]["id"].as_str().unwrap().to_owned(),
    )
}

/// Asserts the status invariant: pass + review + done + remaining = total.
#[track_caller]
pub fn assert_sums(status: &Value) {
    let n = |k: &str| status[k].as_u64().unwrap();
    assert_eq!(
        n("pass") + n("review") + n("done") + n("remaining"),
        n("total"),
        "{status}"
    );
    assert_eq!(
        n("open") + n("leased") + n("checking") + n("verifying"),
        n("remaining"),
        "{status}"
    );
}

/// The `quest` binary with an empty environment, so that each test sets
/// exactly what the program sees. Only a coverage run's `LLVM_PROFILE_FILE`
/// is passed on: it changes where the program's coverage is written, nothing
/// of what it does.
pub fn quest_binary() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_quest"));
    command.env_clear();
    if let Some(profile) = std::env::var_os("LLVM_PROFILE_FILE") {
        command.env("LLVM_PROFILE_FILE", profile);
    }
    command
}

/// Opens the session's event stream as the admin.
pub async fn open_events(app: &TestApp, session: &str) -> reqwest::Response {
    let events = app
        .client
        .get(format!("{}/v1/sessions/{session}/events", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(events.status(), 200);
    events
}

/// Reads the stream until `needle` appears (at most 10 seconds between
/// chunks); what it read.
pub async fn read_until(events: &mut reqwest::Response, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), events.chunk())
            .await
            .unwrap_or_else(|_| panic!("no `{needle}` in the event stream: {seen}"))
            .expect("the stream reads")
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}
