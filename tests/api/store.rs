//! The embedded SQLite store under stress, driven directly: a full disk fails
//! whole batches and every answer is true; the WAL stays bounded under
//! readers that never pause.

use std::sync::Arc;

use quest::domain::work::AgentId;
use quest::domain::{Phase, SystemClock};
use quest::store::sqlite::{Tuning, WalPolicy};
use quest::store::{LeaseOutcome, NewSubmission, SqliteStore, Store, StoreError};
use serde_json::json;

use crate::contract_pending::add_session;

#[tokio::test]
async fn a_full_disk_fails_whole_batches_and_every_answer_is_true() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let (token, leased) = {
        let store = SqliteStore::open(
            &path,
            Arc::new(SystemClock),
            tokio::sync::broadcast::channel(8).0,
        )
        .await
        .unwrap();
        let token = store
            .create_token(quest::store::NewToken::new(
                "bot",
                quest::domain::Role::Agent,
                "hash",
            ))
            .await
            .unwrap()
            .id;
        let companies: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = companies.iter().map(String::as_str).collect();
        let session = add_session(&store, &names).await;
        let mut leased = Vec::new();
        for i in 0..60 {
            let LeaseOutcome::Assigned { quest, lease } = store
                .lease_next(session, &AgentId::new(token, format!("a{i}")))
                .await
                .unwrap()
            else {
                panic!("a quest is open")
            };
            leased.push((quest.id, lease.id));
        }
        (token, leased)
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let pages: i64 = {
        let mut raw = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
            "sqlite://{}",
            path.display()
        ))
        .await
        .unwrap();
        sqlx::query_scalar("PRAGMA page_count")
            .fetch_one(&mut raw)
            .await
            .unwrap()
    };
    // A few pages of room: the first results fit, then the database is full.
    let store = SqliteStore::open_tuned(
        &path,
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
        Tuning {
            connect: Box::new(move |o| o.pragma("max_page_count", (pages + 25).to_string())),
            ..Tuning::default()
        },
    )
    .await
    .unwrap();
    let padding = "x".repeat(3000);
    let mut answers = Vec::new();
    // Waves of concurrent writes: the first ones fit, later batches find the disk full.
    for wave in leased.chunks(10) {
        answers.extend(
            futures_util::future::join_all(wave.iter().map(|(quest, lease)| {
                let result = json!({"email": "a@b.test", "note": padding});
                store.submit(
                    NewSubmission {
                        quest_id: *quest,
                        lease_id: *lease,
                        token_id: token,
                        result_hash: quest::domain::receipt::digest(&result),
                        idempotency_key: None,
                        result,
                    },
                    None,
                )
            }))
            .await,
        );
    }
    let (mut answered, mut refused) = (0, 0);
    for ((quest, _), answer) in leased.iter().zip(answers) {
        let row = store.get_quest(*quest).await.unwrap();
        let (subs, _) = store.quest_history(*quest).await.unwrap();
        match answer {
            Ok(_) => {
                answered += 1;
                assert_eq!(
                    (row.phase, subs.len()),
                    (Some(Phase::Checking), 1),
                    "an answered write is stored"
                );
            }
            Err(StoreError::Unavailable) => {
                refused += 1;
                assert_eq!(
                    (row.phase, subs.len()),
                    (Some(Phase::Leased), 0),
                    "a refused write left nothing"
                );
            }
            Err(e) => panic!("a full disk is 'unavailable', not {e}"),
        }
    }
    assert!(
        refused > 0 && answered > 0,
        "{answered} answered, {refused} refused"
    );
    // The writer opened its connection anew and still serves what fits.
    assert!(store.get_quest(leased[0].0).await.is_ok());
}

/// The size of a file, 0 when it does not exist.
fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn the_wal_stays_bounded_under_readers_that_never_pause() {
    const RESTART_PAST_PAGES: i64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let wal_path = dir.path().join("q.db-wal");
    let store = Arc::new(
        SqliteStore::open_tuned(
            &path,
            Arc::new(SystemClock),
            tokio::sync::broadcast::channel(8).0,
            Tuning {
                wal: WalPolicy {
                    every_commits: 4,
                    restart_past_pages: RESTART_PAST_PAGES,
                },
                ..Tuning::default()
            },
        )
        .await
        .unwrap(),
    );
    let companies: Vec<String> = (0..1000).map(|i| format!("company {i:04}")).collect();
    let names: Vec<&str> = companies.iter().map(String::as_str).collect();
    let read_session = add_session(store.as_ref(), &names).await;

    // Readers that never pause: six loops of whole-page reads, overlapping so
    // that some read transaction is open at almost every moment.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (store, stop, reads) = (store.clone(), stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let page = store
                        .export_page(read_session, None, 1000, false)
                        .await
                        .unwrap();
                    assert_eq!(page.len(), 1000);
                    reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();

    // Meanwhile the writer commits far more than the WAL limit, session after session.
    let long: Vec<String> = (0..100)
        .map(|i| format!("{i:03}{}", "w".repeat(1000)))
        .collect();
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let mut largest_wal = 0;
    for _ in 0..150 {
        add_session(store.as_ref(), &long).await;
        largest_wal = largest_wal.max(file_size(&wal_path));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }

    let written = file_size(&path);
    let bound = 16 * RESTART_PAST_PAGES as u64 * 4096;
    assert!(
        reads.load(std::sync::atomic::Ordering::Relaxed) > 150,
        "the readers kept reading throughout"
    );
    assert!(
        written > 4 * bound,
        "the database grew by {written} bytes: far more than the WAL may hold"
    );
    assert!(
        largest_wal <= bound,
        "the WAL reached {largest_wal} bytes under constant reads; the bound is {bound}"
    );
}
