//! The auth matrix: each role against each endpoint family.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

struct Call {
    family: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    /// Roles that may make this call.
    allowed: &'static [&'static str],
}

const ALL: &[&str] = &["admin", "agent", "reviewer", "viewer"];

#[tokio::test]
async fn every_role_is_held_to_its_permissions() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(3)).await;
    let quest = app
        .get(&format!("/v1/review?session={session}"), &app.admin)
        .await; // warm-up read
    assert_eq!(quest.status, 200);
    let any = uuid::Uuid::new_v4();
    let calls = vec![
        Call {
            family: "read sessions",
            method: Method::GET,
            path: "/v1/sessions".into(),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "read session",
            method: Method::GET,
            path: format!("/v1/sessions/{session}"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "read quest",
            method: Method::GET,
            path: format!("/v1/quests/{any}"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "read submission",
            method: Method::GET,
            path: format!("/v1/submissions/{any}"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "read status",
            method: Method::GET,
            path: format!("/v1/sessions/{session}/status"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "read source",
            method: Method::GET,
            path: format!("/v1/sessions/{session}/source"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "export",
            method: Method::GET,
            path: format!("/v1/sessions/{session}/export"),
            body: None,
            allowed: ALL,
        },
        Call {
            family: "scan",
            method: Method::POST,
            path: "/v1/sessions".into(),
            body: Some(json!({"config": contact_config(3), "items": companies(1)})),
            allowed: &["admin"],
        },
        Call {
            family: "next",
            method: Method::POST,
            path: format!("/v1/sessions/{session}/next"),
            body: Some(json!({})),
            allowed: &["admin", "agent"],
        },
        Call {
            family: "submit",
            method: Method::POST,
            path: format!("/v1/quests/{any}/submit"),
            body: Some(json!({"lease_id": any, "result": {}})),
            allowed: &["admin", "agent"],
        },
        Call {
            family: "heartbeat",
            method: Method::POST,
            path: format!("/v1/quests/{any}/heartbeat"),
            body: Some(json!({"lease_id": any})),
            allowed: &["admin", "agent"],
        },
        Call {
            family: "release",
            method: Method::POST,
            path: format!("/v1/quests/{any}/release"),
            body: Some(json!({"lease_id": any})),
            allowed: &["admin", "agent"],
        },
        Call {
            family: "review list",
            method: Method::GET,
            path: "/v1/review".into(),
            body: None,
            allowed: &["admin", "reviewer"],
        },
        Call {
            family: "review claim",
            method: Method::POST,
            path: format!("/v1/review/{any}/claim"),
            body: Some(json!({})),
            allowed: &["admin", "reviewer"],
        },
        Call {
            family: "review decide",
            method: Method::POST,
            path: format!("/v1/review/{any}"),
            body: Some(json!({"decision": "approve"})),
            allowed: &["admin", "reviewer"],
        },
        Call {
            family: "tokens list",
            method: Method::GET,
            path: "/v1/tokens".into(),
            body: None,
            allowed: &["admin"],
        },
        Call {
            family: "tokens create",
            method: Method::POST,
            path: "/v1/tokens".into(),
            body: Some(json!({"name": "t", "role": "viewer"})),
            allowed: &["admin"],
        },
        Call {
            family: "tokens revoke",
            method: Method::DELETE,
            path: format!("/v1/tokens/{any}"),
            body: None,
            allowed: &["admin"],
        },
    ];
    let mut tokens = vec![("admin", app.admin.clone())];
    for role in ["agent", "reviewer", "viewer"] {
        tokens.push((role, app.token(role, &format!("{role}-1")).await));
    }
    for call in &calls {
        for (role, token) in &tokens {
            let answer = app
                .call(
                    call.method.clone(),
                    &call.path,
                    Some(token),
                    call.body.clone(),
                )
                .await;
            if call.allowed.contains(role) {
                let status = answer.status.as_u16();
                assert!(
                    ![401, 403].contains(&status) && status < 500,
                    "{role} may use {}: {} {}",
                    call.family,
                    answer.status,
                    answer.body
                );
            } else {
                answer.refused(403, "forbidden");
            }
        }
        app.call(call.method.clone(), &call.path, None, call.body.clone())
            .await
            .refused(401, "unauthorized");
        app.call(
            call.method.clone(),
            &call.path,
            Some("qst_not_a_real_token"),
            call.body.clone(),
        )
        .await
        .refused(401, "unauthorized");
    }
}

#[tokio::test]
async fn a_revoked_token_is_refused_and_secrets_are_never_listed() {
    let app = spawn_app().await;
    let created = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "bot", "role": "agent"}),
        )
        .await
        .expect(201);
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("qst_") && secret.len() > 60);
    assert_eq!(app.get("/v1/sessions", secret).await.status, 200);

    let listed = app.get("/v1/tokens", &app.admin).await.expect(200);
    let text = listed.to_string();
    assert!(
        !text.contains(secret) && !text.contains("hash"),
        "no secret or hash is ever listed: {text}"
    );
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "the admin token and the new one"
    );

    let id = created["id"].as_str().unwrap();
    let revoked = app
        .call(
            Method::DELETE,
            &format!("/v1/tokens/{id}"),
            Some(&app.admin),
            None,
        )
        .await
        .expect(200);
    assert!(revoked["revoked_at"].is_string());
    app.get("/v1/sessions", secret)
        .await
        .refused(401, "unauthorized");
}

#[tokio::test]
async fn health_readiness_metrics_and_docs_need_no_token() {
    let app = spawn_app().await;
    assert_eq!(
        app.call(Method::GET, "/healthz", None, None)
            .await
            .expect(200)["status"],
        "ok"
    );
    assert_eq!(
        app.call(Method::GET, "/readyz", None, None)
            .await
            .expect(200)["status"],
        "ready"
    );
    let metrics = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let docs = app
        .client
        .get(format!("{}/docs/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(docs.status(), 200);
    let html = docs.text().await.unwrap();
    assert!(
        !html.contains("https://"),
        "the docs page loads nothing from the internet"
    );
    let doc = app
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .expect(200);
    assert_eq!(doc["openapi"], "3.1.0");
    let r = app
        .client
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers().contains_key("x-request-id"),
        "every response carries a request id"
    );
}

#[tokio::test]
async fn the_admin_token_is_generated_into_the_data_dir_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = quest::config::Config::with_data_dir(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    let app = quest::app::App::build(config.clone()).await.unwrap();
    let path = dir.path().join("admin.token");
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(Some(written.as_str()), app.admin_token());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    drop(app);
    let again = quest::app::App::build(config).await.unwrap();
    assert_eq!(
        again.admin_token(),
        Some(written.as_str()),
        "a restart reads the same token"
    );
}

#[tokio::test]
async fn the_bootstrap_admin_cannot_be_locked_out_and_rotates_with_its_secret() {
    let app = spawn_app().await;
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    let bootstrap = tokens[0]["id"].as_str().unwrap().to_owned();
    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{bootstrap}"),
        Some(&app.admin),
        None,
    )
    .await
    .refused(409, "bootstrap_token");
    app.post(
        "/v1/tokens",
        &app.admin,
        json!({"name": "admin", "role": "viewer"}),
    )
    .await
    .refused(409, "name_taken");
    app.token("agent", "bot").await;
    app.post(
        "/v1/tokens",
        &app.admin,
        json!({"name": "bot", "role": "agent"}),
    )
    .await
    .refused(409, "name_taken");

    // A restart with another secret retires the old one.
    let dir = app.stop().await;
    let mut config = quest::config::Config::with_data_dir(dir.path());
    config.database_url = database_url_of(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.admin_token = Some("rotated-secret".into());
    let rotated = quest::app::App::build(config).await.unwrap();
    let base = format!("http://{}", rotated.local_addr());
    tokio::spawn(rotated.run(std::future::pending()));
    let client = reqwest::Client::new();
    let status = |token: &'static str| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            client
                .get(format!("{base}/v1/tokens"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(status("rotated-secret").await, 200);
    assert_eq!(
        status("test-admin-token").await,
        401,
        "the old admin secret no longer works"
    );
}

#[tokio::test]
async fn the_role_is_checked_before_the_body_is_read() {
    let app = spawn_app().await;
    let viewer = app.token("viewer", "eyes").await;
    let any = uuid::Uuid::new_v4();
    let r = app
        .client
        .post(format!("{}/v1/quests/{any}/submit", app.base))
        .bearer_auth(&viewer)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = app
        .client
        .post(format!("{}/v1/sessions", app.base))
        .bearer_auth(&viewer)
        .header("content-type", "application/json")
        .body(vec![b'x'; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        403,
        "a viewer's upload is refused before it is parsed"
    );
}
