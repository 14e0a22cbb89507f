//! Bad input gets a clear error in the envelope and changes nothing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

async fn session_count(app: &TestApp) -> usize {
    app.get("/v1/sessions", &app.admin)
        .await
        .expect(200)
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn bad_tables_store_nothing_and_name_the_row_and_column() {
    let app = spawn_app().await;
    let cases: Vec<(&str, &[u8], Value, &str, &str)> = vec![
        (
            "a.csv",
            b"company,city\nAcme,Seoul\n,Busan\n",
            contact_config(3),
            "invalid_table",
            "row 3, column `company`",
        ),
        (
            "a.csv",
            b"firm,city\nAcme,Seoul\n",
            contact_config(3),
            "invalid_table",
            "column `company`",
        ),
        (
            "a.csv",
            b"company,city\nAcme,Seoul,extra\n",
            contact_config(3),
            "invalid_table",
            "row 2",
        ),
        (
            "a.csv",
            b"company\n",
            contact_config(3),
            "invalid_table",
            "empty",
        ),
        (
            "a.jsonl",
            b"{\"company\": \"A\"}\nnot json\n",
            contact_config(3),
            "invalid_table",
            "row 2",
        ),
        (
            "a.xlsx",
            b"PK\x03\x04 not really a zip",
            contact_config(3),
            "invalid_table",
            "XLSX",
        ),
        (
            "a.pdf",
            b"%PDF-1.4",
            contact_config(3),
            "unsupported_file",
            ".csv",
        ),
        (
            "a.csv",
            b"company\nAcme\n",
            json!({"gate": {"kind": "nope"}}),
            "invalid_config",
            "unknown gate",
        ),
        (
            "a.csv",
            b"company\nAcme\n",
            json!({"gate": {"kind": "schema", "schema": {"type": 7}}}),
            "invalid_config",
            "config.gate.schema",
        ),
        (
            "a.csv",
            b"company\nAcme\n",
            json!({"gate": {"kind": "schema", "schema": {}}, "lease_seconds": 0}),
            "invalid_config",
            "lease_seconds",
        ),
        (
            "a.csv",
            b"company\nAcme\n",
            json!({"gate": {"kind": "schema", "schema": {}}, "max_tries": "3"}),
            "invalid_config",
            "max_tries",
        ),
    ];
    for (name, bytes, config, code, needle) in cases {
        let answer = app.scan_file(name, bytes.to_vec(), config).await;
        answer.refused(422, code);
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{name}: `{message}` should mention `{needle}`"
        );
    }
    assert_eq!(session_count(&app).await, 0, "a bad file stores nothing");
}

#[tokio::test]
async fn malformed_multipart_and_json_scans_are_refused() {
    let app = spawn_app().await;
    let no_file = reqwest::multipart::Form::new().text("config", contact_config(3).to_string());
    let r = app
        .client
        .post(format!("{}/v1/sessions", app.base))
        .bearer_auth(&app.admin)
        .multipart(no_file)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "missing_file"
    );

    let bad_config = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"company\nA\n".to_vec()).file_name("a.csv"),
        )
        .text("config", "{not json");
    let r = app
        .client
        .post(format!("{}/v1/sessions", app.base))
        .bearer_auth(&app.admin)
        .multipart(bad_config)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "malformed_config"
    );

    app.post(
        "/v1/sessions",
        &app.admin,
        json!({"config": contact_config(3), "items": []}),
    )
    .await
    .refused(422, "invalid_table");
    app.post(
        "/v1/sessions",
        &app.admin,
        json!({"config": contact_config(3), "items": "nope"}),
    )
    .await
    .refused(422, "invalid_body");
    app.post(
        "/v1/sessions",
        &app.admin,
        json!({"config": contact_config(3), "items": [{"company": ""}]}),
    )
    .await
    .refused(422, "invalid_table");
    assert_eq!(session_count(&app).await, 0);
}

#[tokio::test]
async fn malformed_json_wrong_types_and_missing_content_type_are_refused() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let url = format!("{}/v1/quests/{quest}/submit", app.base);

    let r = app
        .client
        .post(&url)
        .bearer_auth(&agent)
        .header("content-type", "application/json")
        .body("{\"lease_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "malformed_body"
    );

    let r = app
        .client
        .post(&url)
        .bearer_auth(&agent)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "unsupported_media_type"
    );

    app.post(
        &format!("/v1/quests/{quest}/submit"),
        &agent,
        json!({"lease_id": 5, "result": {}}),
    )
    .await
    .refused(422, "invalid_body");
    app.post(
        &format!("/v1/quests/{quest}/submit"),
        &agent,
        json!({"lease_id": lease, "result": [1]}),
    )
    .await
    .refused(422, "invalid_body");
    app.post(
        &format!("/v1/quests/{quest}/submit"),
        &agent,
        json!({"lease_id": lease, "result": {}, "extra": 1}),
    )
    .await
    .refused(422, "invalid_body");
    app.post(
        &format!("/v1/quests/{quest}/submit?wait=soon"),
        &agent,
        json!({"lease_id": lease, "result": {}}),
    )
    .await
    .refused(422, "invalid_query");
    app.post(
        &format!("/v1/sessions/{session}/next"),
        &agent,
        json!({"agent": 7}),
    )
    .await
    .refused(422, "invalid_body");

    let view = app.quest(&quest).await;
    assert!(
        view["submissions"].as_array().unwrap().is_empty(),
        "nothing was recorded"
    );
    assert_eq!(
        (view["phase"].as_str(), view["tries"].as_u64()),
        (Some("leased"), Some(0))
    );
}

#[tokio::test]
async fn huge_bodies_are_refused_with_413() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let big = "x".repeat(2 * 1024 * 1024 + 10);
    let answer = app
        .post(
            &format!("/v1/quests/{quest}/submit"),
            &agent,
            json!({"lease_id": lease, "result": {"email": big}}),
        )
        .await;
    answer.refused(413, "too_large");
    assert!(
        app.quest(&quest).await["submissions"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let huge_scan = vec![b'a'; 64 * 1024 * 1024 + 1024];
    let answer = app.scan_file("big.csv", huge_scan, contact_config(3)).await;
    answer.refused(413, "too_large");
    assert_eq!(session_count(&app).await, 1);
}

#[tokio::test]
async fn unknown_ids_routes_and_methods_answer_in_the_envelope() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let missing = uuid::Uuid::new_v4();
    for path in [
        format!("/v1/sessions/{missing}"),
        format!("/v1/sessions/{missing}/status"),
        format!("/v1/sessions/{missing}/source"),
        format!("/v1/sessions/{missing}/export"),
        format!("/v1/sessions/{missing}/events"),
        format!("/v1/quests/{missing}"),
        format!("/v1/submissions/{missing}"),
        format!("/v1/review?session={missing}"),
    ] {
        app.get(&path, &app.admin).await.refused(404, "not_found");
    }
    app.post(&format!("/v1/sessions/{missing}/next"), &agent, json!({}))
        .await
        .refused(404, "not_found");
    app.post(
        &format!("/v1/quests/{missing}/submit"),
        &agent,
        json!({"lease_id": missing, "result": {}}),
    )
    .await
    .refused(404, "not_found");
    app.post(
        &format!("/v1/quests/{missing}/heartbeat"),
        &agent,
        json!({"lease_id": missing}),
    )
    .await
    .refused(404, "not_found");
    app.post(
        &format!("/v1/review/{missing}"),
        &app.admin,
        json!({"decision": "approve"}),
    )
    .await
    .refused(404, "not_found");
    app.call(
        Method::DELETE,
        &format!("/v1/tokens/{missing}"),
        Some(&app.admin),
        None,
    )
    .await
    .refused(404, "not_found");

    app.get("/v1/sessions/not-a-uuid", &app.admin)
        .await
        .refused(400, "invalid_path");
    app.get("/v1/nothing-here", &app.admin)
        .await
        .refused(404, "not_found");
    app.call(Method::PUT, "/v1/sessions", Some(&app.admin), None)
        .await
        .refused(405, "method_not_allowed");
    app.post(
        "/v1/tokens",
        &app.admin,
        json!({"name": "x", "role": "root"}),
    )
    .await
    .refused(422, "invalid_body");
    app.post(
        "/v1/tokens",
        &app.admin,
        json!({"name": " ", "role": "agent"}),
    )
    .await
    .refused(422, "invalid_name");
    app.post(
        &format!("/v1/review/{missing}"),
        &app.admin,
        json!({"decision": "maybe"}),
    )
    .await
    .refused(422, "invalid_body");
}

#[tokio::test]
async fn agent_names_are_bounded_and_a_next_body_must_be_json() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let long = "a".repeat(300);
    app.post(
        &format!("/v1/sessions/{session}/next"),
        &agent,
        json!({"agent": long}),
    )
    .await
    .refused(422, "invalid_agent");
    let r = app
        .client
        .post(format!("{}/v1/sessions/{session}/next", app.base))
        .bearer_auth(&agent)
        .body("{\"agent\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        415,
        "a body without its content type is not silently ignored"
    );
    assert_eq!(
        app.status(&session).await["leased"],
        0,
        "nothing was leased"
    );
}

#[tokio::test]
async fn next_works_with_an_empty_body() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let answer = app
        .call(
            Method::POST,
            &format!("/v1/sessions/{session}/next"),
            Some(&agent),
            None,
        )
        .await;
    assert_eq!(answer.expect(200)["status"], "assigned");
}
