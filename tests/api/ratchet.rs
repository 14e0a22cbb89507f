//! The ratchet is a property of the database: raw SQL cannot unlock a decided quest.

use serde_json::json;
use sqlx::{Connection, SqliteConnection};

use crate::helpers::*;

async fn raw(app: &TestApp) -> SqliteConnection {
    let url = format!(
        "sqlite://{}",
        app.data_dir.path().join("quest.db").display()
    );
    SqliteConnection::connect(&url)
        .await
        .expect("a raw connection to the database")
}

#[tokio::test]
async fn raw_sql_cannot_reopen_a_passed_quest_or_rewrite_history() {
    let app = spawn_app().await;
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
        format!("UPDATE quests SET result = '{{\"email\":\"evil@x.test\"}}' WHERE id = '{quest}'"),
        format!("UPDATE quests SET receipt = 'sha256:forged' WHERE id = '{quest}'"),
        format!("DELETE FROM quests WHERE id = '{quest}'"),
        format!(
            "UPDATE submissions SET verdict = 'FAIL' WHERE id = '{}'",
            pass["submission_id"].as_str().unwrap()
        ),
        format!("DELETE FROM submissions WHERE quest_id = '{quest}'"),
    ];
    for sql in refused {
        let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut db)
            .await
            .expect_err(&sql);
        assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
    }
    let view = app.quest(&quest).await;
    assert_eq!(
        (view["state"].as_str(), view["result"]["email"].as_str()),
        (Some("PASS"), Some("a@b.test"))
    );
    assert_eq!(view["receipt"], pass["receipt"]);

    let (other, _) = assigned(&app.next(&agent, &session, "a").await);
    let err = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE quests SET tries = tries - 1 WHERE id = '{quest}' OR id = '{other}'"
    )))
    .execute(&mut db)
    .await
    .expect_err("tries never decrease");
    assert!(err.to_string().contains("ratchet"), "{err}");
    let err = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE quests SET state = 'SOMETHING' WHERE id = '{other}'"
    )))
    .execute(&mut db)
    .await
    .expect_err("states are a closed set");
    assert!(err.to_string().contains("CHECK"), "{err}");
}

#[tokio::test]
async fn a_review_quest_may_only_become_pass_or_done() {
    let app = spawn_app().await;
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
    let err = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE quests SET state = 'TODO', phase = 'open' WHERE id = '{quest}'"
    )))
    .execute(&mut db)
    .await
    .expect_err("REVIEW never returns to TODO");
    assert!(err.to_string().contains("ratchet"), "{err}");
    assert_eq!(app.status(&session).await["review"], 1);
}

#[tokio::test]
async fn replace_cannot_smuggle_a_decided_quest_or_verdict_back() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let pass = app
        .submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    let submission = pass["submission_id"].as_str().unwrap();
    let mut db = raw(&app).await;
    let refused = [
        format!(
            "INSERT OR REPLACE INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
             VALUES ('{quest}', '{session}', 0, 'k', '{{}}', 'TODO', 'open', 'now')"
        ),
        format!(
            "REPLACE INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict, created_at)
             VALUES ('{submission}', '{quest}', '{session}', '{lease}', 'x', '{{}}', 'h', 'FAIL', 'now')"
        ),
    ];
    for sql in refused {
        let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut db)
            .await
            .expect_err(&sql);
        assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
    }
    assert_eq!(app.quest(&quest).await["state"], "PASS");
    assert_sums(&app.status(&session).await);
}

#[tokio::test]
async fn phases_lapses_and_a_result_under_review_are_guarded_too() {
    let app = spawn_app().await;
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
        let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut db)
            .await
            .expect_err(sql);
        assert!(err.to_string().contains("ratchet"), "{sql}: {err}");
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE quests SET lapses = 2 WHERE id = '{q2}'"
    )))
    .execute(&mut db)
    .await
    .unwrap();
    let err = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE quests SET lapses = 1 WHERE id = '{q2}'"
    )))
    .execute(&mut db)
    .await
    .expect_err("lapses never decrease");
    assert!(err.to_string().contains("ratchet"), "{err}");
}

/// The running counters must equal a count over the quests themselves.
pub async fn assert_counters_match_the_rows(app: &TestApp, session: &str) {
    let mut db = raw(app).await;
    let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT state || COALESCE('/' || phase, ''), COUNT(*) FROM quests WHERE session_id = '{session}' GROUP BY 1"
    )))
    .fetch_all(&mut db)
    .await
    .unwrap();
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
async fn refused(db: &mut SqliteConnection, sql: String, why: &str) {
    let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
        .execute(&mut *db)
        .await
        .expect_err(&sql);
    assert!(err.to_string().contains(why), "{sql}: {err}");
}

#[tokio::test]
async fn every_verdict_needs_its_proof_in_the_database() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    let (leased, lease) = assigned(&app.next(&agent, &session, "a").await);
    let (_, _) = assigned(&app.next(&agent, &session, "b").await);
    let (review, review_lease) = assigned(&app.next(&agent, &session, "c").await);
    app.submit(&agent, &review, &review_lease, json!({"email": "a@b.test", "confidence": "low"}))
        .await
        .expect(200);
    let mut db = raw(&app).await;

    // A verdict straight from `leased` exists only with its decided submission.
    refused(
        &mut db,
        format!("UPDATE quests SET state = 'PASS', phase = NULL, lease_id = NULL WHERE id = '{leased}'"),
        "needs its decided submission",
    )
    .await;
    // Tries never exceed the session's limit, not even by raw SQL on a TODO quest.
    refused(&mut db, format!("UPDATE quests SET tries = 99 WHERE id = '{leased}'"), "max_tries").await;
    // REVIEW ends only by a recorded review decision.
    refused(
        &mut db,
        format!("UPDATE quests SET state = 'PASS', decided_by = 'gate' WHERE id = '{review}'"),
        "recorded review decision",
    )
    .await;
    // A quest cannot be moved onto another's row: REPLACE would delete that one silently.
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM quests").fetch_one(&mut db).await.unwrap();
    refused(
        &mut db,
        format!("UPDATE OR REPLACE quests SET row_index = 0 WHERE id = '{review}'"),
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
    let after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM quests").fetch_one(&mut db).await.unwrap();
    assert_eq!(before, after, "no quest was deleted or smuggled in");

    // In a session with AI verifiers, a PASS goes through them, even with a
    // decided submission in place.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE sessions SET config = json_set(config, '$.verify', json('{{\"verifiers\": [\"x\"]}}')) WHERE id = '{session}'"
    )))
    .execute(&mut db)
    .await
    .unwrap();
    let submission = uuid::Uuid::now_v7();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, verdict,
           state_after, tries_after, created_at, decided_at)
         VALUES ('{submission}', '{leased}', '{session}', '{lease}', '{}/a', '{{}}', 'h', 'PASS', 'PASS', 0,
           '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
        uuid::Uuid::now_v7()
    )))
    .execute(&mut db)
    .await
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
    assert_eq!((view["state"].as_str(), view["phase"].as_str()), (Some("TODO"), Some("leased")));
}
