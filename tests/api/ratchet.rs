//! The ratchet is a property of the database: raw SQL cannot unlock a decided quest.

//! Each test runs on every backend [`ratchet_apps`] starts: the SQLite
//! server, and a server on PostgreSQL when a local one answers. The SQL
//! differs where the dialects do (SQLite's `REPLACE` is PostgreSQL's upsert).

use serde_json::json;
use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::helpers::*;

/// A server of every backend available (see the module's doc).
async fn ratchet_apps(test: &str) -> Vec<TestApp> {
    let mut apps = vec![spawn_app().await];
    if !on_postgres()
        && let Some(app) = spawn_app_on_postgres(test).await
    {
        apps.push(app);
    }
    apps
}

/// A raw connection to a server's database, below the store.
pub enum Raw {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Raw {
    /// Runs one statement; the database's error text when it refuses.
    pub async fn execute(&mut self, sql: &str) -> Result<u64, String> {
        let q = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Raw::Sqlite(c) => sqlx::query(q).execute(c).await.map(|r| r.rows_affected()),
            Raw::Postgres(c) => sqlx::query(q).execute(c).await.map(|r| r.rows_affected()),
        }
        .map_err(|e| e.to_string())
    }

    /// The rows of a `(text, count)` query.
    pub async fn counted(&mut self, sql: &str) -> Vec<(String, i64)> {
        let q = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()));
        match self {
            Raw::Sqlite(c) => q.fetch_all(c).await,
            Raw::Postgres(c) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_all(c)
                    .await
            }
        }
        .expect(sql)
    }

    /// One number.
    pub async fn scalar(&mut self, sql: &str) -> i64 {
        match self {
            Raw::Sqlite(c) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(c)
                    .await
            }
            Raw::Postgres(c) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(c)
                    .await
            }
        }
        .expect(sql)
    }
}

pub async fn raw(app: &TestApp) -> Raw {
    match &app.database_url {
        Some(url) => Raw::Postgres(
            PgConnection::connect(url)
                .await
                .expect("a raw connection to the database"),
        ),
        None => Raw::Sqlite(
            SqliteConnection::connect(&format!(
                "sqlite://{}",
                app.data_dir.path().join("quest.db").display()
            ))
            .await
            .expect("a raw connection to the database"),
        ),
    }
}

/// The statement in the dialect of the backend.
fn dialect(pg: bool, sqlite: String, postgres: String) -> String {
    if pg { postgres } else { sqlite }
}

#[tokio::test]
async fn raw_sql_cannot_reopen_a_passed_quest_or_rewrite_history() {
    for app in ratchet_apps("raw_sql_cannot_reopen_a_passed_quest_or_rewrite_history").await {
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(2)).await;
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        app.submit(&agent, &quest, &lease, json!({"email": "bad"}))
            .await
            .expect(200);
        let pass = app
            .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
            .await
            .expect(200);
        let mut db = raw(&app).await;

        let refused = [
            format!("UPDATE quests SET state = 'TODO', phase = 'open' WHERE id = '{quest}'"),
            format!("UPDATE quests SET state = 'DONE' WHERE id = '{quest}'"),
            format!(
                "UPDATE quests SET result = '{{\"email\":\"evil@x.test\"}}' WHERE id = '{quest}'"
            ),
            format!("UPDATE quests SET receipt = 'sha256:forged' WHERE id = '{quest}'"),
            format!("DELETE FROM quests WHERE id = '{quest}'"),
            format!(
                "UPDATE submissions SET verdict = 'FAIL' WHERE id = '{}'",
                pass["submission_id"].as_str().unwrap()
            ),
            format!("DELETE FROM submissions WHERE quest_id = '{quest}'"),
        ];
        for sql in refused {
            let err = db.execute(&sql).await.expect_err(&sql);
            assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
        }
        let view = app.quest(&quest).await;
        assert_eq!(
            (view["state"].as_str(), view["result"]["email"].as_str()),
            (Some("PASS"), Some("a@b.test"))
        );
        assert_eq!(view["receipt"], pass["receipt"]);

        let (other, _) = assigned(&app.next(&agent, &session, "a").await);
        let err = db
            .execute(&format!(
                "UPDATE quests SET tries = tries - 1 WHERE id = '{quest}' OR id = '{other}'"
            ))
            .await
            .expect_err("tries never decrease");
        assert!(err.to_string().contains("ratchet"), "{err}");
        let err = db
            .execute(&format!(
                "UPDATE quests SET state = 'SOMETHING' WHERE id = '{other}'"
            ))
            .await
            .expect_err("states are a closed set");
        assert!(err.to_lowercase().contains("check"), "{err}");
    }
}

#[tokio::test]
async fn a_review_quest_may_only_become_pass_or_done() {
    for app in ratchet_apps("a_review_quest_may_only_become_pass_or_done").await {
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(1)).await;
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        app.submit(
            &agent,
            &quest,
            &lease,
            json!({"email": "a@b.test", "confidence": "low"}),
        )
        .await
        .expect(200);
        let mut db = raw(&app).await;
        let err = db
            .execute(&format!(
                "UPDATE quests SET state = 'TODO', phase = 'open' WHERE id = '{quest}'"
            ))
            .await
            .expect_err("REVIEW never returns to TODO");
        assert!(err.to_string().contains("ratchet"), "{err}");
        assert_eq!(app.status(&session).await["review"], 1);
    }
}

#[tokio::test]
async fn replace_cannot_smuggle_a_decided_quest_or_verdict_back() {
    for app in ratchet_apps("replace_cannot_smuggle_a_decided_quest_or_verdict_back").await {
        let pg = app.database_url.is_some();
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(1)).await;
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        let pass = app
            .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
            .await
            .expect(200);
        let submission = pass["submission_id"].as_str().unwrap();
        let mut db = raw(&app).await;
        // SQLite's REPLACE deletes the old row without its delete triggers;
        // PostgreSQL's upsert updates it in place, under the update triggers.
        let refused = [
            dialect(
                pg,
                format!(
                    "INSERT OR REPLACE INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
                     VALUES ('{quest}', '{session}', 0, 'k', '{{}}', 'TODO', 'open', 'now')"
                ),
                format!(
                    "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
                     VALUES ('{quest}', '{session}', 0, 'k', '{{}}', 'TODO', 'open', now())
                     ON CONFLICT (id) DO UPDATE SET state = 'TODO', phase = 'open', lease_id = NULL"
                ),
            ),
            dialect(
                pg,
                format!(
                    "REPLACE INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict, created_at)
                     VALUES ('{submission}', '{quest}', '{session}', '{lease}', 'x', '{{}}', 'h', 'FAIL', 'now')"
                ),
                format!(
                    "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict, created_at)
                     VALUES ('{submission}', '{quest}', '{session}', '{lease}', 'x', '{{}}', 'h', 'FAIL', now())
                     ON CONFLICT (id) DO UPDATE SET verdict = 'FAIL'"
                ),
            ),
        ];
        for sql in refused {
            let err = db.execute(&sql).await.expect_err(&sql);
            assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
        }
        assert_eq!(app.quest(&quest).await["state"], "PASS");
        assert_sums(&app.status(&session).await);
    }
}

#[tokio::test]
async fn phases_lapses_and_a_result_under_review_are_guarded_too() {
    for app in ratchet_apps("phases_lapses_and_a_result_under_review_are_guarded_too").await {
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(2)).await;
        let (q1, l1) = assigned(&app.next(&agent, &session, "a").await);
        app.submit(
            &agent,
            &q1,
            &l1,
            json!({"email": "a@b.test", "confidence": "low"}),
        )
        .await
        .expect(200);
        let (q2, _) = assigned(&app.next(&agent, &session, "b").await);
        let mut db = raw(&app).await;
        for sql in [
            format!("UPDATE quests SET result = '{{\"email\":\"evil@x.test\"}}' WHERE id = '{q1}'"),
            format!("UPDATE quests SET phase = 'verifying' WHERE id = '{q2}'"),
        ]
        .iter()
        {
            let err = db.execute(sql).await.expect_err(sql);
            assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
        }
        db.execute(&format!("UPDATE quests SET lapses = 2 WHERE id = '{q2}'"))
            .await
            .unwrap();
        let err = db
            .execute(&format!("UPDATE quests SET lapses = 1 WHERE id = '{q2}'"))
            .await
            .expect_err("lapses never decrease");
        assert!(err.to_string().contains("ratchet"), "{err}");
    }
}

/// The running counters must equal a count over the quests themselves.
pub async fn assert_counters_match_the_rows(app: &TestApp, session: &str) {
    let mut db = raw(app).await;
    let rows = db.counted(&format!(
        "SELECT state || COALESCE('/' || phase, ''), COUNT(*) FROM quests WHERE session_id = '{session}' GROUP BY 1"
    )).await;
    let status = app.status(session).await;
    let field = |bucket: &str| match bucket {
        "TODO/open" => "open",
        "TODO/leased" => "leased",
        "TODO/checking" => "checking",
        "TODO/verifying" => "verifying",
        "PASS" => "pass",
        "REVIEW" => "review",
        _ => "done",
    };
    let mut counted = 0;
    for (bucket, n) in rows {
        assert_eq!(
            status[field(&bucket)].as_i64(),
            Some(n),
            "{bucket}: {status}"
        );
        counted += n;
    }
    assert_eq!(status["total"].as_i64(), Some(counted), "{status}");
}

/// Runs `sql` on a raw connection and expects the database to refuse it with
/// a message holding `why`.
async fn refused(db: &mut Raw, sql: String, why: &str) {
    let err = db.execute(&sql).await.expect_err(&sql);
    assert!(err.to_string().contains(why), "{sql}: {err}");
}

#[tokio::test]
async fn every_verdict_needs_its_proof_in_the_database() {
    for app in ratchet_apps("every_verdict_needs_its_proof_in_the_database").await {
        let pg = app.database_url.is_some();
        let agent = app.token("agent", "bot").await;
        let session = app.scan(contact_config(3), companies(3)).await;
        let (leased, lease) = assigned(&app.next(&agent, &session, "a").await);
        let (_, _) = assigned(&app.next(&agent, &session, "b").await);
        let (review, review_lease) = assigned(&app.next(&agent, &session, "c").await);
        app.submit(
            &agent,
            &review,
            &review_lease,
            json!({"email": "a@b.test", "confidence": "low"}),
        )
        .await
        .expect(200);
        let mut db = raw(&app).await;

        // A verdict straight from `leased` exists only with its decided submission.
        refused(
        &mut db,
        format!(
            "UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL WHERE id = '{leased}'"
        ),
        "needs its decided submission",
    )
    .await;
        // Tries never exceed the session's limit, not even by raw SQL on a TODO quest.
        refused(
            &mut db,
            format!("UPDATE quests SET tries = 99 WHERE id = '{leased}'"),
            "max_tries",
        )
        .await;
        // REVIEW ends only by a recorded review decision.
        refused(
            &mut db,
            format!("UPDATE quests SET state = 'PASS', decided_by = 'gate' WHERE id = '{review}'"),
            "recorded review decision",
        )
        .await;
        // A quest cannot be moved onto another's row: REPLACE would delete that one silently.
        let before = db.scalar("SELECT COUNT(*) FROM quests").await;
        refused(
            &mut db,
            dialect(
                pg,
                format!("UPDATE OR REPLACE quests SET row_index = 0 WHERE id = '{review}'"),
                format!("UPDATE quests SET row_index = 0 WHERE id = '{review}'"),
            ),
            "never change",
        )
        .await;
        refused(
            &mut db,
            format!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
             VALUES ('{}', '{session}', 99, 'x', '{{}}', 'PASS', NULL, '2026-01-01')",
            uuid::Uuid::now_v7()
        ),
            "starts open",
        )
        .await;
        let after = db.scalar("SELECT COUNT(*) FROM quests").await;
        assert_eq!(before, after, "no quest was deleted or smuggled in");

        // In a session with AI verifiers, a PASS goes through them, even with a
        // decided submission in place.
        db.execute(&dialect(
            pg,
            format!(
                "UPDATE sessions SET config = json_set(config, '$.verify', json('{{\"verifiers\": [\"x\"]}}')) WHERE id = '{session}'"
            ),
            format!(
                "UPDATE sessions SET config = (config::jsonb || '{{\"verify\": {{\"verifiers\": [\"x\"]}}}}'::jsonb)::json WHERE id = '{session}'"
            ),
        ))
        .await
        .unwrap();
        let submission = uuid::Uuid::now_v7();
        db.execute(&format!(
        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict,
           state_after, tries_after, created_at, decided_at)
         VALUES ('{submission}', '{leased}', '{session}', '{lease}', '{}/a', '{{}}', 'h', 'PASS', 'PASS', 0,
           '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
        uuid::Uuid::now_v7()
    )).await
    .unwrap();
        refused(
        &mut db,
        format!(
            "UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL, submission_id = '{submission}'
             WHERE id = '{leased}'"
        ),
        "goes through them",
    )
    .await;
        let view = app.quest(&leased).await;
        assert_eq!(
            (view["state"].as_str(), view["phase"].as_str()),
            (Some("TODO"), Some("leased"))
        );
    }
}
