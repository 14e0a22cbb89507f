//! One token cannot hog a session or grow a table forever: a cap on its
//! concurrent leases, and a lease history kept bounded per quest.

use std::sync::Arc;

use quest::domain::ids::{SessionId, TokenId};
use quest::domain::session::SessionConfig;
use quest::domain::table::Row;
use quest::domain::work::{AgentId, ENDED_LEASES_KEPT, Refusal};
use quest::domain::{Role, SystemClock};
use quest::store::{LeaseOutcome, NewSession, SqliteStore, Store, StoreError};
use serde_json::json;

use crate::helpers::{assigned, companies, contact_config, spawn_app};

async fn create_token(
    app: &crate::helpers::TestApp,
    body: serde_json::Value,
) -> crate::helpers::Answer {
    app.post("/v1/tokens", &app.admin, body).await
}

#[tokio::test]
async fn a_token_past_its_lease_cap_is_refused_with_the_cap_named_until_it_gives_one_back() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(5)).await;
    let created = create_token(
        &app,
        json!({"name": "bot", "role": "agent", "max_leases": 2}),
    )
    .await
    .expect(201);
    assert_eq!(created["max_leases"], 2);
    let token = created["secret"].as_str().unwrap().to_owned();

    let (first, first_lease) = assigned(&app.next(&token, &session, "a").await);
    assigned(&app.next(&token, &session, "b").await);
    let refused = app
        .post(
            &format!("/v1/sessions/{session}/next"),
            &token,
            json!({"agent": "c"}),
        )
        .await;
    refused.refused(409, "lease_cap");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 leases") && message.contains("release") && message.contains("admin"),
        "the refusal names the cap and what to do: {message}"
    );
    let status = app.status(&session).await;
    assert_eq!(status["leased"], 2, "the refusal changed nothing: {status}");

    // An agent that holds a quest still gets it back at the cap.
    let (again, _) = assigned(&app.next(&token, &session, "a").await);
    assert_eq!(again, first);

    // A release stays free, and frees a place under the cap.
    app.post(
        &format!("/v1/quests/{first}/release"),
        &token,
        json!({"lease_id": first_lease}),
    )
    .await
    .expect(204);
    assigned(&app.next(&token, &session, "c").await);
    let quest = app.quest(&first).await;
    assert_eq!(
        (quest["lapses"].as_u64(), quest["tries"].as_u64()),
        (Some(0), Some(0))
    );

    // The cap is the token's, over every session.
    let other = app.scan(contact_config(3), companies(2)).await;
    app.post(
        &format!("/v1/sessions/{other}/next"),
        &token,
        json!({"agent": "d"}),
    )
    .await
    .refused(409, "lease_cap");
}

#[tokio::test]
async fn a_token_at_its_cap_hears_wait_or_finished_when_nothing_is_open_and_a_cap_of_one_is_one_lease()
 {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let created = create_token(
        &app,
        json!({"name": "bot", "role": "agent", "max_leases": 1}),
    )
    .await
    .expect(201);
    let token = created["secret"].as_str().unwrap().to_owned();
    let (quest, lease) = assigned(&app.next(&token, &session, "a").await);

    // At the cap, with the one quest leased: nothing would be assigned anyway.
    let wait = app.next(&token, &session, "b").await;
    assert_eq!(wait["status"], "wait", "{wait}");
    // Another session with an open quest: there the cap does refuse.
    let other = app.scan(contact_config(3), companies(2)).await;
    let refused = app
        .post(
            &format!("/v1/sessions/{other}/next"),
            &token,
            json!({"agent": "b"}),
        )
        .await;
    refused.refused(409, "lease_cap");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("holds 1 lease,") && !message.contains("1 leases"),
        "{message}"
    );

    // The first session ends; at its cap again (a lease in the other
    // session), the token hears `finished` there, on which agents stop.
    let passed = app
        .submit(&token, &quest, &lease, json!({"email": "info@acme.test"}))
        .await
        .expect(200);
    assert_eq!(passed["state"], "PASS");
    assigned(&app.next(&token, &other, "c").await);
    let finished = app.next(&token, &session, "d").await;
    assert_eq!(finished, json!({"status": "finished"}));
}

#[tokio::test]
async fn agent_tokens_get_a_cap_of_64_admins_none_and_a_cap_is_refused_where_it_means_nothing() {
    let app = spawn_app().await;
    let agent = create_token(&app, json!({"name": "bot", "role": "agent"}))
        .await
        .expect(201);
    assert_eq!(agent["max_leases"], 64);
    let admin = create_token(&app, json!({"name": "ops", "role": "admin"}))
        .await
        .expect(201);
    assert_eq!(admin["max_leases"], serde_json::Value::Null);

    let before = app.get("/v1/tokens", &app.admin).await.expect(200);
    for bad in [
        json!({"name": "eve", "role": "reviewer", "max_leases": 3}),
        json!({"name": "eve", "role": "viewer", "max_leases": 3}),
        json!({"name": "eve", "role": "agent", "max_leases": 0}),
        json!({"name": "eve", "role": "agent", "max_leases": 1_000_001}),
    ] {
        create_token(&app, bad.clone())
            .await
            .refused(422, "invalid_max_leases");
    }
    create_token(
        &app,
        json!({"name": "eve", "role": "agent", "max_leases": "many"}),
    )
    .await
    .refused(422, "invalid_body");
    let after = app.get("/v1/tokens", &app.admin).await.expect(200);
    assert_eq!(before, after, "a refused token creation stores nothing");
    let listed = after
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bot")
        .unwrap();
    assert_eq!(listed["max_leases"], 64);
}

#[tokio::test]
async fn a_next_release_loop_keeps_a_quests_lease_rows_bounded_and_counts_every_lease() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let token = app.token("agent", "looper").await;

    // A FAIL first: the lease it was made under must outlive the pruning.
    let (quest, lease) = assigned(&app.next(&token, &session, "bot-0").await);
    let fail = app
        .submit(&token, &quest, &lease, json!({"email": 5}))
        .await
        .expect(200);
    assert_eq!(fail["verdict"], "FAIL");
    let release = |lease: String| {
        let path = format!("/v1/quests/{quest}/release");
        let token = token.clone();
        let app = &app;
        async move {
            app.post(&path, &token, json!({"lease_id": lease}))
                .await
                .expect(204);
        }
    };
    release(lease.clone()).await;
    let rounds = 30;
    for i in 1..rounds {
        let (q, l) = assigned(&app.next(&token, &session, &format!("bot-{i}")).await);
        assert_eq!(q, quest);
        release(l).await;
    }

    let view = app.quest(&quest).await;
    assert_eq!(
        view["leases"], rounds,
        "the count keeps every lease: {view}"
    );
    assert_eq!(
        (view["state"].as_str(), view["lapses"].as_u64()),
        (Some("TODO"), Some(0))
    );
    assert_eq!(view["submissions"][0]["id"], fail["submission_id"]);

    // Below the store, on the server's own backend.
    let mut db = crate::ratchet::raw(&app).await;
    let rows = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM leases WHERE quest_id = '{quest}'"
        ))
        .await;
    let with_submission = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM leases l WHERE l.quest_id = '{quest}'
               AND EXISTS (SELECT 1 FROM submissions s WHERE s.lease_id = l.id)"
        ))
        .await;
    assert!(
        rows <= i64::from(ENDED_LEASES_KEPT) + 2,
        "{rows} lease rows kept after {rounds} leases"
    );
    assert_eq!(with_submission, 1, "the lease of the FAIL is kept");
    let submitted = db
        .scalar(&format!("SELECT COUNT(*) FROM leases WHERE id = '{lease}'"))
        .await;
    assert_eq!(submitted, 1);
    let mut agents: Vec<(String, i64)> = db
        .counted(&format!(
            "SELECT agent, CAST(leased AS BIGINT) FROM console_agent_stats WHERE session_id = '{session}'"
        ))
        .await;
    agents.sort();
    let names: Vec<&str> = agents
        .iter()
        .map(|(a, _)| a.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        names,
        ["*", "bot-0"],
        "the agent that submitted keeps its row, the idle ones are folded into one: {agents:?}"
    );
    let token_of = |agent: &str| agent.split('/').next().unwrap().to_owned();
    assert_eq!(token_of(&agents[0].0), token_of(&agents[1].0), "one token");
    assert_eq!(
        (agents[0].1, agents[1].1),
        (i64::from(rounds) - 1, 1),
        "no lease is lost from the figures: {agents:?}"
    );
}

/// A store with one session of `n` quests and an agent token capped at `cap`.
async fn store_with(n: usize, cap: u32) -> (tempfile::TempDir, SqliteStore, TokenId, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("q.db"),
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let token = store
        .create_token(quest::store::NewToken {
            max_leases: Some(cap),
            ..quest::store::NewToken::new("bot", Role::Agent, "hash")
        })
        .await
        .unwrap();
    let rows = (0..n)
        .map(|i| {
            let input = json!({"company": format!("C{i}")})
                .as_object()
                .unwrap()
                .clone();
            (format!("C{i}"), Row::from_map(&input))
        })
        .collect();
    let session = store
        .create_session(NewSession {
            review_key: None,
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
        .id;
    (dir, store, token.id, session)
}

/// `n` `next` requests of one token under distinct agent names, all queued
/// before the writer runs (the test's runtime has one thread, and every
/// request is sent before the first answer is awaited): one batch, one group.
async fn many_nexts(
    store: &SqliteStore,
    session: SessionId,
    token: TokenId,
    n: usize,
) -> Vec<Result<LeaseOutcome, StoreError>> {
    let agents: Vec<AgentId> = (0..n)
        .map(|i| AgentId::new(token, format!("a{i}")))
        .collect();
    futures_util::future::join_all(agents.iter().map(|a| store.lease_next(session, a))).await
}

fn tally(outcomes: &[Result<LeaseOutcome, StoreError>]) -> (usize, usize, usize) {
    let mut t = (0, 0, 0);
    for o in outcomes {
        match o {
            Ok(LeaseOutcome::Assigned { .. }) => t.0 += 1,
            Ok(LeaseOutcome::Wait { .. }) => t.1 += 1,
            Err(StoreError::Refused(Refusal::LeaseCap { .. })) => t.2 += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    t
}

#[tokio::test]
async fn the_cap_holds_for_many_nexts_of_one_token_in_one_batch() {
    let (_dir, store, token, session) = store_with(10, 3).await;
    let outcomes = many_nexts(&store, session, token, 8).await;
    assert_eq!(tally(&outcomes), (3, 0, 5), "{outcomes:?}");
    // And in the next batch, with the three held.
    let outcomes = many_nexts(&store, session, token, 8).await;
    let (held, _, refused) = tally(&outcomes);
    assert_eq!(
        (held, refused),
        (3, 5),
        "the holders get theirs back, the rest are refused"
    );
}

#[tokio::test]
async fn in_one_batch_requests_under_the_cap_that_find_nothing_open_are_told_to_wait() {
    let (_dir, store, token, session) = store_with(1, 3).await;
    let outcomes = many_nexts(&store, session, token, 5).await;
    assert_eq!(
        tally(&outcomes),
        (1, 4, 0),
        "one lease is held, below the cap of 3: run one by one, every other request waits: {outcomes:?}"
    );
}

#[tokio::test]
async fn a_database_from_before_the_caps_gets_them_its_history_bounded_and_claims_by_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let mut before = sqlx::migrate!("./migrations/sqlite");
    let all = before.migrations.len();
    before.migrations = before.migrations[..7].to_vec().into();
    before.run(&pool).await.unwrap();
    let (token, ana, old_bo, bo, session, quest, decided) = (
        TokenId::new().to_string(),
        TokenId::new().to_string(),
        TokenId::new().to_string(),
        TokenId::new().to_string(),
        SessionId::new().to_string(),
        uuid::Uuid::now_v7().to_string(),
        uuid::Uuid::now_v7().to_string(),
    );
    let at = "2026-01-02T03:04:05.000000Z";
    // `bo` was revoked and a new token took its name: a claim made by the old
    // `bo` names `bo` only, and must not pass to the new one.
    sqlx::query(
        "INSERT INTO tokens (id, name, role, hash, created_at, revoked_at) VALUES
         (?1, 'bot', 'agent', 'h1', ?5, NULL), (?2, 'ana', 'reviewer', 'h2', ?5, NULL),
         (?3, 'bo', 'reviewer', 'h3', ?5, ?5), (?4, 'bo', 'reviewer', 'h4', ?5, NULL)",
    )
    .bind(&token)
    .bind(&ana)
    .bind(&old_bo)
    .bind(&bo)
    .bind(at)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name, source_type, total,
         max_tries, max_lapses, lease_seconds, created_by, created_at)
         VALUES (?1, 's', 'company', 'schema', ?2, '[\"company\"]', 's.jsonl', 'application/x-ndjson', 2, 3, 3, 300, 'admin', ?3)",
    )
    .bind(&session)
    .bind(serde_json::to_string(&contact_config(3)).unwrap())
    .bind(at)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
         VALUES (?1, ?2, 0, 'C0', '{\"company\":\"C0\"}', 'TODO', 'open', ?4),
                (?3, ?2, 1, 'C1', '{\"company\":\"C1\"}', 'TODO', 'open', ?4)",
    )
    .bind(&quest)
    .bind(&session)
    .bind(&decided)
    .bind(at)
    .execute(&pool)
    .await
    .unwrap();
    // `decided`: a quest decided PASS under its first lease after a FAIL
    // under an earlier one, with 12 released leases between them.
    let lease = |quest: &str, ended: bool| {
        let id = uuid::Uuid::now_v7().to_string();
        let query = sqlx::query(
            "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at, ended_at, end_reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, CASE WHEN ?6 THEN ?5 END, CASE WHEN ?6 THEN 'released' END)",
        )
        .bind(id.clone())
        .bind(quest.to_owned())
        .bind(session.clone())
        .bind(format!("{token}/bot"))
        .bind(at)
        .bind(ended);
        (id, query)
    };
    let submit = |lease: &str, verdict: &str, state: &str, tries: i64| {
        let id = uuid::Uuid::now_v7().to_string();
        let query = sqlx::query(
            "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict,
             state_after, tries_after, created_at, decided_at)
             VALUES (?1, ?2, ?3, ?4, ?5, '{}', 'h', ?6, ?7, ?8, ?9, ?9)",
        )
        .bind(id.clone())
        .bind(decided.clone())
        .bind(session.clone())
        .bind(lease.to_owned())
        .bind(format!("{token}/bot"))
        .bind(verdict.to_owned())
        .bind(state.to_owned())
        .bind(tries)
        .bind(at);
        (id, query)
    };
    let (failed_lease, q) = lease(&decided, false);
    q.execute(&pool).await.unwrap();
    let (_, q) = submit(&failed_lease, "FAIL", "TODO", 1);
    q.execute(&pool).await.unwrap();
    sqlx::query("UPDATE leases SET ended_at = ?2, end_reason = 'decided' WHERE id = ?1")
        .bind(&failed_lease)
        .bind(at)
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..12 {
        lease(&decided, true).1.execute(&pool).await.unwrap();
    }
    let (passed_lease, q) = lease(&decided, false);
    q.execute(&pool).await.unwrap();
    sqlx::query("UPDATE quests SET phase = 'leased', lease_id = ?2 WHERE id = ?1")
        .bind(&decided)
        .bind(&passed_lease)
        .execute(&pool)
        .await
        .unwrap();
    let (passed, q) = submit(&passed_lease, "PASS", "PASS", 1);
    q.execute(&pool).await.unwrap();
    sqlx::query(
        "UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL, tries = 1, result = '{}',
         submission_id = ?2, decided_by = 'gate' WHERE id = ?1",
    )
    .bind(&decided)
    .bind(&passed)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE leases SET ended_at = ?2, end_reason = 'decided' WHERE id = ?1")
        .bind(&passed_lease)
        .bind(at)
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..20 {
        sqlx::query(
            "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at, ended_at, end_reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5, 'released')",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(&quest)
        .bind(&session)
        .bind(format!("{token}/bot"))
        .bind(at)
        .execute(&pool)
        .await
        .unwrap();
    }
    let later = "2026-01-02T03:19:05.000000Z";
    sqlx::query(
        "UPDATE quests SET review_claimed_by = CASE id WHEN ?1 THEN 'ana' ELSE 'bo' END,
         review_claim_expires_at = ?2",
    )
    .bind(&quest)
    .bind(later)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert!(all > 7, "the migrations under test exist");

    let store = SqliteStore::open(
        &path,
        Arc::new(SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let tokens = store.list_tokens().await.unwrap();
    let cap = |name: &str| tokens.iter().find(|t| t.name == name).unwrap().max_leases;
    assert_eq!((cap("bot"), cap("ana")), (Some(64), None));
    let row = store.get_quest(quest.parse().unwrap()).await.unwrap();
    assert_eq!(row.leases, 20, "the count keeps the leases pruned");
    // A claim of before named a reviewer only, and `bo` was worn by two
    // tokens: no claim can be given to a token for sure, so none survives.
    for id in [&quest, &decided] {
        let row = store.get_quest(id.parse().unwrap()).await.unwrap();
        assert_eq!(
            (row.review_claimed_by, row.review_claim_expires_at),
            (None, None),
            "the claim of before is given up"
        );
    }
    let row = store.get_quest(decided.parse().unwrap()).await.unwrap();
    assert_eq!(
        row.leases, 14,
        "every lease of the decided quest is counted"
    );
    assert_eq!(
        (
            row.state.as_str(),
            row.tries,
            row.submission_id.map(|s| s.to_string())
        ),
        ("PASS", 1, Some(passed.clone())),
        "the decided quest stays decided"
    );
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", path.display()))
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE quest_id = ?")
        .bind(&quest)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, i64::from(ENDED_LEASES_KEPT));
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT id FROM leases WHERE quest_id = ? ORDER BY id")
            .bind(&decided)
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(
        kept.len(),
        usize::try_from(ENDED_LEASES_KEPT).unwrap() + 2,
        "the last {ENDED_LEASES_KEPT} released leases and the two with a submission: {kept:?}"
    );
    assert_eq!(kept[0], failed_lease, "the lease of the FAIL is kept");
    assert_eq!(kept.last(), Some(&passed_lease));
    let submissions: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM submissions WHERE quest_id = ?")
            .bind(&decided)
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(submissions, 2);
    let mut named: Vec<_> = tokens
        .iter()
        .filter(|t| t.name != "bot")
        .map(|t| (t.id.to_string(), t.revoked_at.is_some()))
        .collect();
    named.sort();
    let mut expected = vec![(ana, false), (old_bo, true), (bo, false)];
    expected.sort();
    assert_eq!(named, expected, "the tokens are as they were");
}
