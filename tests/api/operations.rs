//! Operating the embedded database: backups while the server serves.

use serde_json::json;
use sqlx::Connection;

use crate::helpers::*;

#[tokio::test]
async fn a_backup_is_a_consistent_copy_made_while_agents_keep_working() {
    let app = spawn_app().await;
    if app.database_url.is_some() {
        // The data lives in PostgreSQL: the server says which tool backs it up.
        let admin = app.admin.clone();
        let refused = app.post("/v1/backup", &admin, json!({})).await;
        refused.refused(409, "backup_unsupported");
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("pg_dump")
        );
        return;
    }
    let agent = app.token("agent", "bot").await;
    let viewer = app.token("viewer", "watcher").await;
    let session = app.scan(contact_config(3), companies(40)).await;
    let work = async {
        for _ in 0..40 {
            let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
            app.submit(&agent, &quest, &lease, json!({"email": "a@b.test"}))
                .await
                .expect(200);
        }
    };
    let backup = async {
        let response = app
            .client
            .post(format!("{}/v1/backup", app.base))
            .bearer_auth(&app.admin)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "application/vnd.sqlite3"
        );
        response.bytes().await.unwrap()
    };
    let ((), bytes) = tokio::join!(work, backup);
    assert!(bytes.starts_with(b"SQLite format 3\0"));
    let copy = tempfile::tempdir().unwrap();
    let path = copy.path().join("copy.db");
    std::fs::write(&path, &bytes).unwrap();
    let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(check, "ok");
    // One snapshot: the counts kept by triggers agree with the quests in it.
    let (quests, counted, passed): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM quests),
                (SELECT SUM(n) FROM session_counts WHERE bucket <> 'submissions'),
                (SELECT COUNT(*) FROM quests WHERE state = 'PASS')",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!((quests, counted), (40, 40));
    let pass_count: i64 =
        sqlx::query_scalar("SELECT COALESCE(SUM(n), 0) FROM session_counts WHERE bucket = 'PASS'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(passed, pass_count);

    app.post("/v1/backup", &viewer, json!({}))
        .await
        .refused(403, "forbidden");
    assert_eq!(
        app.status(&session).await["pass"],
        40,
        "the server kept serving"
    );
}
