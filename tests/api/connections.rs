//! The server's accept loop: sockets that never send a request cannot hold
//! the server, and past its cap it stops accepting instead of running out of
//! descriptors. The real binary, so that its own listener and flags are used.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::server::{ADMIN, Server};

/// Reads until the server closes the socket; false if it is still open after `within`.
async fn closed_by_server(socket: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read_to_end).await.is_ok()
}

#[tokio::test]
async fn half_open_sockets_past_the_cap_are_closed_and_an_admin_request_is_still_answered() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_env(
        dir.path(),
        None,
        &[
            ("QUEST_MAX_CONNECTIONS", "100"),
            ("QUEST_HEADER_READ_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut sockets = Vec::new();
    for _ in 0..150 {
        sockets.push(
            TcpStream::connect(&address)
                .await
                .expect("the kernel accepts it"),
        );
    }
    // Half of them start a request and never finish its headers.
    for socket in sockets.iter_mut().step_by(2) {
        socket
            .write_all(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
    }

    let answer = reqwest::Client::new()
        .get(format!("{}/v1/sessions", server.base))
        .bearer_auth(ADMIN)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the admin's request is answered once slots free up");
    assert_eq!(answer.status(), 200);

    for (i, socket) in sockets.iter_mut().enumerate() {
        assert!(
            closed_by_server(socket, Duration::from_secs(30)).await,
            "socket {i} of 150, which sent no whole request, is closed by the server"
        );
    }
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the cap (--max-connections) is 100"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning a minute names the cap and the count:\n{log}"
    );
    assert!(warnings[0].contains("100 connections are open"), "{log}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_env(
        dir.path(),
        None,
        &[("QUEST_HEADER_READ_TIMEOUT_SECONDS", "1")],
    )
    .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = socket.read(&mut answer).await.unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );
    assert!(
        closed_by_server(&mut socket, Duration::from_secs(30)).await,
        "the server closes a connection that stays idle after its answer"
    );
}
