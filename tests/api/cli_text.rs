//! What agents, pages and models wrote reaches an operator's terminal without
//! the control characters that could rewrite it.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::mcp::AgentEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_and_json_output_carry_no_terminal_controls_from_an_agent() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&token, &session, "bot-1").await);
    let hostile = "ok\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[1;1Hfake\u{9b}31m \u{202e}txt.exe";
    let result = json!({"email": "a@b.test", "confidence": "low", "note": hostile});
    app.submit(&token, &quest, &lease, result).await.expect(200);

    let admin = AgentEnv::new(&app, &app.admin, &session, "");
    let (code, out) = admin.cli(&["review", "list"]).await;
    assert_eq!(code, 0, "{out}");
    // The result prints as JSON, where C0 controls are `\u` escapes; C1 and bidi controls go.
    assert!(
        out.contains("fake txt.exe"),
        "the text stays, the controls go: {out}"
    );
    assert!(
        !out.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );

    let (code, out) = admin.cli(&["review", "list", "--json"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        !out.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed[0]["result"]["note"], hostile,
        "--json keeps the value exact"
    );
}
