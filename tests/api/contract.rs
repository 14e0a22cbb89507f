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
        result,
    }
}

pub(crate) fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    match r {
        Err(StoreError::Conflict { code, .. }) => code,
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
        let queue = store
            .review_queue(Some(s), Some(&CheckFilter::parse("schema").unwrap()), 10)
            .await
            .unwrap();
        assert_eq!(
            queue.iter().map(|q| q.id).collect::<Vec<_>>(),
            [quest],
            "{}",
            b.name
        );
        // Reviewers of live tokens: the store refuses a claim or decision of
        // a token that is revoked or unknown.
        let mut reviewers = Vec::new();
        for name in ["ana", "bo"] {
            let t = store
                .create_token(name, Role::Reviewer, &format!("hash-{name}"), None)
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
            .create_token("bot", Role::Agent, "digest-1", None)
            .await
            .unwrap();
        assert_eq!(
            store.find_token("digest-1").await.unwrap().map(|t| t.id),
            Some(t.id)
        );
        assert_eq!(
            code(
                store
                    .create_token("bot", Role::Viewer, "digest-2", None)
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
                .create_token("bot", Role::Viewer, "digest-2", None)
                .await
                .is_ok(),
            "a revoked name is free"
        );
    }
}

/// Two stores on one PostgreSQL database: two replicas.
async fn two_replicas(test: &str) -> Option<(TestDatabase, PgStore, PgStore)> {
    let db = TestDatabase::create_or_skip(test).await?;
    let open = || {
        PgStore::open(
            &db.url,
            TimeSource::Clock(Arc::new(SystemClock)),
            broadcast::channel(1024).0,
        )
    };
    let (a, b) = (open().await.unwrap(), open().await.unwrap());
    Some((db, a, b))
}

/// The next event of `kind` a receiver gets, waiting up to five seconds.
pub(crate) async fn next_of(
    events: &mut broadcast::Receiver<QuestEvent>,
    kind: EventKind,
) -> QuestEvent {
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let e = events
                .recv()
                .await
                .expect("the relay keeps the channel open");
            if e.kind == kind {
                return e;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind:?} event within five seconds"))
}

#[tokio::test]
async fn on_postgres_a_replica_sees_the_events_another_replica_commits() {
    let test = "on_postgres_a_replica_sees_the_events_another_replica_commits";
    let Some((_db, a, b)) = two_replicas(test).await else {
        return;
    };
    let mut seen_by_b = b.events_for_tests().subscribe();
    let s = session(&a, 2).await;
    let token = TokenId::new();
    let [(quest, lease)] = lease_all(&a, s, token, 1).await[..] else {
        panic!()
    };
    let SubmitOutcome::Recorded { view, .. } = a
        .submit(
            result(quest, lease, token, "a@b.test"),
            Some(decision(Verdict::Pass)),
        )
        .await
        .unwrap()
    else {
        panic!("recorded")
    };
    let decided = next_of(&mut seen_by_b, EventKind::Decided).await;
    assert_eq!(
        (decided.quest_id, decided.submission_id, decided.verdict),
        (Some(quest), Some(view.submission.id), Some(Verdict::Pass)),
        "B relays what A committed"
    );
    let mut seen_by_a = a.events_for_tests().subscribe();
    b.release(quest, lease, token).await.unwrap_err();
    let [(other, other_lease)] = lease_all(&b, s, token, 1).await[..] else {
        panic!()
    };
    b.release(other, other_lease, token).await.unwrap();
    let released = next_of(&mut seen_by_a, EventKind::Released).await;
    assert_eq!(released.quest_id, Some(other), "and A what B committed");
    let mut again = seen_by_a.resubscribe();
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(1500), async {
            loop {
                if again.recv().await.unwrap().kind == EventKind::Released {
                    return;
                }
            }
        })
        .await
        .is_err(),
        "an event is relayed once, not again on the next read"
    );
}

#[tokio::test]
async fn on_postgres_an_event_committed_after_a_later_numbered_one_is_not_skipped() {
    let test = "on_postgres_an_event_committed_after_a_later_numbered_one_is_not_skipped";
    let Some((_db, a, _b)) = two_replicas(test).await else {
        return;
    };
    let mut seen = a.events_for_tests().subscribe();
    let s = session(&a, 1).await;
    let event = |kind: &str| {
        json!({"kind": kind, "session_id": s, "quest_id": null, "submission_id": null,
               "state": null, "phase": null, "verdict": null, "at": "2026-01-01T00:00:00Z"})
        .to_string()
    };
    let insert =
        "INSERT INTO events (origin, body) VALUES (gen_random_uuid(), $1::json) RETURNING id";
    // The slow transaction takes the lower id, the fast one commits first.
    let mut slow = a.pool().begin().await.unwrap();
    let slow_id: i64 = sqlx::query_scalar(insert)
        .bind(event("released"))
        .fetch_one(&mut *slow)
        .await
        .unwrap();
    let fast_id: i64 = sqlx::query_scalar(insert)
        .bind(event("lapsed"))
        .fetch_one(a.pool())
        .await
        .unwrap();
    assert!(slow_id < fast_id);
    next_of(&mut seen, EventKind::Lapsed).await;
    slow.commit().await.unwrap();
    next_of(&mut seen, EventKind::Released).await;
}

#[tokio::test]
async fn on_postgres_three_replicas_and_32_agents_finish_every_quest_without_a_double_lease() {
    let test = "on_postgres_three_replicas_and_32_agents_finish_every_quest_without_a_double_lease";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Arc::new(
            PgStore::open(
                &db.url,
                TimeSource::Clock(Arc::new(SystemClock)),
                broadcast::channel(65_536).0,
            )
            .await
            .unwrap(),
        ));
    }
    let quests = 300;
    let s = session(replicas[0].as_ref(), quests).await;
    let token = TokenId::new();
    // A poller on each replica: `remaining` never rises.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pollers: Vec<_> = replicas
        .iter()
        .map(|r| {
            let (r, done) = (r.clone(), done.clone());
            tokio::spawn(async move {
                let mut last = u64::MAX;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = r.session_status(s).await.unwrap().counts.remaining();
                    assert!(now <= last, "remaining rose from {last} to {now}");
                    last = now;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    let agents: Vec<_> = (0..32)
        .map(|i| {
            let store = replicas[i % 3].clone();
            tokio::spawn(async move {
                let agent = AgentId::new(token, format!("a{i}"));
                let mut passed = Vec::new();
                loop {
                    match store.lease_next(s, &agent).await.unwrap() {
                        LeaseOutcome::Assigned { quest, lease } => {
                            // Every third quest FAILs first, then passes on the same lease.
                            let fails_first = quest.row_index % 3 == 0 && quest.tries == 0;
                            let verdict = if fails_first {
                                Verdict::Fail
                            } else {
                                Verdict::Pass
                            };
                            let out = store
                                .submit(
                                    result(
                                        quest.id,
                                        lease.id,
                                        token,
                                        if fails_first { "nope" } else { "a@b.test" },
                                    ),
                                    Some(decision(verdict)),
                                )
                                .await
                                .unwrap();
                            if verdict == Verdict::Pass {
                                let SubmitOutcome::Recorded { view, .. } = out else {
                                    panic!("a new result is recorded")
                                };
                                assert_eq!(view.quest.state, State::Pass);
                                passed.push(quest.id);
                            }
                        }
                        LeaseOutcome::Wait { .. } => {
                            tokio::time::sleep(std::time::Duration::from_millis(5)).await
                        }
                        LeaseOutcome::Finished => return passed,
                    }
                }
            })
        })
        .collect();
    let mut passed: Vec<QuestId> = Vec::new();
    for a in join_all(agents).await {
        passed.extend(a.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for p in join_all(pollers).await {
        p.unwrap();
    }
    let n = passed.len();
    passed.sort();
    passed.dedup();
    assert_eq!(
        (n, passed.len()),
        (quests, quests),
        "each quest passed once, by one agent"
    );
    let statuses = join_all(replicas.iter().map(|r| r.session_status(s))).await;
    for status in &statuses {
        let c = status.as_ref().unwrap().counts;
        assert_eq!(
            (c.pass, c.remaining(), c.submissions),
            (quests as u64, 0, (quests + quests.div_ceil(3)) as u64),
            "every replica answers the same final status"
        );
    }
    let double: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT quest_id FROM leases GROUP BY quest_id HAVING COUNT(*) > 1) d",
    )
    .fetch_one(replicas[0].pool())
    .await
    .unwrap();
    assert_eq!(double, 0, "no quest was ever leased twice");
}

#[tokio::test]
async fn on_postgres_concurrent_claims_on_two_replicas_never_pass_a_tokens_lease_cap() {
    let test = "on_postgres_concurrent_claims_on_two_replicas_never_pass_a_tokens_lease_cap";
    let Some((_db, a, b)) = two_replicas(test).await else {
        return;
    };
    let s = session(&a, 50).await;
    let token = a
        .create_token("capped", Role::Agent, "digest-capped", Some(5))
        .await
        .unwrap()
        .id;
    let agents: Vec<AgentId> = (0..24)
        .map(|i| AgentId::new(token, format!("a{i}")))
        .collect();
    let answers = join_all(agents.iter().enumerate().map(|(i, agent)| {
        let store: &dyn Store = if i % 2 == 0 { &a } else { &b };
        store.lease_next(s, agent)
    }))
    .await;
    let mut assigned = 0;
    for answer in answers {
        match answer {
            Ok(LeaseOutcome::Assigned { .. }) => assigned += 1,
            other => assert_eq!(code(other), "lease_cap"),
        }
    }
    assert_eq!(
        assigned, 5,
        "exactly the cap, whichever replica each claim reached"
    );
    assert_eq!(b.session_status(s).await.unwrap().counts.leased, 5);
}
