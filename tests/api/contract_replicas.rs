//! The store's contract across replicas: two or three PostgreSQL stores on
//! one database, as several `quest serve` processes share it (events relayed
//! between them, claims that never hand one quest or one lease cap twice).

use quest::domain::ids::{QuestId, TokenId};
use std::sync::Arc;

use futures_util::future::join_all;
use quest::domain::work::AgentId;
use quest::domain::{EventKind, QuestEvent, Role, State, SystemClock, Verdict};
use quest::store::postgres::{PgStore, TimeSource};
use quest::store::{LeaseOutcome, Store, SubmitOutcome};
use serde_json::json;
use tokio::sync::broadcast;

use crate::postgres::TestDatabase;

use crate::contract::{code, decision, lease_all, result, session};

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
        .create_token(quest::store::NewToken {
            max_leases: Some(5),
            ..quest::store::NewToken::new("capped", Role::Agent, "digest-capped")
        })
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
