//! Coalesced writes on PostgreSQL: the concurrent `next`s and submits of one
//! replica run in shared transactions, each still gets its own answer, and a
//! write the database refuses fails only its own request (for submits:
//! `contract::on_postgres_a_write_the_database_refuses_fails_only_its_own_request`).

use futures_util::future::join_all;
use quest::domain::ids::TokenId;
use quest::domain::work::AgentId;
use quest::domain::{State, Verdict};
use quest::store::postgres::{PgStore, TimeSource};
use quest::store::{LeaseOutcome, Store, SubmitOutcome};
use tokio::sync::broadcast;

use crate::contract::{code, decision, lease_all, result, session};
use crate::postgres::{TestDatabase, refuse_rows};

/// A store on a fresh database whose "now" is the database's, as in production.
async fn replica(test: &str) -> Option<(TestDatabase, PgStore)> {
    let db = TestDatabase::create_or_skip(test).await?;
    let store = PgStore::open(&db.url, TimeSource::Database, broadcast::channel(1024).0)
        .await
        .unwrap();
    Some((db, store))
}

/// How many transactions inserted the rows of `table`.
async fn transactions(store: &PgStore, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(DISTINCT xmin::text) FROM {table}");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn on_postgres_concurrent_nexts_share_transactions_and_each_gets_its_own_quest() {
    let test = "on_postgres_concurrent_nexts_share_transactions_and_each_gets_its_own_quest";
    let Some((_db, store)) = replica(test).await else {
        return;
    };
    let s = session(&store, 100).await;
    let token = TokenId::new();
    let agents: Vec<AgentId> = (0..64)
        .map(|i| AgentId::new(token, format!("a{i}")))
        .collect();
    let answers = join_all(agents.iter().map(|a| store.lease_next(s, a))).await;
    let mut quests = Vec::new();
    for (agent, answer) in agents.iter().zip(answers) {
        match answer.unwrap() {
            LeaseOutcome::Assigned { quest, lease } => {
                assert_eq!(&lease.agent, agent, "each answer is its own request's");
                quests.push(quest.row_index);
            }
            other => panic!("100 quests are open for 64 agents, got {other:?}"),
        }
    }
    quests.sort();
    assert_eq!(
        quests,
        (0..64).collect::<Vec<_>>(),
        "the first 64 in upload order, each once"
    );
    let transactions = transactions(&store, "leases").await;
    assert!(
        transactions <= 32,
        "64 concurrent nexts were claimed in {transactions} transactions: they are not coalesced"
    );
    // An agent asking again in a batch with new agents keeps its quest.
    let again = join_all(
        [agents[3].clone(), AgentId::new(token, "late")]
            .iter()
            .map(|a| store.lease_next(s, a))
            .collect::<Vec<_>>(),
    )
    .await;
    let rows: Vec<u64> = again
        .into_iter()
        .map(|a| match a.unwrap() {
            LeaseOutcome::Assigned { quest, .. } => quest.row_index,
            other => panic!("expected a quest, got {other:?}"),
        })
        .collect();
    assert_eq!(rows[1], 64, "the new agent gets the next open quest");
    assert!(rows[0] < 64, "agent a3 keeps the quest it holds");
    assert_eq!(store.session_status(s).await.unwrap().counts.leased, 65);
}

#[tokio::test]
async fn on_postgres_a_claim_the_database_refuses_in_a_batch_fails_only_its_own_next() {
    let test = "on_postgres_a_claim_the_database_refuses_in_a_batch_fails_only_its_own_next";
    let Some((_db, store)) = replica(test).await else {
        return;
    };
    let s = session(&store, 40).await;
    let token = TokenId::new();
    let guilty = AgentId::new(token, "guilty");
    // A rule only the database knows refuses the guilty agent's lease.
    let condition = format!("NEW.agent = '{guilty}'");
    refuse_rows(store.pool(), "INSERT", "leases", &condition).await;
    let mut agents: Vec<AgentId> = (0..24)
        .map(|i| AgentId::new(token, format!("a{i}")))
        .collect();
    agents.insert(12, guilty.clone());
    let answers = join_all(agents.iter().map(|a| store.lease_next(s, a))).await;
    let mut assigned = 0;
    for (agent, answer) in agents.iter().zip(answers) {
        if *agent == guilty {
            assert_eq!(code(answer), "illegal_transition");
        } else {
            assert!(
                matches!(answer, Ok(LeaseOutcome::Assigned { .. })),
                "{agent}: {answer:?}"
            );
            assigned += 1;
        }
    }
    assert_eq!(assigned, 24);
    let status = store.session_status(s).await.unwrap().counts;
    assert_eq!(status.leased, 24, "the refused claim left its quest open");
    assert_eq!(status.open, 16);
}

#[tokio::test]
async fn on_postgres_concurrent_submits_share_transactions_and_each_gets_its_own_verdict() {
    let test = "on_postgres_concurrent_submits_share_transactions_and_each_gets_its_own_verdict";
    let Some((_db, store)) = replica(test).await else {
        return;
    };
    let s = session(&store, 48).await;
    let token = TokenId::new();
    let held = lease_all(&store, s, token, 48).await;
    // Every third fails, the rest pass; one of them is sent twice (a retry).
    let verdict = |i: usize| {
        if i.is_multiple_of(3) {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    };
    let mut calls: Vec<_> = held
        .iter()
        .enumerate()
        .map(|(i, (q, l))| (i, result(*q, *l, token, &format!("a{i}@b.test"))))
        .collect();
    calls.push((1, result(held[1].0, held[1].1, token, "a1@b.test")));
    let answers = join_all(
        calls
            .iter()
            .map(|(i, new)| store.submit(new.clone(), Some(decision(verdict(*i))))),
    )
    .await;
    for ((i, new), answer) in calls.iter().zip(answers) {
        let view = match answer.unwrap() {
            SubmitOutcome::Recorded { view, .. } | SubmitOutcome::Replayed(view) => view,
        };
        assert_eq!(
            view.quest.id, new.quest_id,
            "each answer is its own request's"
        );
        assert_eq!(view.submission.result, new.result);
        let state = if verdict(*i) == Verdict::Pass {
            State::Pass
        } else {
            State::Todo
        };
        assert_eq!(view.quest.state, state, "quest {i}");
    }
    let submissions = transactions(&store, "submissions").await;
    assert!(
        submissions <= 24,
        "48 concurrent submits were recorded in {submissions} transactions: they are not coalesced"
    );
    let c = store.session_status(s).await.unwrap().counts;
    assert_eq!(
        (c.pass, c.submissions),
        (32, 48),
        "the retry recorded nothing new"
    );
}
