//! Memory of scans and exports, and agent latency while exports run:
//! `cargo bench --bench exports`.
//!
//! Starts the real `quest serve` binary on a temporary data dir, so that its
//! peak RSS (`VmHWM`, reset through `/proc/<pid>/clear_refs` before each
//! step) is the server's alone. Scans a session of QUEST_BENCH_ROWS rows
//! (default 1,000,000) sent as one JSON body, lets agents decide
//! QUEST_BENCH_DECIDED of them (default 20,000), then reports the peak RSS of
//! each export format run alone, and the latency of next + submit cycles
//! with and without four large exports running at once. Linux only.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{ADMIN, Server, create_token, env_usize, free_port, pct};

impl Server {
    /// A `quest serve` process on a fresh data dir, once it is ready.
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_quest"))
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(dir.path())
            .env("QUEST_ADMIN_TOKEN", ADMIN)
            .env("QUEST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the quest binary starts");
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir: Some(dir),
        };
        let client = reqwest::Client::new();
        for _ in 0..500 {
            if client
                .get(format!("{}/readyz", server.base))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the server did not become ready");
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Resets the peak RSS to the current RSS.
    fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
    }

    fn peak_mib(&self) -> f64 {
        self.status_kib("VmHWM:") as f64 / 1024.0
    }

    fn rss_mib(&self) -> f64 {
        self.status_kib("VmRSS:") as f64 / 1024.0
    }
}

/// Runs `agents` agents for `cycles` next + submit cycles in all; their latencies.
async fn cycle(base: &str, session: &str, agents: usize, cycles: usize) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for agent in 0..agents {
        let (client, base, session) = (client.clone(), base.to_owned(), session.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in 0..cycles / agents {
                let t = Instant::now();
                let next: Value = client
                    .post(format!("{base}/v1/sessions/{session}/next"))
                    .bearer_auth(ADMIN)
                    .json(&json!({"agent": format!("a{agent}")}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if next["status"] != "assigned" {
                    break;
                }
                let (quest, lease) = (next["quest"]["id"].as_str().unwrap(), next["lease"]["id"].as_str().unwrap());
                let answer: Value = client
                    .post(format!("{base}/v1/quests/{quest}/submit"))
                    .bearer_auth(ADMIN)
                    .json(&json!({"lease_id": lease, "result": {"email": format!("a{agent}-{i}@x.test"), "note": "extra"}}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["verdict"], "PASS", "{answer}");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort();
    all
}

fn latency_line(label: &str, lat: &[Duration]) {
    println!(
        "{label}: {} cycles, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lat.len(),
        pct(lat, 0.5).as_secs_f64() * 1e3,
        pct(lat, 0.99).as_secs_f64() * 1e3,
        lat.last().unwrap().as_secs_f64() * 1e3
    );
}

/// Downloads an export with `token`, discarding it; its size in bytes.
async fn export(base: &str, session: &str, format: &str, token: &str) -> u64 {
    let mut response = reqwest::Client::new()
        .get(format!(
            "{base}/v1/sessions/{session}/export?format={format}"
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{format}");
    let mut size = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        size += chunk.len() as u64;
    }
    size
}

async fn run(rows: usize, decided: usize) {
    let server = Server::start().await;
    let base = server.base.clone();
    let items: Vec<Value> = (0..rows)
        .map(|i| json!({"company": format!("Company {i:07}"), "city": "Seoul"}))
        .collect();
    let config = json!({"key_column": "company", "gate": {"kind": "schema",
        "schema": {"type": "object", "required": ["email"], "properties": {"email": {"type": "string"}}}}});
    let body = serde_json::to_vec(&json!({"config": config, "items": items})).unwrap();
    drop(items);
    let upload_mib = body.len() as f64 / (1 << 20) as f64;
    let idle = server.rss_mib();
    println!("idle server: RSS {idle:.0} MiB");
    server.reset_peak();
    let t = Instant::now();
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/sessions"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let session: Value = response.json().await.unwrap();
    let session = session["id"].as_str().unwrap().to_owned();
    let scan_peak = server.peak_mib();
    println!(
        "scan of {rows} rows ({upload_mib:.1} MiB JSON body): {:.1} s, server peak RSS {scan_peak:.0} MiB, \
         {:.0} MiB over idle ({:.1}x the upload)",
        t.elapsed().as_secs_f64(),
        scan_peak - idle,
        (scan_peak - idle) / upload_mib
    );

    let baseline = cycle(&base, &session, 16, decided).await;
    latency_line("next+submit, no export running", &baseline);

    for format in ["csv", "jsonl", "xlsx"] {
        server.reset_peak();
        let before = server.rss_mib();
        let t = Instant::now();
        let size = export(&base, &session, format, ADMIN).await;
        println!(
            "export {format:>5} of {rows} rows: {:.1} MiB in {:.1} s, server peak RSS {:.0} MiB (RSS before it {before:.0} MiB)",
            size as f64 / (1 << 20) as f64,
            t.elapsed().as_secs_f64(),
            server.peak_mib()
        );
    }

    server.reset_peak();
    // A token runs at most two exports at once: two viewers run two each.
    let client = reqwest::Client::new();
    let mut viewers = Vec::new();
    for name in ["viewer-a", "viewer-b"] {
        viewers.push(create_token(&client, &base, json!({"name": name, "role": "viewer"})).await);
    }
    let exports: Vec<_> = [("xlsx", 0), ("csv", 0), ("jsonl", 1), ("xlsx", 1)]
        .into_iter()
        .map(|(format, viewer)| {
            let (base, session, token) = (base.clone(), session.clone(), viewers[viewer].clone());
            tokio::spawn(async move { export(&base, &session, format, &token).await })
        })
        .collect();
    // Cycles start once the exports have; they run until the exports are done.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut during = Vec::new();
    while exports.iter().any(|e| !e.is_finished()) {
        during.extend(cycle(&base, &session, 16, 1_600).await);
    }
    for e in exports {
        e.await.unwrap();
    }
    during.sort();
    latency_line(
        "next+submit while 4 large exports run (2 xlsx, csv, jsonl)",
        &during,
    );
    println!(
        "server peak RSS during the four exports: {:.0} MiB",
        server.peak_mib()
    );
}

fn main() {
    // Without `--bench` (`cargo test --all-targets`), one small run checks that it works.
    let measuring = std::env::args().any(|a| a == "--bench");
    let rows = env_usize(
        "QUEST_BENCH_ROWS",
        if measuring { 1_000_000 } else { 5_000 },
    );
    let decided = env_usize("QUEST_BENCH_DECIDED", if measuring { 20_000 } else { 500 });
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(rows, decided));
}
