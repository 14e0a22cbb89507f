//! Choosing the backend at start: a PostgreSQL URL that cannot be used stops
//! `quest serve` with one line that says why, its secrets hidden, never a
//! panic or a retry loop in silence.

use std::time::Duration;

use crate::helpers::quest_binary;

/// Runs `quest serve --database-url url` and returns its exit code and what
/// it printed on stderr.
async fn serve_on(url: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = quest_binary();
    command
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            url,
            "--data-dir",
        ])
        .arg(dir.path())
        .env("QUEST_ADMIN_TOKEN", "admin")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("quest serve gives up at start")
        .expect("the quest binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A loopback port where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_database_that_cannot_be_used_is_one_line_at_start_with_its_password_hidden() {
    let port = closed_port();
    let cases = [
        (
            format!("postgres://quest:s3cret@127.0.0.1:{port}/quest"),
            "cannot reach the database: Connection refused",
        ),
        (
            "postgres://quest:s3cret@127.0.0.1:5432/quest?sslmode=bogus".to_owned(),
            "bad database URL",
        ),
    ];
    for (url, why) in cases {
        let (code, stderr) = serve_on(&url).await;
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(code, Some(1), "{url}: {stderr}");
        assert_eq!(lines.len(), 1, "one line for {url}: {stderr}");
        assert!(
            lines[0].starts_with(
                "quest: cannot open the PostgreSQL database postgres://***@127.0.0.1:"
            ) && lines[0].contains(why),
            "{url}: {stderr}"
        );
        assert!(
            !stderr.contains("s3cret"),
            "the password stays hidden: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_database_that_accepts_and_never_answers_is_given_up_after_ten_seconds() {
    // A listener that takes the connection and says nothing, like a host
    // behind a firewall that drops what it is sent.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let (code, stderr) = serve_on(&format!("postgres://quest@127.0.0.1:{port}/quest")).await;
    held.abort();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the database: no answer within 10 seconds"),
        "{stderr}"
    );
}
