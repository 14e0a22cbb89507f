//! The ratchet is a property of the database: raw SQL cannot unlock a decided quest.

//! Each test runs on every backend [`ratchet_apps`] starts: the SQLite
//! server, and a server on PostgreSQL when a local one answers. The SQL
//! differs where the dialects do (SQLite's `REPLACE` is PostgreSQL's upsert).

use serde_json::json;
use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::helpers::*;

/// A server of every backend available (see the module's doc).
pub(crate) async fn ratchet_apps(test: &str) -> Vec<TestApp> {
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
    /// Runs one statement; the database's error text when it refuses, after
    /// `[SQLSTATE <code>]` on PostgreSQL.
    pub async fn execute(&mut self, sql: &str) -> Result<u64, String> {
        let q = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Raw::Sqlite(c) => sqlx::query(q)
                .execute(c)
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| e.to_string()),
            Raw::Postgres(c) => sqlx::query(q)
                .execute(c)
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| match &e {
                    sqlx::Error::Database(d) => {
                        format!("[SQLSTATE {}] {e}", d.code().unwrap_or_default())
                    }
                    _ => e.to_string(),
                }),
        }
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

/// Whether the database refused a statement by one of its integrity rules:
/// a ratchet trigger (`ratchet: ...`) or, on PostgreSQL, a constraint
/// (SQLSTATE class 23). PostgreSQL checks a row's constraints before the
/// statement's ratchet triggers run (migrations/postgres/0014), so a
/// statement that breaks both is refused by the constraint; each rule's own
/// refusal is asserted by `ratchet_rules`, one statement per rule.
pub fn refused_by_a_rule(err: &str) -> bool {
    err.contains("ratchet") || err.starts_with("[SQLSTATE 23")
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
            assert!(refused_by_a_rule(&err), "{sql}: {err}");
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
        assert!(refused_by_a_rule(&err), "{err}");
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
        assert!(refused_by_a_rule(&err), "{err}");
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
                    "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, max_tries, updated_at)
                     VALUES ('{quest}', '{session}', 0, 'k', '{{}}', 'TODO', 'open', 3, now())
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
            assert!(refused_by_a_rule(&err), "{sql}: {err}");
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
            assert!(refused_by_a_rule(&err), "{sql}: {err}");
        }
        db.execute(&format!("UPDATE quests SET lapses = 2 WHERE id = '{q2}'"))
            .await
            .unwrap();
        let err = db
            .execute(&format!("UPDATE quests SET lapses = 1 WHERE id = '{q2}'"))
            .await
            .expect_err("lapses never decrease");
        assert!(refused_by_a_rule(&err), "{err}");
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
                format!("UPDATE quests SET row_index = 1000 WHERE id = '{review}'"),
            ),
            "never change",
        )
        .await;
        // A PostgreSQL quest carries its session's max_tries (3).
        let id = uuid::Uuid::now_v7();
        refused(
            &mut db,
            dialect(
                pg,
                format!(
                    "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
                     VALUES ('{id}', '{session}', 99, 'x', '{{}}', 'PASS', NULL, '2026-01-01')"
                ),
                format!(
                    "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, max_tries, updated_at)
                     VALUES ('{id}', '{session}', 99, 'x', '{{}}', 'PASS', NULL, 3, '2026-01-01')"
                ),
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

/// A connection to a SQLite server's file as the `sqlite3` shell opens one:
/// SQLite's own defaults, so no `recursive_triggers` and no foreign keys
/// (sqlx would turn those on).
async fn plain_sqlite(app: &TestApp) -> SqliteConnection {
    use sqlx::ConnectOptions;
    sqlx::sqlite::SqliteConnectOptions::new()
        .filename(app.data_dir.path().join("quest.db"))
        .foreign_keys(false)
        .connect()
        .await
        .expect("a plain connection to the database")
}

async fn plain_exec(db: &mut SqliteConnection, sql: &str) -> Result<u64, String> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *db)
        .await
        .map(|r| r.rows_affected())
        .map_err(|e| e.to_string())
}

async fn plain_count(db: &mut SqliteConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&mut *db)
        .await
        .expect(sql)
}

/// SQLite only: REPLACE deletes the row holding a key without its delete
/// triggers (PostgreSQL has no REPLACE; its upsert is an update, refused by
/// the update triggers, see above). Every key of a ratcheted or append-only
/// table refuses a second row, so neither `INSERT OR REPLACE` nor `REPLACE
/// INTO` can wipe a PASS quest, a verdict or a record.
#[tokio::test]
async fn replace_on_any_key_of_the_ratchet_tables_is_refused() {
    let app = spawn_app().await;
    if app.database_url.is_some() {
        return;
    }
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let pass = app
        .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    let submission = pass["submission_id"].as_str().unwrap().to_owned();
    let mut db = plain_sqlite(&app).await;
    let at = "2026-01-01T00:00:00.000000Z";

    // One row in each of the other append-only tables, written below the store.
    let (decision, job, run, recheck) = (
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
    );
    for sql in [
        format!(
            "INSERT INTO review_decisions (id, quest_id, reviewer, decision, note, created_at)
             VALUES ('{decision}', '{quest}', 'r', 'approve', 'n', '{at}')"
        ),
        format!(
            "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index, question,
               flag_on, request, status, created_at, answered_at)
             VALUES ('{job}', '{submission}', '{quest}', '{session}', 'v', 0, 'q', 'yes', '{{}}', 'answered', '{at}', '{at}')"
        ),
        format!(
            "INSERT INTO l2_answers (job_id, submission_id, quest_id, session_id, verifier, model, question_index,
               question, flag_on, raw_reply, answer, detail, flagged, attempts, latency_ms, created_at)
             VALUES ('{job}', '{submission}', '{quest}', '{session}', 'v', 'm', 0, 'q', 'yes', 'NO', 'no', 'd', 0, 1, 1, '{at}')"
        ),
        format!(
            "INSERT INTO l2_decisions (submission_id, quest_id, session_id, state_after, facts, decided_at)
             VALUES ('{submission}', '{quest}', '{session}', 'PASS', '[]', '{at}')"
        ),
        format!(
            "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total)
             VALUES ('{run}', '{session}', 'admin', '{at}', 1)"
        ),
        format!(
            "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict, outcome, mark, facts,
               evidence, gate, gate_version, passed_gate_version, digest, created_at)
             VALUES ('{recheck}', '{run}', '{quest}', '{session}', '{submission}', 'PASS', 'confirmed', NULL, '[]',
               '[]', 'g', '1', '1', 'd', '{at}')"
        ),
        format!(
            "INSERT INTO verifier_switches (session_id, verifier, question_index, standing, upheld, overruled,
               missed, cleared, kappa, min_kappa, min_labels, decision_id, created_at)
             VALUES ('{session}', 'v', 0, 'voting', 0, 0, 0, 0, 1.0, 0.5, 10, '{decision}', '{at}')"
        ),
    ] {
        plain_exec(&mut db, &sql).await.expect(&sql);
    }
    let seq = plain_count(&mut db, "SELECT MAX(seq) FROM verifier_switches").await;

    // A fresh open quest, as the insert triggers let one in.
    let open = "state = 'TODO', phase = 'open', tries = 0, lapses = 0, leases = 0, lease_id = NULL,
                result = NULL, submission_id = NULL, receipt = NULL, decided_by = NULL";
    let fresh = || format!("'{}'", uuid::Uuid::now_v7());
    // (table, the existing row, what the replacing copy of it changes): each
    // copy collides with the existing row on the one key named.
    let cases = [
        (
            "quests(id)",
            "quests",
            format!("id = '{quest}'"),
            format!("row_index = 999, {open}"),
        ),
        (
            "quests(session_id, row_index)",
            "quests",
            format!("id = '{quest}'"),
            format!("id = {}, {open}", fresh()),
        ),
        (
            "submissions(id)",
            "submissions",
            format!("id = '{submission}'"),
            "result = '{\"email\":\"evil@x.test\"}'".to_owned(),
        ),
        (
            "review_decisions(id)",
            "review_decisions",
            format!("id = '{decision}'"),
            "decision = 'reject'".to_owned(),
        ),
        (
            "leases(id)",
            "leases",
            format!("id = '{lease}'"),
            "agent = 'evil'".to_owned(),
        ),
        (
            "l2_jobs(id)",
            "l2_jobs",
            format!("id = '{job}'"),
            "question_index = 7, question = 'evil'".to_owned(),
        ),
        (
            "l2_jobs(submission_id, verifier, question_index)",
            "l2_jobs",
            format!("id = '{job}'"),
            format!("id = {}, question = 'evil'", fresh()),
        ),
        (
            "l2_answers(job_id)",
            "l2_answers",
            format!("job_id = '{job}'"),
            "detail = 'evil'".to_owned(),
        ),
        (
            "l2_decisions(submission_id)",
            "l2_decisions",
            format!("submission_id = '{submission}'"),
            "state_after = 'REVIEW'".to_owned(),
        ),
        (
            "recheck_runs(session_id) WHERE finished_at IS NULL",
            "recheck_runs",
            format!("id = '{run}'"),
            format!("id = {}", fresh()),
        ),
        (
            "recheck_runs(id)",
            "recheck_runs",
            format!("id = '{run}'"),
            "finished_at = '2026-01-02T00:00:00.000000Z', total = 9".to_owned(),
        ),
        (
            "rechecks(id)",
            "rechecks",
            format!("id = '{recheck}'"),
            format!("run_id = {}, outcome = 'stale', mark = 'stale'", fresh()),
        ),
        (
            "rechecks(run_id, quest_id)",
            "rechecks",
            format!("id = '{recheck}'"),
            format!("id = {}, outcome = 'stale', mark = 'stale'", fresh()),
        ),
        (
            "verifier_switches(seq)",
            "verifier_switches",
            format!("seq = {seq}"),
            "standing = 'advisory'".to_owned(),
        ),
    ];
    for (key, table, row, change) in &cases {
        for verb in ["INSERT OR REPLACE", "REPLACE"] {
            for sql in [
                "DROP TABLE IF EXISTS temp.kept".to_owned(),
                "DROP TABLE IF EXISTS temp.copy".to_owned(),
                format!("CREATE TEMP TABLE kept AS SELECT * FROM main.{table} WHERE {row}"),
                format!("CREATE TEMP TABLE copy AS SELECT * FROM main.{table} WHERE {row}"),
                format!("UPDATE temp.copy SET {change}"),
            ] {
                plain_exec(&mut db, &sql).await.expect(&sql);
            }
            let count = format!("SELECT COUNT(*) FROM main.{table}");
            let before = plain_count(&mut db, &count).await;
            let sql = format!("{verb} INTO main.{table} SELECT * FROM temp.copy");
            let err = plain_exec(&mut db, &sql)
                .await
                .expect_err(&format!("{key}: {sql}"));
            assert!(
                err.contains("ratchet") && err.contains("replaced"),
                "{key}: {sql}: {err}"
            );
            let gone = plain_count(
                &mut db,
                &format!("SELECT COUNT(*) FROM (SELECT * FROM temp.kept EXCEPT SELECT * FROM main.{table})"),
            )
            .await;
            assert_eq!(gone, 0, "{key}: {sql}: the original row is gone or changed");
            assert_eq!(plain_count(&mut db, &count).await, before, "{key}: {sql}");
        }
    }

    let view = app.quest(&quest).await;
    assert_eq!(
        (view["state"].as_str(), view["result"]["email"].as_str()),
        (Some("PASS"), Some("a@b.test"))
    );
    assert_eq!(view["receipt"], pass["receipt"]);
    assert_counters_match_the_rows(&app, &session).await;
}
