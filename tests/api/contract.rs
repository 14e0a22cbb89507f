//! The store's contract, written once against `Arc<dyn Store>`: what every
//! backend must do, driven directly (no HTTP). Each test runs on every
//! backend [`backends`] opens: SQLite, and PostgreSQL when a local server
//! answers (each test its own database; see [`crate::postgres`]).

use quest::domain::ids::{LeaseId, QuestId, SessionId, TokenId};
use std::sync::Arc;

use futures_util::future::join_all;
use quest::domain::work::{AgentId, CheckFilter, ReviewerId};
use quest::domain::{Decision, EventKind, Fact, QuestEvent, Role, State, SystemClock, Verdict};
use quest::store::postgres::{PgStore, TimeSource};
use quest::store::{
    GateDecision, LeaseOutcome, NewSubmission, SqliteStore, Store, StoreError, SubmitOutcome,
};
use serde_json::json;
use tokio::sync::broadcast;

use crate::postgres::{TestDatabase, refuse_rows};

/// A fresh store of one backend, its events, and what keeps it alive.
pub(crate) struct Backend {
    pub(crate) name: &'static str,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) events: broadcast::Receiver<QuestEvent>,
    _dir: tempfile::TempDir,
    /// Dropped after the store (fields drop in order), which ends its connections.
    _db: Option<TestDatabase>,
}

/// A fresh store of every backend available: SQLite always, PostgreSQL when
/// the local server answers (else the test says it skipped that backend).
pub(crate) async fn backends(test: &str) -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let (tx, events) = broadcast::channel(65_536);
    let store = SqliteStore::open(&dir.path().join("q.db"), Arc::new(SystemClock), tx)
        .await
        .unwrap();
    let mut all = vec![Backend {
        name: "sqlite",
        store: Arc::new(store),
        events,
        _dir: dir,
        _db: None,
    }];
    if let Some(db) = TestDatabase::create_or_skip(test).await {
        let (tx, events) = broadcast::channel(65_536);
        let store = PgStore::open(&db.url, TimeSource::Clock(Arc::new(SystemClock)), tx)
            .await
            .unwrap();
        all.push(Backend {
            name: "postgres",
            store: Arc::new(store),
            events,
            _dir: tempfile::tempdir().unwrap(),
            _db: Some(db),
        });
    }
    all
}

/// A session of `n` quests, `c0` to `c{n-1}`.
pub(crate) async fn session(store: &dyn Store, n: usize) -> SessionId {
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    crate::contract_pending::add_session(store, &names).await
}

pub(crate) fn decision(verdict: Verdict) -> GateDecision {
    let facts = match verdict {
        Verdict::Pass => vec![],
        _ => vec![Fact::new(
            "schema",
            "/email",
            "an address",
            "none",
            "send one",
        )],
    };
    GateDecision {
        verdict,
        facts,
        evidence: vec![],
        gate: "schema".into(),
        gate_version: "1".into(),
        receipt: "sha256:0".into(),
        verify: None,
    }
}

pub(crate) fn result(quest: QuestId, lease: LeaseId, token: TokenId, email: &str) -> NewSubmission {
    let result = json!({"email": email});
    NewSubmission {
        quest_id: quest,
        lease_id: lease,
        token_id: token,
        result_hash: quest::domain::receipt::digest(&result),
        idempotency_key: None,
        result,
    }
}

pub(crate) fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    match r {
        Err(StoreError::Refused(refusal)) => refusal.code(),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

/// Leases for `agents` agents of `token` at once; returns `(quest, lease)` each.
pub(crate) async fn lease_all(
    store: &dyn Store,
    session: SessionId,
    token: TokenId,
    agents: usize,
) -> Vec<(QuestId, LeaseId)> {
    let ids: Vec<AgentId> = (0..agents)
        .map(|i| AgentId::new(token, format!("a{i}")))
        .collect();
    join_all(ids.iter().map(|a| store.lease_next(session, a)))
        .await
        .into_iter()
        .map(|o| match o.unwrap() {
            LeaseOutcome::Assigned { quest, lease } => (quest.id, lease.id),
            other => panic!("expected a quest, got {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn concurrent_claims_give_each_agent_its_own_quest_and_one_lease_per_session() {
    for b in
        backends("concurrent_claims_give_each_agent_its_own_quest_and_one_lease_per_session").await
    {
        let store = b.store.as_ref();
        let s = session(store, 100).await;
        let token = TokenId::new();
        let first = lease_all(store, s, token, 40).await;
        let mut quests: Vec<QuestId> = first.iter().map(|(q, _)| *q).collect();
        quests.sort();
        quests.dedup();
        assert_eq!(
            quests.len(),
            40,
            "{}: two agents got the same quest",
            b.name
        );
        let again = lease_all(store, s, token, 40).await;
        assert_eq!(
            first, again,
            "{}: an agent holds one lease per session",
            b.name
        );
        let status = store.session_status(s).await.unwrap();
        assert_eq!(
            (status.counts.leased, status.counts.open),
            (40, 60),
            "{}",
            b.name
        );
    }
}

#[tokio::test]
async fn a_stale_lease_among_many_good_submits_is_refused_alone() {
    for b in backends("a_stale_lease_among_many_good_submits_is_refused_alone").await {
        let store = b.store.as_ref();
        let s = session(store, 30).await;
        let token = TokenId::new();
        let held = lease_all(store, s, token, 20).await;
        let (stale_quest, stale_lease) = held[7];
        store
            .release(stale_quest, stale_lease, token)
            .await
            .unwrap();
        let answers = join_all(held.iter().map(|(q, l)| {
            store.submit(
                result(*q, *l, token, "a@b.test"),
                Some(decision(Verdict::Pass)),
            )
        }))
        .await;
        for (i, answer) in answers.into_iter().enumerate() {
            if i == 7 {
                assert_eq!(code(answer), "lease_lost", "{}", b.name);
            } else {
                let SubmitOutcome::Recorded { view, .. } = answer.unwrap() else {
                    panic!("recorded")
                };
                assert_eq!(view.quest.state, State::Pass, "{}", b.name);
            }
        }
        let stale = store.get_quest(stale_quest).await.unwrap();
        assert_eq!(
            (stale.state, stale.submission_id),
            (State::Todo, None),
            "{}",
            b.name
        );
        let c = store.session_status(s).await.unwrap().counts;
        assert_eq!(
            (c.pass, c.open, c.submissions, c.remaining()),
            (19, 11, 19, 11),
            "{}",
            b.name
        );
    }
}

#[tokio::test]
async fn a_write_the_database_refuses_fails_only_its_own_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let store = SqliteStore::open(&path, Arc::new(SystemClock), broadcast::channel(8).0)
        .await
        .unwrap();
    let s = session(&store, 20).await;
    let token = TokenId::new();
    let held = lease_all(&store, s, token, 12).await;
    let (guilty, _) = held[5];
    // A rule only the database knows: the grouped statement that touches this
    // quest is refused as a whole, and must not take the others down with it.
    let mut raw = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}",
        path.display()
    ))
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TRIGGER test_refuses_one BEFORE UPDATE OF state ON quests WHEN NEW.id = '{guilty}'
         BEGIN SELECT RAISE(ABORT, 'test: this quest may not be decided'); END"
    )))
    .execute(&mut raw)
    .await
    .unwrap();
    let answers = join_all(held.iter().map(|(q, l)| {
        store.submit(
            result(*q, *l, token, "a@b.test"),
            Some(decision(Verdict::Pass)),
        )
    }))
    .await;
    for (i, answer) in answers.into_iter().enumerate() {
        if i == 5 {
            assert_eq!(code(answer), "illegal_transition");
        } else {
            assert!(matches!(answer.unwrap(), SubmitOutcome::Recorded { .. }));
        }
    }
    let q = store.get_quest(guilty).await.unwrap();
    assert_eq!(
        (q.state, q.submission_id),
        (State::Todo, None),
        "nothing of it half-applied"
    );
    let (subs, _) = store.quest_history(guilty).await.unwrap();
    assert!(subs.is_empty(), "its submission was rolled back with it");
    let c = store.session_status(s).await.unwrap().counts;
    assert_eq!((c.pass, c.leased, c.submissions), (11, 1, 11));
}

#[tokio::test]
async fn on_postgres_a_write_the_database_refuses_fails_only_its_own_request() {
    let test = "on_postgres_a_write_the_database_refuses_fails_only_its_own_request";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let store = PgStore::open(
        &db.url,
        TimeSource::Clock(Arc::new(SystemClock)),
        broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let s = session(&store, 20).await;
    let token = TokenId::new();
    let held = lease_all(&store, s, token, 12).await;
    let (guilty, _) = held[5];
    // A rule only the database knows: the write that touches this quest is
    // refused, and must not take the concurrent others down with it.
    let condition = format!("NEW.id = '{guilty}' AND NEW.state <> OLD.state");
    refuse_rows(store.pool(), "UPDATE", "quests", &condition).await;
    let answers = join_all(held.iter().map(|(q, l)| {
        store.submit(
            result(*q, *l, token, "a@b.test"),
            Some(decision(Verdict::Pass)),
        )
    }))
    .await;
    for (i, answer) in answers.into_iter().enumerate() {
        if i == 5 {
            assert_eq!(code(answer), "illegal_transition");
        } else {
            assert!(matches!(answer.unwrap(), SubmitOutcome::Recorded { .. }));
        }
    }
    let q = store.get_quest(guilty).await.unwrap();
    assert_eq!(
        (q.state, q.submission_id),
        (State::Todo, None),
        "nothing of it half-applied"
    );
    let (subs, _) = store.quest_history(guilty).await.unwrap();
    assert!(subs.is_empty(), "its submission was rolled back with it");
    let c = store.session_status(s).await.unwrap().counts;
    assert_eq!((c.pass, c.leased, c.submissions), (11, 1, 11));
}

#[tokio::test]
async fn a_fail_keeps_the_lease_a_pass_locks_and_events_follow_every_commit() {
    for mut b in
        backends("a_fail_keeps_the_lease_a_pass_locks_and_events_follow_every_commit").await
    {
        let store = b.store.as_ref();
        let s = session(store, 2).await;
        let token = TokenId::new();
        let [(quest, lease)] = lease_all(store, s, token, 1).await[..] else {
            panic!()
        };
        for attempt in ["nope", "still nope"] {
            let SubmitOutcome::Recorded { view, .. } = store
                .submit(
                    result(quest, lease, token, attempt),
                    Some(decision(Verdict::Fail)),
                )
                .await
                .unwrap()
            else {
                panic!("recorded")
            };
            assert_eq!(
                view.lease.map(|l| l.id),
                Some(lease),
                "{}: the lease is kept",
                b.name
            );
        }
        let q = store.get_quest(quest).await.unwrap();
        assert!(
            q.repeated_failure,
            "{}: the same facts twice are a doom loop",
            b.name
        );
        let SubmitOutcome::Recorded { view, .. } = store
            .submit(
                result(quest, lease, token, "a@b.test"),
                Some(decision(Verdict::Pass)),
            )
            .await
            .unwrap()
        else {
            panic!("recorded")
        };
        assert_eq!(
            (view.quest.state, view.quest.tries, view.remaining),
            (State::Pass, 2, 1)
        );
        assert_eq!(
            code(
                store
                    .submit(result(quest, lease, token, "x@b.test"), None)
                    .await
            ),
            "quest_locked",
            "{}",
            b.name
        );
        let SubmitOutcome::Replayed(same) = store
            .submit(result(quest, lease, token, "a@b.test"), None)
            .await
            .unwrap()
        else {
            panic!("the identical retry of the deciding submission is a replay")
        };
        assert_eq!(same.submission.id, view.submission.id);
        let mut kinds = Vec::new();
        while let Ok(e) = b.events.try_recv() {
            kinds.push(e.kind);
        }
        let decided = kinds.iter().filter(|k| **k == EventKind::Decided).count();
        assert_eq!(
            decided, 3,
            "{}: one event per verdict, after commit: {kinds:?}",
            b.name
        );
        assert_eq!(kinds.first(), Some(&EventKind::SessionCreated));
    }
}

#[tokio::test]
async fn reviews_are_claimed_by_one_reviewer_and_decided_once() {
    for b in backends("reviews_are_claimed_by_one_reviewer_and_decided_once").await {
        let store = b.store.as_ref();
        let s = session(store, 1).await;
        let token = TokenId::new();
        let [(quest, lease)] = lease_all(store, s, token, 1).await[..] else {
            panic!()
        };
        store
            .submit(
                result(quest, lease, token, "a@b.test"),
                Some(decision(Verdict::Review)),
            )
            .await
            .unwrap();
        let admin = quest::domain::review::Viewer {
            token: TokenId::new(),
            role: Role::Admin,
            adjudicate: false,
        };
        let queue = store
            .review_queue(
                Some(&[s]),
                Some(&CheckFilter::parse("schema").unwrap()),
                10,
                &admin,
            )
            .await
            .unwrap();
        assert_eq!(
            queue.iter().map(|q| q.quest.id).collect::<Vec<_>>(),
            [quest],
            "{}",
            b.name
        );
        // A queue of sessions lists theirs only: a limited token's review list.
        let elsewhere = SessionId::new();
        for (sessions, listed) in [
            (None, 1),
            (Some(&[elsewhere, s][..]), 1),
            (Some(&[elsewhere][..]), 0),
            (Some(&[][..]), 0),
        ] {
            let queue = store
                .review_queue(sessions, None, 10, &admin)
                .await
                .unwrap();
            assert_eq!(queue.len(), listed, "{}: {sessions:?}", b.name);
        }
        // Reviewers of live tokens: the store refuses a claim or decision of
        // a token that is revoked or unknown.
        let mut reviewers = Vec::new();
        for name in ["ana", "bo"] {
            let t = store
                .create_token(quest::store::NewToken::new(
                    name,
                    Role::Reviewer,
                    &format!("hash-{name}"),
                ))
                .await
                .unwrap();
            reviewers.push(ReviewerId::new(t.id, name));
        }
        let [ana, bo] = <[ReviewerId; 2]>::try_from(reviewers).unwrap();
        store.claim_review(quest, &ana, 60).await.unwrap();
        assert_eq!(
            code(store.claim_review(quest, &bo, 60).await),
            "review_claimed"
        );
        assert_eq!(
            code(store.decide_review(quest, &bo, Decision::Approve, "").await),
            "review_claimed"
        );
        let q = store
            .decide_review(quest, &ana, Decision::Approve, "checked")
            .await
            .unwrap();
        assert_eq!(
            (q.state, q.decided_by.as_deref()),
            (State::Pass, Some("reviewer:ana"))
        );
        assert_eq!(
            q.receipt.as_deref(),
            Some("sha256:0"),
            "{}: approval keeps the receipt",
            b.name
        );
        assert_eq!(
            code(
                store
                    .decide_review(quest, &ana, Decision::Reject, "no")
                    .await
            ),
            "not_in_review"
        );
        let c = store.session_status(s).await.unwrap().counts;
        assert_eq!((c.pass, c.review, c.remaining()), (1, 0, 0), "{}", b.name);
    }
}

#[tokio::test]
async fn tokens_are_found_by_digest_until_revoked() {
    for b in backends("tokens_are_found_by_digest_until_revoked").await {
        let store = b.store.as_ref();
        let t = store
            .create_token(quest::store::NewToken::new("bot", Role::Agent, "digest-1"))
            .await
            .unwrap();
        assert_eq!(
            store.find_token("digest-1").await.unwrap().map(|t| t.id),
            Some(t.id)
        );
        assert_eq!(
            code(
                store
                    .create_token(quest::store::NewToken::new("bot", Role::Viewer, "digest-2"))
                    .await
            ),
            "name_taken"
        );
        store.revoke_token(t.id).await.unwrap();
        assert!(
            store.find_token("digest-1").await.unwrap().is_none(),
            "{}",
            b.name
        );
        assert!(
            store
                .create_token(quest::store::NewToken::new("bot", Role::Viewer, "digest-2"))
                .await
                .is_ok(),
            "a revoked name is free"
        );
    }
}
