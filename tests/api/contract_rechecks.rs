//! The store's contract for re-checks, on every backend: a run marks the
//! session's PASS quests, each is recorded once (a replay changes nothing),
//! the record sets only the quest's mark, and the last one finishes the run.

use std::sync::Arc;
use std::time::Duration;

use quest::domain::ids::{QuestId, RecheckRunId, SessionId, TokenId};
use quest::domain::recheck::{Mark, Outcome};
use quest::domain::work::ReviewerId;
use quest::domain::{Decision, EventKind, Fact, Role, State, SystemClock, Verdict};
use quest::store::postgres::{PgStore, TimeSource};
use quest::store::{NewRecheck, Store, StoreError};
use sqlx::{Connection, PgConnection};

use crate::contract::{backends, code, decision, lease_all, result, session};
use crate::contract_replicas::next_of;
use crate::postgres::TestDatabase;

fn found(run: RecheckRunId, quest: QuestId, verdict: Verdict, outcome: Outcome) -> NewRecheck {
    let facts = match verdict {
        Verdict::Fail => vec![Fact::new(
            "source",
            "/email",
            "on the page",
            "not on the page",
            "cite it",
        )],
        _ => Vec::new(),
    };
    NewRecheck {
        run_id: run,
        quest_id: quest,
        verdict,
        outcome,
        facts,
        evidence: vec![serde_json::json!({"status": 200})],
        gate: "schema".into(),
        gate_version: "2".into(),
        passed_gate_version: Some("1".into()),
        digest: "sha256:1".into(),
    }
}

#[tokio::test]
async fn a_recheck_run_records_each_pass_quest_once_marks_only_the_mark_and_finishes() {
    for mut b in
        backends("a_recheck_run_records_each_pass_quest_once_marks_only_the_mark_and_finishes")
            .await
    {
        let (store, name) = (b.store.clone(), b.name);
        let s = session(store.as_ref(), 3).await;
        assert_eq!(
            code(store.start_recheck(s, "admin", None).await),
            "nothing_to_recheck",
            "{name}"
        );
        assert!(matches!(
            store.start_recheck(SessionId::new(), "admin", None).await,
            Err(StoreError::NotFound(_))
        ));
        let token = TokenId::new();
        let leased = lease_all(store.as_ref(), s, token, 2).await;
        for (q, l) in &leased {
            store
                .submit(
                    result(*q, *l, token, "a@b.test"),
                    Some(decision(Verdict::Pass)),
                )
                .await
                .unwrap();
        }
        let (q0, q1) = (leased[0].0, leased[1].0);

        let run = store
            .start_recheck(s, "admin", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (run.total, run.done, run.finished_at),
            (2, 0, None),
            "{name}"
        );
        assert_eq!(
            code(store.start_recheck(s, "admin", None).await),
            "recheck_running"
        );
        assert_eq!(
            store
                .start_recheck(s, "schedule", Some(run.started_at))
                .await
                .unwrap(),
            None,
            "{name}: a schedule that another replica already followed starts nothing"
        );
        let mut due = store.due_rechecks(10).await.unwrap();
        due.sort();
        let mut expected = vec![(run.id, q0), (run.id, q1)];
        expected.sort();
        assert_eq!(due, expected, "{name}");
        let job = store.recheck_job(q0).await.unwrap().expect("due");
        assert_eq!(
            (job.run_id, job.passed_gate_version.as_deref()),
            (run.id, Some("1"))
        );

        let before = store.get_quest(q0).await.unwrap();
        let first = store
            .record_recheck(found(run.id, q0, Verdict::Fail, Outcome::Stale))
            .await
            .unwrap();
        assert!(
            !first.replayed && first.recheck.mark == Some(Mark::Stale),
            "{name}"
        );
        let again = store
            .record_recheck(found(run.id, q0, Verdict::Pass, Outcome::Confirmed))
            .await
            .unwrap();
        assert!(again.replayed, "{name}: recorded once");
        assert_eq!(again.recheck, first.recheck);
        let after = store.get_quest(q0).await.unwrap();
        assert_eq!(after.recheck_mark, Some(Mark::Stale), "{name}");
        assert_eq!(after.recheck_facts, first.recheck.facts);
        assert_eq!(after.rechecked_at, Some(first.recheck.created_at));
        assert_eq!(
            (
                after.state,
                after.tries,
                &after.receipt,
                &after.result,
                &after.last_facts,
                after.updated_at
            ),
            (
                State::Pass,
                before.tries,
                &before.receipt,
                &before.result,
                &before.last_facts,
                before.updated_at
            ),
            "{name}: only the mark moved"
        );
        let event = next_of(&mut b.events, EventKind::Rechecked).await;
        assert_eq!(
            (event.state, event.verdict, event.mark, event.quest_id),
            (
                Some(State::Pass),
                Some(Verdict::Fail),
                Some(Mark::Stale),
                Some(q0)
            )
        );
        let summary = store.recheck_summary(s).await.unwrap();
        assert_eq!((summary.stale, summary.unconfirmed), (1, 0), "{name}");
        assert_eq!(
            summary.last_run.as_ref().map(|r| (r.done, r.finished_at)),
            Some((1, None))
        );

        store
            .record_recheck(found(run.id, q1, Verdict::Pass, Outcome::Confirmed))
            .await
            .unwrap();
        let summary = store.recheck_summary(s).await.unwrap();
        let last = summary.last_run.unwrap();
        assert_eq!(last.done, 2, "{name}");
        assert!(
            last.finished_at.is_some(),
            "{name}: the last record finishes the run"
        );
        assert!(store.due_rechecks(10).await.unwrap().is_empty());
        assert!(store.recheck_job(q1).await.unwrap().is_none());
        assert_eq!(store.rechecks(q0).await.unwrap().len(), 1);

        let page = store
            .quest_page(
                s,
                &quest::store::QuestQuery {
                    state: Some(State::Todo),
                    limit: 5,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let todo_quest = page.quests[0].id;
        assert_eq!(
            code(
                store
                    .record_recheck(found(run.id, todo_quest, Verdict::Pass, Outcome::Confirmed))
                    .await
            ),
            "recheck_not_due",
            "{name}: a quest the run did not mark is not recorded"
        );

        let mut agents = store.agent_staleness(s).await.unwrap();
        agents.sort_by_key(|a| a.stale);
        assert_eq!(
            agents.iter().map(|a| (a.pass, a.stale)).collect::<Vec<_>>(),
            [(1, 0), (1, 1)],
            "{name}"
        );
        let next = store
            .start_recheck(s, "admin", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            next.total, 2,
            "{name}: a finished run lets the next one start"
        );
    }
}

/// PostgreSQL only: SQLite runs one write at a time, so nothing commits
/// between the statements of a start there.
#[tokio::test]
async fn a_quest_approved_while_a_recheck_starts_leaves_the_run_whole_on_postgres() {
    let test = "a_quest_approved_while_a_recheck_starts_leaves_the_run_whole_on_postgres";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let (events, _) = tokio::sync::broadcast::channel(1024);
    let store: Arc<dyn Store> = Arc::new(
        PgStore::open(&db.url, TimeSource::Clock(Arc::new(SystemClock)), events)
            .await
            .unwrap(),
    );
    let s = session(store.as_ref(), 3).await;
    let token = TokenId::new();
    let leased = lease_all(store.as_ref(), s, token, 2).await;
    let [(passed, l0), (review, l1)] = <[_; 2]>::try_from(leased).unwrap();
    for (q, l, verdict) in [(passed, l0, Verdict::Pass), (review, l1, Verdict::Review)] {
        store
            .submit(result(q, l, token, "a@b.test"), Some(decision(verdict)))
            .await
            .unwrap();
    }
    let ana = store
        .create_token(quest::store::NewToken::new(
            "ana",
            Role::Reviewer,
            "hash-ana",
        ))
        .await
        .unwrap();
    let ana = ReviewerId::new(ana.id, "ana");
    store.claim_review(review, &ana, 60).await.unwrap();

    // Another transaction holds an open run of the session, uncommitted, so
    // the start waits on the one-open-run index between its statements.
    let mut holder = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total)
         VALUES ($1, $2, 'holder', now(), 1)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(s.as_uuid())
    .execute(&mut holder)
    .await
    .unwrap();
    let start = tokio::spawn({
        let store = store.clone();
        async move { store.start_recheck(s, "admin", None).await }
    });
    let mut watcher = PgConnection::connect(&db.url).await.unwrap();
    let mut waits = 0;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        waits += 1;
        assert!(waits < 1000, "the start never waited on the held run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A reviewer's approval commits meanwhile; then the holder gives way.
    let approved = store
        .decide_review(review, &ana, Decision::Approve, "fine")
        .await
        .unwrap();
    assert_eq!(approved.state, State::Pass);
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();

    let run = start
        .await
        .unwrap()
        .expect("the start succeeds")
        .expect("a run");
    let due = store.due_rechecks(10).await.unwrap();
    assert_eq!(
        due.len() as u64,
        run.total,
        "the run's total is the quests it marked: {due:?}"
    );
    assert!(due.iter().all(|(r, _)| *r == run.id));
    for (_, quest) in due {
        store
            .record_recheck(found(run.id, quest, Verdict::Pass, Outcome::Confirmed))
            .await
            .unwrap();
    }
    let last = store.recheck_summary(s).await.unwrap().last_run.unwrap();
    assert_eq!(last.done, run.total);
    assert!(last.finished_at.is_some(), "the run finishes: {last:?}");
}
