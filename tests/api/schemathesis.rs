//! The OpenAPI document is exact: schemathesis, run against a live server's
//! `/openapi.json`, must find no status code and no content type that the
//! document does not list (and no server error). Skips with a message when
//! schemathesis is not installed (`pip install schemathesis`); with `CI=true`
//! that is a failure.

use std::process::Stdio;

use serde_json::json;

use crate::helpers::*;

/// The schemathesis command, or `None` after saying why the test is skipped.
async fn schemathesis_or_skip() -> Option<&'static str> {
    let found = tokio::process::Command::new("schemathesis")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success());
    if found {
        return Some("schemathesis");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "schemathesis is not installed, and CI=true makes that a failure; install it with `pip install schemathesis`"
    );
    eprintln!(
        "SKIPPED the_openapi_document_lists_every_status_and_content_type_the_server_sends: \
         schemathesis is not installed (pip install schemathesis); with CI=true this is a failure"
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_status_and_content_type_the_server_sends() {
    let Some(schemathesis) = schemathesis_or_skip().await else {
        return;
    };
    let app = spawn_app().await;
    // A session with a decided quest, so that export, source and status answer
    // with their real bodies and media types, not only with 404.
    let session = app
        .scan_file(
            "firms.csv",
            b"company,city\nAcme,Seoul\nBeta,Busan\n".to_vec(),
            contact_config(3),
        )
        .await
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let agent = app.token("agent", "fuzz-agent").await;
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &q, &l, json!({"email": "info@acme.test"}))
        .await
        .expect(200);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            r#"headers = {{ Authorization = "Bearer {admin}" }}
request-timeout = 20

[generation]
max-examples = 15
database = "none"

[[operations]]
include-path-regex = '^/v1/sessions/\{{id\}}/(export|source|status)$'
parameters = {{ id = "{session}" }}

# An event stream stays open until the server stops: no request ever ends.
[[operations]]
include-name = "GET /v1/sessions/{{id}}/events"
enabled = false
"#,
            admin = app.admin,
        ),
    )
    .unwrap();
    let output = tokio::process::Command::new(schemathesis)
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/openapi.json", app.base)])
        .args([
            "--checks",
            "status_code_conformance,content_type_conformance,response_schema_conformance,not_a_server_error",
            "--generation-deterministic",
            "--phases",
            "coverage,fuzzing",
            "--no-color",
        ])
        .current_dir(dir.path())
        .output()
        .await
        .expect("schemathesis runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found answers the document does not list:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("passed"), "{report}");
}
