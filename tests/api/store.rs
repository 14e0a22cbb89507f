//! The store's contract, driven directly: the conflicts that need a submission
//! to stay PENDING, which no gate on a live server holds still for.

use quest::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId, TokenId};
use std::sync::Arc;

use quest::domain::session::SessionConfig;
use quest::domain::table::Row;
use quest::domain::work::AgentId;
use quest::domain::{Phase, SystemClock, Verdict};
use quest::store::sqlite::{Tuning, WalPolicy};
use quest::store::{
    GateDecision, LeaseOutcome, NewSession, NewSubmission, SqliteStore, Store, StoreError,
    SubmitOutcome,
};
use serde_json::{Map, Value, json};

use crate::helpers::contact_config;

async fn store_with_one_leased_quest() -> (tempfile::TempDir, SqliteStore, TokenId, QuestId, LeaseId)
{
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("q.db"),
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let token = store
        .create_token("bot", quest::domain::Role::Agent, "hash", None)
        .await
        .unwrap();
    let input: Map<String, Value> = json!({"company": "Acme"}).as_object().unwrap().clone();
    let session = store
        .create_session(NewSession {
            id: SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(contact_config(3)).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows: vec![("Acme".into(), Row::from_map(&input))],
        })
        .await
        .unwrap();
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(session.id, &AgentId::new(token.id, "bot"))
        .await
        .unwrap()
    else {
        panic!("a quest is open")
    };
    (dir, store, token.id, quest.id, lease.id)
}

fn conflict_code(e: StoreError) -> &'static str {
    match e {
        StoreError::Conflict { code, .. } => code,
        other => panic!("expected a conflict, got {other}"),
    }
}

#[tokio::test]
async fn while_the_gate_checks_a_new_result_and_a_release_are_refused() {
    let (_dir, store, token, quest, lease) = store_with_one_leased_quest().await;
    let submit = |email: &str| NewSubmission {
        quest_id: quest,
        lease_id: lease,
        token_id: token,
        result: json!({"email": email}),
        result_hash: quest::domain::receipt::digest(&json!({"email": email})),
    };
    let SubmitOutcome::Recorded { view: first, .. } =
        store.submit(submit("a@b.test"), None).await.unwrap()
    else {
        panic!("recorded")
    };
    assert_eq!(
        store.get_quest(quest).await.unwrap().phase,
        Some(Phase::Checking)
    );

    assert_eq!(
        conflict_code(
            store
                .submit(submit("other@b.test"), None)
                .await
                .unwrap_err()
        ),
        "submission_in_progress"
    );
    assert_eq!(
        conflict_code(store.release(quest, lease, token).await.unwrap_err()),
        "quest_checking"
    );
    let SubmitOutcome::Replayed(same) = store.submit(submit("a@b.test"), None).await.unwrap()
    else {
        panic!("a replay")
    };
    assert_eq!(
        same.submission.id, first.submission.id,
        "the identical retry of a PENDING submission is the same submission"
    );
    assert_eq!(
        store.pending_submissions().await.unwrap(),
        [first.submission.id]
    );
    let quest_row = store.get_quest(quest).await.unwrap();
    assert_eq!(
        (quest_row.phase, quest_row.tries),
        (Some(Phase::Checking), 0),
        "the refusals changed nothing"
    );
}

#[tokio::test]
async fn a_token_other_than_the_holders_cannot_use_the_lease() {
    let (_dir, store, _token, quest, lease) = store_with_one_leased_quest().await;
    let other = store
        .create_token("other", quest::domain::Role::Agent, "hash2", None)
        .await
        .unwrap();
    assert_eq!(
        conflict_code(store.heartbeat(quest, lease, other.id).await.unwrap_err()),
        "lease_lost"
    );
    assert_eq!(
        conflict_code(store.release(quest, lease, other.id).await.unwrap_err()),
        "lease_lost"
    );
}

/// A store with one session of the named companies, and an agent token.
async fn store_with_session(
    companies: &[&str],
) -> (tempfile::TempDir, SqliteStore, TokenId, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("q.db"),
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let token = store
        .create_token("bot", quest::domain::Role::Agent, "hash", None)
        .await
        .unwrap();
    let session = add_session(&store, companies).await;
    (dir, store, token.id, session)
}

async fn add_session(store: &SqliteStore, companies: &[&str]) -> SessionId {
    let rows = companies
        .iter()
        .map(|c| {
            let input = json!({"company": c}).as_object().unwrap().clone();
            (c.to_string(), Row::from_map(&input))
        })
        .collect();
    store
        .create_session(NewSession {
            id: SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(contact_config(3)).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows,
        })
        .await
        .unwrap()
        .id
}

/// `agent` leases the next quest of `session` and submits `email` for it;
/// returns the quest and the PENDING submission.
async fn submit_email(
    store: &SqliteStore,
    token: TokenId,
    session: SessionId,
    agent: &str,
    email: &str,
) -> (QuestId, SubmissionId) {
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(session, &AgentId::new(token, agent))
        .await
        .unwrap()
    else {
        panic!("a quest is open")
    };
    let result = json!({"email": email, "note": "x"});
    let SubmitOutcome::Recorded { view, .. } = store
        .submit(
            NewSubmission {
                quest_id: quest.id,
                lease_id: lease.id,
                token_id: token,
                result_hash: quest::domain::receipt::digest(&result),
                result,
            },
            None,
        )
        .await
        .unwrap()
    else {
        panic!("recorded")
    };
    (quest.id, view.submission.id)
}

async fn decide(store: &SqliteStore, submission: SubmissionId, verdict: Verdict) {
    store
        .apply_verdict(
            submission,
            GateDecision {
                verdict,
                facts: Vec::new(),
                evidence: Vec::new(),
                gate: "schema".into(),
                gate_version: "1".into(),
                receipt: "sha256:0".into(),
                verify: None,
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_holders_of_a_result_value_are_the_other_quests_that_keep_it() {
    let (_dir, store, token, session) =
        store_with_session(&["Acme", "Beta", "Gamma", "Delta"]).await;
    let holders = |except: QuestId, value: &'static str| {
        let store = &store;
        async move {
            store
                .result_holders(session, except, "email", value, 5)
                .await
                .unwrap()
        }
    };
    let (acme, acme_sub) = submit_email(&store, token, session, "a", "info@acme.test").await;
    let stranger = QuestId::new();
    assert_eq!(
        holders(stranger, "INFO@Acme.test").await,
        ["Acme"],
        "a submission still being checked holds its value, in any letter case"
    );
    assert!(
        holders(acme, "info@acme.test").await.is_empty(),
        "a quest is no holder for itself"
    );
    decide(&store, acme_sub, Verdict::Pass).await;
    assert_eq!(holders(stranger, "info@acme.test").await, ["Acme"]);

    let (_beta, beta_sub) = submit_email(&store, token, session, "b", "info@acme.test").await;
    assert_eq!(holders(acme, "info@acme.test").await, ["Beta"]);
    decide(&store, beta_sub, Verdict::Fail).await;
    assert!(
        holders(acme, "info@acme.test").await.is_empty(),
        "a failed result holds nothing"
    );

    let (_gamma, gamma_sub) = submit_email(&store, token, session, "c", "info@acme.test").await;
    decide(&store, gamma_sub, Verdict::Review).await;
    assert_eq!(holders(stranger, "info@acme.test").await, ["Acme", "Gamma"]);
    assert_eq!(
        store
            .result_holders(session, stranger, "email", "info@acme.test", 1)
            .await
            .unwrap(),
        ["Acme"],
        "at most `limit`, in upload order"
    );
    assert!(holders(stranger, "sales@acme.test").await.is_empty());
    assert!(
        store
            .result_holders(session, stranger, "note", "x", 5)
            .await
            .unwrap()
            .len()
            == 2,
        "any plain field can be asked about"
    );

    // Another session's quests are no holders.
    let other = add_session(&store, &["Acme again"]).await;
    assert!(
        store
            .result_holders(other, stranger, "email", "info@acme.test", 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .result_holders(session, stranger, "email') OR 1=1 --", "x", 5)
            .await,
        Err(StoreError::Corrupt(_))
    ));
}

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
            .create_token("bot", quest::domain::Role::Agent, "hash", None)
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
    let read_session = add_session(&store, &names).await;

    // Readers that never pause: six loops of whole-page reads, overlapping so
    // that some read transaction is open at almost every moment.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (store, stop, reads) = (store.clone(), stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let page = store.export_page(read_session, None, 1000).await.unwrap();
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
        add_session(&store, &long).await;
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
