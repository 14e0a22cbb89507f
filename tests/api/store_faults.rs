//! Store errors met by the gate runner, classified by the workers' one retry
//! policy: a verdict the database refuses for good ends in REVIEW naming
//! the cause after one cleaned retry; a transient failure is waited out
//! without holding a worker and ends in the right verdict once the database
//! takes writes again. The refusals are the database's own (a trigger
//! installed by the test), so nothing depends on what the gate wrote.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Connection;

use crate::helpers::*;

/// A server whose `slow` command gate passes every result after a pause,
/// with `workers` gate workers.
async fn spawn_slow(workers: usize) -> (TestApp, tempfile::TempDir) {
    spawn_app_with_slow_gate_tuned(|c| c.gate_workers = workers).await
}

/// Runs raw SQL on the server's own database, beside the server.
async fn sql(app: &TestApp, statements: &[&str]) {
    match &app.database_url {
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            for s in statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(*s))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
        None => {
            let url = format!(
                "sqlite://{}",
                app.data_dir.path().join("quest.db").display()
            );
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            for s in statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(*s))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Leases a quest of a new `slow` session and submits to it; the gate
/// runner decides it (the submit may wait for that verdict).
async fn submit_queued(app: &TestApp, agent: &str) -> (String, String) {
    let session = app.scan(slow_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(agent, &session, "a").await);
    let answer = app
        .submit(agent, &quest, &lease, json!({"email": "info@a.test"}))
        .await;
    assert!(
        matches!(answer.status.as_u16(), 200 | 202),
        "{:?}",
        answer.body
    );
    (session, quest)
}

fn last_facts(view: &Value) -> Vec<Value> {
    let submissions = view["submissions"].as_array().unwrap();
    submissions.last().unwrap()["facts"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_verdict_the_database_refuses_for_good_ends_in_review_naming_the_cause_after_one_cleaned_retry()
 {
    let (app, _gate) = spawn_slow(2).await;
    let postgres = app.database_url.is_some();
    if postgres {
        // SQLSTATE 22023 (invalid_parameter_value), class 22: permanent. The
        // sequence counts the refusals, since it is not rolled back with them.
        sql(
            &app,
            &[
                "CREATE SEQUENCE refusals",
                "CREATE FUNCTION refuse_pass() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN PERFORM nextval('refusals');
                 RAISE EXCEPTION 'refused by the test' USING ERRCODE = '22023'; END $$",
                "CREATE TRIGGER refuse_pass BEFORE UPDATE ON submissions FOR EACH ROW
               WHEN (NEW.verdict = 'PASS') EXECUTE FUNCTION refuse_pass()",
            ],
        )
        .await;
    } else {
        // SQLite's triggers refuse with SQLITE_CONSTRAINT: a row the ratchet refused.
        sql(
            &app,
            &[
                "CREATE TRIGGER refuse_pass BEFORE UPDATE OF verdict ON submissions
               WHEN NEW.verdict = 'PASS' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
            ],
        )
        .await;
    }
    let agent = app.token("agent", "bot").await;
    let (_, quest) = submit_queued(&app, &agent).await;
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "REVIEW", "{view}");
    let facts = last_facts(&view);
    assert_eq!(facts.len(), 1, "only the cause is stored: {facts:?}");
    assert_eq!(facts[0]["check"], "store");
    let actual = facts[0]["actual"].as_str().unwrap();
    let cause = if postgres {
        "SQLSTATE 22023"
    } else {
        "illegal_transition"
    };
    assert!(actual.contains(cause), "{actual}");
    assert_eq!(view["tries"], 0, "a REVIEW costs no try: {view}");
    if let Some(url) = &app.database_url {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        let refused: i64 = sqlx::query_scalar("SELECT last_value FROM refusals")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            refused, 2,
            "the verdict, then once cleaned; then the REVIEW"
        );
    }
}

#[tokio::test]
async fn a_check_waiting_out_a_store_failure_holds_no_worker_and_ends_in_its_verdict_once_the_database_is_back()
 {
    // SQLite's triggers can only refuse for good; a transient failure of
    // one session's writes alone is simulated on PostgreSQL.
    if !on_postgres() {
        eprintln!(
            "SKIPPED on SQLite: a transient failure of one session's writes needs PostgreSQL"
        );
        return;
    }
    let (app, _gate) = spawn_slow(1).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(slow_config(3), companies(1)).await;
    // 55P03 (lock_not_available): transient, as is everything outside
    // class 22 and 54000. Only this session's verdicts meet it.
    sql(
        &app,
        &[
            "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'the database is away' USING ERRCODE = '55P03'; END $$",
            &format!(
                "CREATE TRIGGER stall BEFORE UPDATE ON submissions FOR EACH ROW
                 WHEN (NEW.session_id = '{session}' AND NEW.verdict <> 'PENDING')
                 EXECUTE FUNCTION stall()"
            ),
        ],
    )
    .await;
    let (stalled, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .submit(&agent, &stalled, &lease, json!({"email": "info@a.test"}))
        .await
        .expect(202);
    assert_eq!(answer["verdict"], "PENDING", "stalled: {answer}");
    // Let the stalled check reach its back-off.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, other) = submit_queued(&app, &agent).await;
    let view = app.settled(&other).await;
    assert_eq!(
        view["state"], "PASS",
        "another session's check ran on the one worker: {view}"
    );
    assert_eq!(
        app.quest(&stalled).await["state"],
        "TODO",
        "the stalled check is still waiting"
    );
    sql(&app, &["DROP TRIGGER stall ON submissions"]).await;
    let view = app.settled(&stalled).await;
    assert_eq!(
        view["state"], "PASS",
        "the outage turned no good work into REVIEW: {view}"
    );
}
