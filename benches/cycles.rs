//! Throughput and latency of the agent loop: `cargo bench --bench cycles`.
//!
//! Starts the real server in-process on a temporary data dir, scans a session,
//! and lets concurrent agents run next + submit (schema gate, PASS) over
//! loopback HTTP until every quest is decided. Prints cycles per second and
//! latency percentiles, for a small and a large session, so that the ratio
//! shows whether latency stays flat as the table grows.
//! Options (environment): QUEST_BENCH_AGENTS (default 32), QUEST_BENCH_CYCLES
//! (cycles measured per run, default 4000).

use std::time::{Duration, Instant};

use quest::app::App;
use quest::config::Config;
use serde_json::{Value, json};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run(quests: usize, agents: usize, cycles: usize) -> (f64, Vec<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.admin_token = Some("bench-admin".into());
    let app = App::build(config).await.unwrap();
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));
    let client = reqwest::Client::new();
    let items: Vec<Value> = (0..quests)
        .map(|i| json!({"company": format!("c{i}")}))
        .collect();
    let config = json!({"key_column": "company", "gate": {"kind": "schema", "schema": {"type": "object", "required": ["email"]}}});
    let session: Value = client
        .post(format!("{base}/v1/sessions"))
        .bearer_auth("bench-admin")
        .json(&json!({"config": config, "items": items}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = session["id"].as_str().unwrap().to_owned();
    let per_agent = cycles / agents;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for agent in 0..agents {
        let (client, base, session) = (client.clone(), base.clone(), session.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_agent);
            for _ in 0..per_agent {
                let t = Instant::now();
                let next: Value = client
                    .post(format!("{base}/v1/sessions/{session}/next"))
                    .bearer_auth("bench-admin")
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
                let quest = next["quest"]["id"].as_str().unwrap();
                let lease = next["lease"]["id"].as_str().unwrap();
                let answer: Value = client
                    .post(format!("{base}/v1/quests/{quest}/submit"))
                    .bearer_auth("bench-admin")
                    .json(&json!({"lease_id": lease, "result": {"email": "a@b.test"}}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["verdict"], "PASS");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    (rate, latencies)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let agents = env_usize("QUEST_BENCH_AGENTS", 32);
    let cycles = env_usize("QUEST_BENCH_CYCLES", 4000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut results = Vec::new();
    for quests in [cycles, 100 * cycles] {
        let (rate, lat) = runtime.block_on(run(quests, agents, cycles));
        println!(
            "{quests:>8} quests, {agents} agents: {rate:>8.0} next+submit cycles/s; cycle latency p50 {:?} p99 {:?}",
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
        results.push((rate, pct(&lat, 0.5)));
    }
    println!(
        "large/small session: throughput ratio {:.2}, p50 latency ratio {:.2}",
        results[1].0 / results[0].0,
        results[1].1.as_secs_f64() / results[0].1.as_secs_f64()
    );
}
