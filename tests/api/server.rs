//! The real `quest serve` binary as a child process: started on a data dir
//! (and optionally a configuration file and `QUEST_*` variables), ready once
//! `/readyz` answers, killed with SIGKILL on demand or on drop. The restart
//! tests crash it; the replica tests run several on one PostgreSQL database.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Child;

use crate::helpers::{on_postgres, postgres_for, quest_binary};

/// The admin token every server started here accepts.
pub(crate) const ADMIN: &str = "crash-admin";

/// How long a server may take to answer `/readyz` (PostgreSQL replicas
/// starting together migrate one at a time).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running `quest serve`; killed with SIGKILL on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
}

impl Server {
    /// Starts the binary, with `--config FILE` when given.
    pub(crate) async fn start_with(dir: &Path, config: Option<&Path>) -> Server {
        Server::start_with_env(dir, config, &[]).await
    }

    /// Starts the binary with the variables `env` set too (its environment is
    /// otherwise empty). What it prints goes to `server.log` in `dir`, shown when
    /// it does not become ready.
    pub(crate) async fn start_with_env(
        dir: &Path,
        config: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path).expect("a log file in the data dir");
        let mut command = quest_binary();
        command
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(dir);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        // The black-box suite on PostgreSQL: the data dir's own database,
        // the same one again when the test restarts the server on it.
        if on_postgres() && !env.iter().any(|(k, _)| *k == "QUEST_DATABASE_URL") {
            command.env("QUEST_DATABASE_URL", postgres_for(dir).await);
        }
        let child = command
            .env("QUEST_ADMIN_TOKEN", ADMIN)
            .env("QUEST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(log.try_clone().expect("the log file, twice"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("the quest binary starts");
        // Owned by a `Server` at once, so that a panic below still kills it.
        let mut server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let client = reqwest::Client::new();
        let ready = async {
            loop {
                if client
                    .get(format!("{}/readyz", server.base))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(READY_WITHIN, ready).await.is_err() {
            server.kill().await;
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("the server did not become ready within {READY_WITHIN:?}; it logged:\n{log}");
        }
        server
    }

    /// SIGKILL: no graceful anything. Returns once the process is gone.
    pub(crate) async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// POSTs `body` as the admin; `None` when the server does not answer (it died).
pub(crate) async fn call(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: Value,
) -> Option<(u16, Value)> {
    let r = client
        .post(format!("{base}{path}"))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.ok()?))
}
