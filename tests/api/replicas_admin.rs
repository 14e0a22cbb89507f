//! Replicas of one PostgreSQL database started without a shared
//! QUEST_ADMIN_TOKEN (issue 20, point 5): the first makes the admin token,
//! the others neither revoke it nor write one of their own, and a replica that
//! cannot bind its port changes no token. Skipped without PostgreSQL (a
//! failure with `CI=true`).

use quest::app::App;
use quest::config::Config;
use reqwest::StatusCode;

use crate::postgres::TestDatabase;

fn replica(db: &TestDatabase, dir: &std::path::Path) -> Config {
    let mut config = Config::with_data_dir(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.database_url = Some(db.url.clone());
    config
}

/// What `token` is answered on `GET /v1/tokens` by the server at `base`.
async fn tokens_answer(base: &str, token: &str) -> StatusCode {
    reqwest::Client::new()
        .get(format!("{base}/v1/tokens"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_without_a_shared_admin_token_leaves_the_first_ones_valid() {
    let test = "a_second_replica_without_a_shared_admin_token_leaves_the_first_ones_valid";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let (one, two, three) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let first = App::build(replica(&db, one.path())).await.unwrap();
    let token = first
        .admin_token()
        .expect("the first replica makes the token")
        .to_owned();
    assert_eq!(
        std::fs::read_to_string(one.path().join("admin.token")).unwrap(),
        token
    );
    let base = format!("http://{}", first.local_addr());
    tokio::spawn(first.run(std::future::pending()));
    assert_eq!(tokens_answer(&base, &token).await, StatusCode::OK);

    // A replica that cannot bind (the first one's port) fails before any
    // token, even one it was given, which would otherwise replace the first's.
    let mut taken = replica(&db, three.path());
    taken.bind = base.trim_start_matches("http://").parse().unwrap();
    taken.admin_token = Some("never-made-live".into());
    assert!(App::build(taken).await.is_err(), "the port is taken");
    assert!(!three.path().join("admin.token").exists());
    assert_eq!(tokens_answer(&base, &token).await, StatusCode::OK);
    assert_eq!(
        tokens_answer(&base, "never-made-live").await,
        StatusCode::UNAUTHORIZED
    );

    // A second replica on its own data dir: no token of its own, the first's stays.
    let second = App::build(replica(&db, two.path())).await.unwrap();
    assert_eq!(second.admin_token(), None);
    assert!(
        !two.path().join("admin.token").exists(),
        "it writes no token file"
    );
    let other = format!("http://{}", second.local_addr());
    tokio::spawn(second.run(std::future::pending()));
    for server in [&base, &other] {
        assert_eq!(
            tokens_answer(server, &token).await,
            StatusCode::OK,
            "the first replica's token is valid at {server}"
        );
    }

    // A configured token still rotates the bootstrap admin's, on any replica.
    let mut rotating = replica(&db, three.path());
    rotating.admin_token = Some("rotated-admin-token".into());
    let rotated = App::build(rotating).await.unwrap();
    assert_eq!(rotated.admin_token(), Some("rotated-admin-token"));
    // Asked where no earlier answer is remembered (replicas cache token lookups briefly).
    let fresh = format!("http://{}", rotated.local_addr());
    tokio::spawn(rotated.run(std::future::pending()));
    assert_eq!(
        tokens_answer(&fresh, &token).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        tokens_answer(&fresh, "rotated-admin-token").await,
        StatusCode::OK
    );
}
