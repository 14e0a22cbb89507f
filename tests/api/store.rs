//! The store's contract, driven directly: the conflicts that need a submission
//! to stay PENDING, which no gate on a live server holds still for.

use std::sync::Arc;

use quest::domain::session::SessionConfig;
use quest::domain::{Phase, SystemClock};
use quest::store::{
    LeaseOutcome, NewSession, NewSubmission, SqliteStore, Store, StoreError, SubmitOutcome,
};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::helpers::contact_config;

async fn store_with_one_leased_quest() -> (tempfile::TempDir, SqliteStore, Uuid, Uuid, Uuid) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("q.db"),
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let token = store
        .create_token("bot", quest::domain::Role::Agent, "hash")
        .await
        .unwrap();
    let input: Map<String, Value> = json!({"company": "Acme"}).as_object().unwrap().clone();
    let session = store
        .create_session(NewSession {
            id: Uuid::now_v7(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(contact_config(3)).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows: vec![("Acme".into(), input)],
        })
        .await
        .unwrap();
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(session.id, &format!("{}/bot", token.id))
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
    let SubmitOutcome::Recorded(first) = store.submit(submit("a@b.test")).await.unwrap() else {
        panic!("recorded")
    };
    assert_eq!(
        store.get_quest(quest).await.unwrap().phase,
        Some(Phase::Checking)
    );

    assert_eq!(
        conflict_code(store.submit(submit("other@b.test")).await.unwrap_err()),
        "submission_in_progress"
    );
    assert_eq!(
        conflict_code(store.release(quest, lease, token).await.unwrap_err()),
        "quest_checking"
    );
    let SubmitOutcome::Replayed(same) = store.submit(submit("a@b.test")).await.unwrap() else {
        panic!("a replay")
    };
    assert_eq!(
        same.id, first.id,
        "the identical retry of a PENDING submission is the same submission"
    );
    assert_eq!(store.pending_submissions().await.unwrap(), [first.id]);
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
        .create_token("other", quest::domain::Role::Agent, "hash2")
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
