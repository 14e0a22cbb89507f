//! The server's log as a person keeps it (issue 20, point 7): plain text in a
//! file (no colour codes), start-up naming the console and the API docs, one
//! WARN line for a server error, INFO only for a slow request, and the rest of
//! the access log at DEBUG, out of the default log.

use serde_json::json;

use crate::helpers::{companies, contact_config};
use crate::server::{ADMIN, Server, call};

async fn get(base: &str, path: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_is_plain_names_the_console_and_keeps_only_failures_and_slow_requests() {
    let dir = tempfile::tempdir().unwrap();
    // QUEST_LOG empty is unset: the default filter.
    let mut server = Server::start_with_env(dir.path(), None, &[("QUEST_LOG", "")]).await;
    let base = server.base.clone();
    assert_eq!(get(&base, "/healthz").await, 200);
    assert_eq!(get(&base, "/v1/no-such-route").await, 404);
    let client = reqwest::Client::new();
    let (status, session) = call(
        &client,
        &base,
        "/v1/sessions",
        json!({"config": contact_config(3), "items": companies(2)}),
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{session}");
    // A server fault: the XLSX writer's directory goes away under the server.
    std::fs::remove_dir_all(dir.path().join("exports")).unwrap();
    let id = session["id"].as_str().unwrap();
    assert_eq!(
        get(&base, &format!("/v1/sessions/{id}/export?format=xlsx")).await,
        500
    );
    server.kill().await;

    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(!log.contains('\x1b'), "no colour codes in a file: {log:?}");
    assert!(
        log.contains(&format!(
            "the console at {base}/ui, the API docs at {base}/docs"
        )),
        "{log}"
    );
    let requests: Vec<&str> = log.lines().filter(|l| l.contains("uri=")).collect();
    assert_eq!(
        requests.len(),
        1,
        "only the server error is logged: {requests:#?}"
    );
    assert!(
        requests[0].contains("WARN") && requests[0].contains("status=500"),
        "{}",
        requests[0]
    );

    let dir = tempfile::tempdir().unwrap();
    let slow = [("QUEST_LOG", ""), ("QUEST_SLOW_MS", "0")];
    let mut server = Server::start_with_env(dir.path(), None, &slow).await;
    assert_eq!(get(&server.base, "/healthz").await, 200);
    // An event stream is never slow, however long it stays open.
    let (status, session) = call(
        &client,
        &server.base,
        "/v1/sessions",
        json!({"config": contact_config(3), "items": companies(1)}),
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap();
    let stream = client
        .get(format!("{}/v1/sessions/{id}/events", server.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(stream);
    server.kill().await;
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains(" INFO ")
            && l.contains("slow request")
            && l.contains("uri=/healthz")),
        "past QUEST_SLOW_MS a request is INFO: {log}"
    );
    assert!(
        !log.lines().any(|l| l.contains("/events")),
        "the event stream is not logged as slow: {log}"
    );
}
