//! `quest mcp` driven by the official MCP Python SDK (PyPI `mcp`, installed
//! by `.ci/run`): tests/api/python/mcp_sdk.py against a real server. The SDK
//! validates each answer's structuredContent against the tool's outputSchema.
//! Skipped without the SDK (a failure with `CI=true`).

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_python_sdk_works_a_quest_through_quest_mcp() {
    let has_sdk = tokio::process::Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        let why = "the MCP Python SDK is not installed (python3 -m pip install mcp)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let state = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/api/python/mcp_sdk.py");
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .env("QUEST_BIN", env!("CARGO_BIN_EXE_quest"))
        .env("QUEST_URL", &app.base)
        .env("QUEST_TOKEN", &token)
        .env("QUEST_SESSION", &session)
        .env("QUEST_AGENT", "python-sdk")
        .env("QUEST_STATE_DIR", state.path())
        .env("QUEST_DATA_DIR", state.path().join("no-data-dir"))
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("ok: the MCP Python SDK worked a quest to PASS"),
        "{stdout}"
    );
    assert_eq!(app.status(&session).await["pass"], 1);
}
