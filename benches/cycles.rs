//! Throughput and latency of the agent loop: `cargo bench --bench cycles`.
//!
//! Starts the real `quest serve` as a child process on a temporary data dir
//! (SQLite, `synchronous=FULL`), scans a session, and lets concurrent agents
//! run next + submit (schema gate, PASS) over loopback HTTP from this process.
//! For a small and a large session it prints cycles per second, p50/p99 of
//! `next` and of `submit`, the server's CPU time per cycle (from
//! `/proc/<pid>/stat`), and the store's commits and driver round trips per
//! cycle (from `/metrics`). The same load then runs against a no-op HTTP
//! server (this binary again, answering both requests from memory), so that
//! what the HTTP layer costs and what the store costs are told apart. The
//! small session runs a second time with gold quests (`"gold": {}`: 5% of
//! the assignments after a warm-up of 3), and the cost of the gold draws
//! is printed as the ratio of the two runs.
//!
//! Then the small session runs on PostgreSQL, once with one replica and once
//! with three `quest serve` processes on one fresh database (the agents spread
//! over them round robin); there the CPU per cycle is given for the replicas
//! and for the database's processes apart. Before them, `pgbench`'s TPC-B-like
//! load on a scratch database (`-i -s 16`, then `-c 16 -j 2 -M prepared -T
//! 30`) gives the yardstick P that the PostgreSQL figures are compared with.
//!
//! Options (environment): QUEST_BENCH_AGENTS (default 64), QUEST_BENCH_CYCLES
//! (cycles measured per run, default 20000), QUEST_BENCH_SMALL (default 1000)
//! and QUEST_BENCH_LARGE (default 1000000) quests, QUEST_BENCH_POSTGRES (the
//! maintenance database to create the run's database from, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; without a server there the
//! PostgreSQL runs are skipped with a message, and fail with `CI=true`), and
//! QUEST_BENCH_ONLY (`sqlite` or `postgres`: the runs of that backend only),
//! QUEST_BENCH_PGBENCH_SECONDS (how long the `pgbench` yardstick runs, default
//! 30; 0: none, as in the smoke run). Run
//! without `--bench` (as `cargo test --all-targets` does), it makes one small
//! run of each at smoke sizes.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{ADMIN, Server, env_usize, free_port, pct, post_json, scan_config, wait_until_up};

/// A `quest serve` process on a fresh data dir: its store the SQLite file
/// there, or the PostgreSQL database `database_url` names.
async fn start_quest(database_url: Option<&str>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_quest"));
    command
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .env("QUEST_ADMIN_TOKEN", ADMIN)
        .env("QUEST_LOG", "warn")
        .stdout(Stdio::null());
    if let Some(url) = database_url {
        command.env("QUEST_DATABASE_URL", url);
    }
    let child = command.spawn().expect("the quest binary starts");
    let base = format!("http://127.0.0.1:{port}");
    wait_until_up(&base).await;
    Server {
        child,
        base,
        dir: Some(dir),
    }
}

/// A database of its own on the PostgreSQL server of `admin_url`, dropped
/// (its connections ended) on drop.
struct BenchDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl BenchDatabase {
    async fn create(admin_url: &str) -> Result<BenchDatabase, sqlx::Error> {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(admin_url).await?;
        let name = format!("bench_{}", std::process::id());
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
        Ok(BenchDatabase {
            admin_url: admin_url.to_owned(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    async fn drop_it(self) {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.admin_url).await {
            let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await;
        }
    }
}

/// User + system CPU seconds of every process named `postgres` (the database
/// server's backends), or 0 where they cannot be read.
fn postgres_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(cpu_seconds)
        .sum()
}

async fn start_baseline() -> Server {
    let port = free_port();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--baseline-server", &port.to_string()])
        .spawn()
        .expect("the baseline server starts");
    let base = format!("http://127.0.0.1:{port}");
    wait_until_up(&base).await;
    Server {
        child,
        base,
        dir: None,
    }
}

/// The no-op HTTP baseline: axum answering `next` and `submit` from memory
/// with bodies shaped like the real ones, behind the same bearer check.
fn run_baseline_server(port: u16) {
    use axum::routing::{get, post};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let next = {
            let counter = counter.clone();
            move |headers: axum::http::HeaderMap, _body: axum::Json<Value>| {
                let counter = counter.clone();
                async move {
                    assert!(headers.contains_key("authorization"));
                    let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    axum::Json(json!({"status": "assigned",
                        "quest": {"id": format!("00000000-0000-0000-0000-{n:012}"), "input": {"company": "c"}},
                        "lease": {"id": "00000000-0000-0000-0000-000000000001", "expires_at": "2026-01-01T00:00:00Z"},
                        "prompt": "Produce the result for the input below.".repeat(8)}))
                }
            }
        };
        let submit = |_body: axum::Json<Value>| async {
            axum::Json(json!({"verdict": "PASS", "state": "PASS", "facts": [], "remaining": 1, "receipt": "sha256:0"}))
        };
        let app = axum::Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/v1/sessions/{id}/next", post(next))
            .route("/v1/quests/{id}/submit", post(submit));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        axum::serve(listener, app).await.unwrap();
    });
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// A counter of the server's `/metrics`.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Latencies of `next` and `submit`, and the wall time of the run.
struct Run {
    next: Vec<Duration>,
    submit: Vec<Duration>,
    wall: Duration,
}

/// `agents` agents run `cycles` next + submit cycles in all, agent `i` on
/// the server `bases[i % bases.len()]`.
async fn cycle(bases: &[String], session: &str, agents: usize, cycles: usize) -> Run {
    let client = reqwest::Client::new();
    let per_agent = cycles / agents;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for agent in 0..agents {
        let base = bases[agent % bases.len()].clone();
        let (client, session) = (client.clone(), session.to_owned());
        tasks.push(tokio::spawn(async move {
            let (mut next_lat, mut submit_lat) = (Vec::new(), Vec::new());
            for _ in 0..per_agent {
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
                next_lat.push(t.elapsed());
                if next["status"] != "assigned" {
                    break;
                }
                let quest = next["quest"]["id"].as_str().unwrap();
                let lease = next["lease"]["id"].as_str().unwrap();
                let t = Instant::now();
                let answer: Value = client
                    .post(format!("{base}/v1/quests/{quest}/submit"))
                    .bearer_auth(ADMIN)
                    .json(&json!({"lease_id": lease, "result": {"email": "a@b.test"}}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                submit_lat.push(t.elapsed());
                assert_eq!(answer["verdict"], "PASS", "{answer}");
            }
            (next_lat, submit_lat)
        }));
    }
    let (mut next, mut submit) = (Vec::new(), Vec::new());
    for task in tasks {
        let (n, s) = task.await.unwrap();
        next.extend(n);
        submit.extend(s);
    }
    next.sort();
    submit.sort();
    Run {
        next,
        submit,
        wall: started.elapsed(),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Where a measured run keeps its data.
#[derive(Clone, Copy)]
enum Backend<'a> {
    Sqlite,
    /// `replicas` servers on the database `url` names.
    Postgres {
        url: &'a str,
        replicas: usize,
    },
}

/// What one measured run gives: cycles/s, next's p99 and the server's CPU
/// per cycle.
struct Measured {
    rate: f64,
    next_p99: Duration,
    cpu_per_cycle: f64,
}

/// The gold items a session of the gold run holds: more than its draws
/// (5% of the cycles, one token), so that they never run out.
const GOLD_ITEMS: usize = 2_000;

/// One measured run against real servers; with `gold`, the session hands
/// out gold quests at the default rate (5%, after a warm-up of 3).
async fn measure_quest(
    backend: Backend<'_>,
    quests: usize,
    agents: usize,
    cycles: usize,
    gold: bool,
) -> Measured {
    let (url, replicas) = match backend {
        Backend::Sqlite => (None, 1),
        Backend::Postgres { url, replicas } => (Some(url), replicas),
    };
    let mut servers = Vec::new();
    for _ in 0..replicas {
        servers.push(start_quest(url).await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let client = reqwest::Client::new();
    let gate = json!({"kind": "schema", "schema": {"type": "object", "required": ["email"]}});
    let mut config = json!({"key_column": "company", "gate": gate});
    if gold {
        config["gold"] = json!({});
    }
    let session = scan_config(&client, &bases[0], quests, config).await;
    if gold {
        for batch in 0..GOLD_ITEMS / 1000 {
            let items: Vec<Value> = (0..1000)
                .map(|i| {
                    json!({"input": {"company": format!("g{batch}-{i}")},
                                "expected": {"email": "a@b.test"}})
                })
                .collect();
            let url = format!("{}/v1/sessions/{session}/gold", bases[0]);
            post_json(&client, url, ADMIN, &json!({"items": items})).await;
        }
    }
    // Warm up: connections, statement caches, the session's caches.
    cycle(&bases, &session, agents, agents * 4).await;
    let cpu = || {
        servers
            .iter()
            .map(|s| cpu_seconds(s.child.id()))
            .sum::<f64>()
    };
    let metrics = async |name: &str| {
        let mut sum = 0.0;
        for base in &bases {
            sum += metric(&client, base, name).await;
        }
        sum
    };
    let (cpu0, db_cpu0) = (cpu(), postgres_cpu_seconds());
    let commits0 = metrics("quest_store_commits_total").await;
    let trips0 = metrics("quest_store_round_trips_total").await;
    let run = cycle(&bases, &session, agents, cycles).await;
    let done = run.submit.len() as f64;
    let cpu = cpu() - cpu0;
    let db_cpu = postgres_cpu_seconds() - db_cpu0;
    let commits = metrics("quest_store_commits_total").await - commits0;
    let trips = metrics("quest_store_round_trips_total").await - trips0;
    let rate = done / run.wall.as_secs_f64();
    let (name, db) = match backend {
        Backend::Sqlite if gold => ("sqlite+gold".to_owned(), String::new()),
        Backend::Sqlite => ("sqlite".to_owned(), String::new()),
        Backend::Postgres { .. } => (
            format!("postgres ×{replicas}"),
            format!(" + database CPU {:.0} µs/cycle", db_cpu / done * 1e6),
        ),
    };
    println!(
        "{name:<12} {quests:>8} quests, {agents} agents: {rate:>7.0} cycles/s | next p50 {} p99 {} | submit p50 {} p99 {} | \
         server CPU {:.0} µs/cycle{db} | {:.3} commits/cycle | {:.2} round trips/cycle",
        ms(pct(&run.next, 0.5)),
        ms(pct(&run.next, 0.99)),
        ms(pct(&run.submit, 0.5)),
        ms(pct(&run.submit, 0.99)),
        cpu / done * 1e6,
        commits / done,
        trips / done,
    );
    Measured {
        rate,
        next_p99: pct(&run.next, 0.99),
        cpu_per_cycle: cpu / done,
    }
}

/// The yardstick of issue 19: what this PostgreSQL does with `pgbench`'s
/// TPC-B-like load on a scratch database (`-i -s 16`, then `-c 16 -j 2 -M
/// prepared` for `seconds`), in transactions per second; `None`, with a
/// message, where `pgbench` is not installed or fails.
async fn pgbench_yardstick(admin: &str, seconds: u32) -> Option<f64> {
    let db = BenchDatabase::create(admin).await.ok()?;
    let run = |args: &[&str]| {
        Command::new("pgbench")
            .args(args)
            .arg(&db.url)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
    };
    let seconds = seconds.to_string();
    let tps = match run(&["-i", "-s", "16", "-q"]).and_then(|init| {
        if init.status.success() {
            run(&[
                "-b",
                "tpcb-like",
                "-c",
                "16",
                "-j",
                "2",
                "-M",
                "prepared",
                "-T",
                &seconds,
            ])
        } else {
            Ok(init)
        }
    }) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok()),
        Ok(out) => {
            println!("pgbench: failed ({}); no yardstick", out.status);
            None
        }
        Err(e) => {
            println!("pgbench: not run ({e}); no yardstick");
            None
        }
    };
    db.drop_it().await;
    if let Some(p) = tps {
        println!(
            "pgbench yardstick P (tpcb-like, -s 16 -c 16 -j 2 -M prepared -T {seconds}): {p:.0} transactions/s"
        );
    }
    tps
}

/// The small session on PostgreSQL with one replica and with three, after
/// the `pgbench` yardstick (for `yardstick_seconds`; none when 0); with no
/// server to run on, a message (a failure with `CI=true`).
async fn measure_postgres(quests: usize, agents: usize, cycles: usize, yardstick_seconds: u32) {
    let admin = std::env::var("QUEST_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let yardstick = if yardstick_seconds > 0 {
        pgbench_yardstick(&admin, yardstick_seconds).await
    } else {
        None
    };
    let mut rates = Vec::new();
    for replicas in [1, 3] {
        let db = match BenchDatabase::create(&admin).await {
            Ok(db) => db,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "no PostgreSQL to measure on ({e}), and CI=true makes that a failure"
                );
                println!(
                    "postgres: skipped, no server to create a database on ({e}); set QUEST_BENCH_POSTGRES"
                );
                return;
            }
        };
        let backend = Backend::Postgres {
            url: &db.url,
            replicas,
        };
        rates.push(
            measure_quest(backend, quests, agents, cycles, false)
                .await
                .rate,
        );
        db.drop_it().await;
    }
    println!(
        "postgres: three replicas / one replica throughput {:.2}",
        rates[1] / rates[0]
    );
    if let Some(p) = yardstick {
        println!(
            "postgres against the yardstick P: one replica {:.2} P, three replicas {:.2} P",
            rates[0] / p,
            rates[1] / p
        );
    }
}

async fn measure_baseline(agents: usize, cycles: usize) -> f64 {
    let server = start_baseline().await;
    let bases = [server.base.clone()];
    cycle(&bases, "s", agents, agents * 4).await;
    let cpu0 = cpu_seconds(server.child.id());
    let run = cycle(&bases, "s", agents, cycles).await;
    let done = run.submit.len() as f64;
    let rate = done / run.wall.as_secs_f64();
    println!(
        "baseline (no-op HTTP), {agents} agents: {rate:>7.0} cycles/s | next p50 {} p99 {} | submit p50 {} p99 {} | \
         server CPU {:.0} µs/cycle",
        ms(pct(&run.next, 0.5)),
        ms(pct(&run.next, 0.99)),
        ms(pct(&run.submit, 0.5)),
        ms(pct(&run.submit, 0.99)),
        (cpu_seconds(server.child.id()) - cpu0) / done * 1e6,
    );
    rate
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--baseline-server") {
        run_baseline_server(args[i + 1].parse().unwrap());
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and
    // then one small run only checks that the benchmark works.
    let measuring = args.iter().any(|a| a == "--bench");
    let agents = env_usize("QUEST_BENCH_AGENTS", if measuring { 64 } else { 8 });
    let cycles = env_usize("QUEST_BENCH_CYCLES", if measuring { 20_000 } else { 200 });
    let small = env_usize("QUEST_BENCH_SMALL", 1_000).max(cycles + agents * 4);
    let large = env_usize(
        "QUEST_BENCH_LARGE",
        if measuring { 1_000_000 } else { 5_000 },
    )
    .max(small);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::var("QUEST_BENCH_ONLY").unwrap_or_default();
    let yardstick_seconds = env_usize(
        "QUEST_BENCH_PGBENCH_SECONDS",
        if measuring { 30 } else { 0 },
    ) as u32;
    runtime.block_on(async {
        if only == "postgres" {
            measure_postgres(small, agents, cycles, yardstick_seconds).await;
            return;
        }
        let small_run = measure_quest(Backend::Sqlite, small, agents, cycles, false).await;
        let gold_run = measure_quest(Backend::Sqlite, small, agents, cycles, true).await;
        let large_run = measure_quest(Backend::Sqlite, large, agents, cycles, false).await;
        let baseline = measure_baseline(agents, cycles).await;
        println!(
            "large/small session: throughput ratio {:.2}, next p99 ratio {:.2}; quest/baseline throughput {:.2}",
            large_run.rate / small_run.rate,
            large_run.next_p99.as_secs_f64() / small_run.next_p99.as_secs_f64(),
            small_run.rate / baseline,
        );
        println!(
            "gold on/off: throughput ratio {:.2}, server CPU per cycle {:+.0} µs ({:.2}×)",
            gold_run.rate / small_run.rate,
            (gold_run.cpu_per_cycle - small_run.cpu_per_cycle) * 1e6,
            gold_run.cpu_per_cycle / small_run.cpu_per_cycle,
        );
        if only != "sqlite" {
            measure_postgres(small, agents, cycles, yardstick_seconds).await;
        }
    });
}
