//! What the benchmarks share: the real `quest` binary as a child process on
//! a loopback port, killed when dropped, and the small helpers around it.
//! Each bench is its own binary and uses a part of this.
#![allow(dead_code)]

use std::process::Child;
use std::time::Duration;

/// The admin token the benches' servers start with.
pub const ADMIN: &str = "bench-admin";

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A server process, killed when dropped, with the data dir it runs on.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the server at `base` answers `/healthz`.
pub async fn wait_until_up(base: &str) {
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server at {base} did not come up");
}

/// POSTs `body` as JSON to `url` with `token`; the JSON answer.
pub async fn post_json(
    client: &reqwest::Client,
    url: String,
    token: &str,
    body: &serde_json::Value,
) -> serde_json::Value {
    client
        .post(url)
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A new token of `body` (`name`, `role`, ...), made with the admin token; its secret.
pub async fn create_token(client: &reqwest::Client, base: &str, body: serde_json::Value) -> String {
    let token = post_json(client, format!("{base}/v1/tokens"), ADMIN, &body).await;
    token["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("a token: {token}"))
        .to_owned()
}

/// A session of `quests` items (`{"company": "c<i>"}`, keyed by company)
/// checked by `gate`, scanned with the admin token; its id.
pub async fn scan(
    client: &reqwest::Client,
    base: &str,
    quests: usize,
    gate: serde_json::Value,
) -> String {
    let config = serde_json::json!({"key_column": "company", "gate": gate});
    scan_config(client, base, quests, config).await
}

/// Scans `quests` companies into a session made with `config`; its id.
pub async fn scan_config(
    client: &reqwest::Client,
    base: &str,
    quests: usize,
    config: serde_json::Value,
) -> String {
    let items: Vec<serde_json::Value> = (0..quests)
        .map(|i| serde_json::json!({"company": format!("c{i}")}))
        .collect();
    let body = serde_json::json!({"config": config, "items": items});
    let session = post_json(client, format!("{base}/v1/sessions"), ADMIN, &body).await;
    session["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the scan answers a session: {session}"))
        .to_owned()
}

/// The `p` quantile (0 to 1) of sorted durations; zero for none.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}
