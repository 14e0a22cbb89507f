//! `quest mcp` driven over stdio by the real rmcp client against a real server:
//! the handshake, exactly four tools with their schemas and their size, a whole
//! session worked through the tools (mixed with the CLI on the same lease state),
//! and refusals that come back as tool errors while the server keeps answering.

use std::process::Stdio;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::*;

/// The nine counts `quest_status` answers, as the API's status names them.
const STATUS_COUNTS: [&str; 9] = [
    "total",
    "remaining",
    "open",
    "leased",
    "checking",
    "verifying",
    "pass",
    "review",
    "done",
];

/// An agent's harness: `quest mcp` as a child process and a client session
/// with it, and each tool's output schema as `tools/list` gave it.
pub struct Harness {
    pub client: RunningService<RoleClient, ()>,
    outputs: std::collections::HashMap<String, Value>,
}

/// The environment an agent runs in: server, token, session, name and state dir.
#[derive(Clone)]
pub struct AgentEnv {
    pub url: String,
    pub token: String,
    pub session: String,
    pub agent: String,
    pub state: std::sync::Arc<TempDir>,
}

impl AgentEnv {
    pub fn new(app: &TestApp, token: &str, session: &str, agent: &str) -> AgentEnv {
        AgentEnv {
            url: app.base.clone(),
            token: token.to_owned(),
            session: session.to_owned(),
            agent: agent.to_owned(),
            state: std::sync::Arc::new(tempfile::tempdir().unwrap()),
        }
    }

    /// The `quest` binary with exactly this environment.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = crate::helpers::quest_binary();
        command
            .args(args)
            .env("QUEST_URL", &self.url)
            .env("QUEST_TOKEN", &self.token)
            .env("QUEST_SESSION", &self.session)
            .env("QUEST_AGENT", &self.agent)
            .env("QUEST_STATE_DIR", self.state.path())
            .env("QUEST_DATA_DIR", self.state.path().join("no-data-dir"));
        command
    }

    /// Runs a CLI verb; returns its exit status and stdout.
    pub async fn cli(&self, args: &[&str]) -> (i32, String) {
        let out = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Starts `quest mcp` and completes the MCP handshake with it.
    pub async fn mcp(&self) -> Harness {
        let (transport, _stderr) = TokioChildProcess::builder(self.command(&["mcp"]))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("quest mcp starts");
        let client = ().serve(transport).await.expect("the MCP handshake completes");
        let listed = client.list_tools(None).await.expect("tools/list answers");
        let outputs = listed
            .tools
            .iter()
            .map(|t| {
                let schema = t
                    .output_schema
                    .as_ref()
                    .map(|s| Value::Object((**s).clone()));
                (t.name.to_string(), schema.unwrap_or(Value::Null))
            })
            .collect();
        Harness { client, outputs }
    }
}

impl Harness {
    /// Calls a tool; a protocol error fails the test (refusals must be tool
    /// errors). Every answer is held to MCP: a success carries structured
    /// content valid against the tool's output schema, an error carries none.
    pub async fn call(&self, tool: &'static str, arguments: Option<Value>) -> CallToolResult {
        let mut params = CallToolRequestParams::new(tool);
        if let Some(Value::Object(arguments)) = arguments {
            params = params.with_arguments(arguments);
        }
        let result =
            self.client.call_tool(params).await.unwrap_or_else(|e| {
                panic!("{tool} must answer as a tool, not fail the protocol: {e}")
            });
        match (result.is_error, &result.structured_content) {
            (Some(true), None) => {}
            (Some(true), Some(data)) => panic!("{tool}: an error with structured content {data}"),
            (_, None) => panic!(
                "{tool}: a success without structured content: {}",
                text(&result)
            ),
            (_, Some(data)) => {
                let schema = &self.outputs[tool];
                let validator = jsonschema::validator_for(schema).unwrap_or_else(|e| {
                    panic!("{tool}'s output schema {schema} is no JSON Schema: {e}")
                });
                let errors: Vec<String> =
                    validator.iter_errors(data).map(|e| e.to_string()).collect();
                assert!(
                    errors.is_empty(),
                    "{tool}: {data} breaks its output schema: {errors:?}"
                );
            }
        }
        result
    }
}

/// The text of a tool answer.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The structured content of a successful answer.
#[track_caller]
pub fn data(result: &CallToolResult) -> Value {
    assert_eq!(
        result.is_error,
        Some(false),
        "a tool error: {}",
        text(result)
    );
    result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structured content: {}", text(result)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_has_exactly_the_four_tools_with_their_schemas_in_under_1500_tokens() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let mcp = AgentEnv::new(&app, &token, &session, "mcp-1").mcp().await;

    let info = mcp
        .client
        .peer_info()
        .expect("the server introduced itself");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(
        instructions.contains("quest_next") && instructions.contains("quest_submit"),
        "the instructions say what the loop is: {instructions}"
    );
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("quest")
    );
    assert!(info.capabilities.tools.is_some(), "{info:?}");

    let listed = mcp.client.list_tools(None).await.unwrap();
    let mut names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "quest_next",
            "quest_release",
            "quest_status",
            "quest_submit"
        ]
    );
    for tool in &listed.tools {
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["type"], "object", "{}: {schema}", tool.name);
        // MCP requires an object at the root of an output schema.
        let output = tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone()))
            .unwrap_or_else(|| panic!("{} has no output schema", tool.name));
        assert_eq!(output["type"], "object", "{}: {output}", tool.name);
        let required: Vec<&str> = output["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let expected: &[&str] = match tool.name.as_ref() {
            "quest_next" => &["status"],
            "quest_submit" => &[
                "verdict",
                "state",
                "tries",
                "max_tries",
                "remaining",
                "facts",
                "unchanged",
                "replayed",
            ],
            "quest_status" => &STATUS_COUNTS,
            _ => &["released"],
        };
        assert_eq!(required, expected, "{}: {output}", tool.name);
        if tool.name == "quest_next" {
            assert_eq!(
                output["properties"]["status"]["enum"],
                json!(["assigned", "wait", "finished", "paused"])
            );
            for optional in ["quest", "prompt", "retry_after_seconds"] {
                assert!(
                    output["properties"][optional].is_object(),
                    "{optional}: {output}"
                );
            }
        }
        let described = tool.description.as_deref().unwrap_or_default();
        assert!(!described.is_empty(), "{} has a description", tool.name);
        if tool.name == "quest_submit" {
            assert_eq!(schema["required"], json!(["result"]), "{schema}");
            assert_eq!(schema["properties"]["result"]["type"], "object", "{schema}");
        } else {
            assert_eq!(schema["properties"], json!({}), "{}: {schema}", tool.name);
        }
    }

    // The whole answer as it travels (the result object of `tools/list`).
    let wire = serde_json::to_string(&listed).unwrap();
    let tokens = wire.chars().count().div_ceil(4);
    println!(
        "tools/list: {} characters, about {tokens} tokens (characters / 4)\n{wire}",
        wire.chars().count()
    );
    assert!(tokens < 1500, "tools/list is {tokens} tokens: {wire}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_works_a_whole_session_through_the_tools_and_the_cli_shares_its_lease() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    let env = AgentEnv::new(&app, &token, &session, "mcp-1");
    let mcp = env.mcp().await;

    // Nothing held yet: releasing is a tool error that says what to do.
    let release = mcp.call("quest_release", None).await;
    assert_eq!(release.is_error, Some(true));
    assert_eq!(
        text(&release),
        "no quest is leased by this agent: call quest_next first",
        "worded for a tool-calling agent"
    );

    let next = mcp.call("quest_next", None).await;
    let assigned = data(&next);
    assert_eq!(assigned["status"], "assigned", "{assigned}");
    assert_eq!(assigned["quest"]["key"], "Company 0000");
    assert_eq!(assigned["tries_left"], 3);
    let prompt = text(&next);
    assert!(
        prompt.contains("Find the contact email") && prompt.contains("Call quest_submit with"),
        "{prompt}"
    );
    assert_eq!(assigned["prompt"].as_str(), Some(prompt.as_str()));
    for shell_or_http in ["quest submit", "quest next", "POST /v1", "lease_id"] {
        assert!(
            !prompt.contains(shell_or_http),
            "the tool's prompt teaches only the tools, not {shell_or_http:?}: {prompt}"
        );
    }

    // Asking again while holding it returns the same quest, its lease renewed.
    let again = data(&mcp.call("quest_next", None).await);
    assert_eq!(again["quest"]["id"], assigned["quest"]["id"]);
    assert_eq!(again["lease"]["id"], assigned["lease"]["id"]);

    let fail = mcp
        .call("quest_submit", Some(json!({"result": {"email": "nope"}})))
        .await;
    let verdict = data(&fail);
    assert_eq!(verdict["verdict"], "FAIL", "{verdict}");
    assert_eq!(verdict["tries_left"], 2);
    assert_eq!(verdict["remaining"], 3);
    let facts = verdict["facts"].as_array().unwrap();
    assert!(
        !facts.is_empty()
            && facts
                .iter()
                .all(|f| f["hint"].as_str().is_some_and(|h| !h.is_empty()))
    );
    let said = text(&fail);
    assert!(
        said.starts_with("FAIL: 2 tries left.")
            && said.contains("hint:")
            && said.contains("3 quests remain"),
        "{said}"
    );

    assert_eq!(verdict["unchanged"], false, "{verdict}");
    // The very same result again: a new try that fails unchanged, not a replay.
    let again = data(
        &mcp.call("quest_submit", Some(json!({"result": {"email": "nope"}})))
            .await,
    );
    assert_eq!(
        (
            &again["verdict"],
            &again["unchanged"],
            &again["replayed"],
            &again["tries_left"]
        ),
        (&json!("FAIL"), &json!(true), &json!(false), &json!(1)),
        "{again}"
    );
    let pass = data(
        &mcp.call(
            "quest_submit",
            Some(json!({"result": {"email": "info@company0000.test"}})),
        )
        .await,
    );
    assert_eq!(pass["verdict"], "PASS", "{pass}");
    assert_eq!(pass["state"], "PASS");
    assert_eq!(pass["remaining"], 2);

    // The CLI and the tools share one lease state: lease by tool, submit by CLI, and back.
    let second = data(&mcp.call("quest_next", None).await);
    assert_eq!(second["quest"]["key"], "Company 0001");
    let (code, out) = env
        .cli(&["submit", "--field", "email=info@company0001.test"])
        .await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = env.cli(&["next"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Company 0002"), "{out}");
    let third = data(
        &mcp.call(
            "quest_submit",
            Some(json!({"result": {"email": "info@company0002.test", "confidence": "low"}})),
        )
        .await,
    );
    assert_eq!(third["verdict"], "REVIEW", "{third}");

    let status = data(&mcp.call("quest_status", None).await);
    assert_eq!(
        (
            &status["total"],
            &status["remaining"],
            &status["pass"],
            &status["review"]
        ),
        (&json!(3), &json!(0), &json!(2), &json!(1)),
        "{status}"
    );
    let server = app.status(&session).await;
    for count in STATUS_COUNTS {
        assert_eq!(
            status[count], server[count],
            "{count}: {status} against {server}"
        );
    }
    let finished = mcp.call("quest_next", None).await;
    assert_eq!(data(&finished)["status"], "finished");
    assert!(
        text(&finished).starts_with("finished"),
        "{}",
        text(&finished)
    );
    mcp.client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quest_next_says_wait_while_others_hold_the_rest() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let other = app.next(&token, &session, "other").await;
    let (quest, lease) = assigned(&other);
    let mcp = AgentEnv::new(&app, &token, &session, "mcp-1").mcp().await;

    let wait = mcp.call("quest_next", None).await;
    let answer = data(&wait);
    assert_eq!(answer["status"], "wait", "{answer}");
    assert!(answer["retry_after_seconds"].as_u64().unwrap() >= 1);
    assert!(
        text(&wait).contains("Call quest_next again in"),
        "{}",
        text(&wait)
    );

    app.submit(&token, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    assert_eq!(
        data(&mcp.call("quest_next", None).await)["status"],
        "finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_come_back_as_tool_errors_and_the_server_keeps_answering() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bad = AgentEnv::new(&app, "not-a-token", &session, "mcp-1")
        .mcp()
        .await;

    for tool in ["quest_next", "quest_status"] {
        let refused = bad.call(tool, None).await;
        assert_eq!(refused.is_error, Some(true), "{tool}: {}", text(&refused));
        let line = text(&refused);
        assert!(
            !line.starts_with("quest:")
                && line.contains("QUEST_TOKEN")
                && line.ends_with("[unauthorized]"),
            "{tool}: {line}"
        );
    }
    // Still serving: the list answers, and the same server takes more calls.
    assert_eq!(bad.client.list_tools(None).await.unwrap().tools.len(), 4);

    let good = AgentEnv::new(&app, &token, &session, "mcp-2").mcp().await;
    for arguments in [
        json!({}),
        json!({"result": "info@x.test"}),
        json!({"result": {}}),
    ] {
        let refused = good.call("quest_submit", Some(arguments.clone())).await;
        assert_eq!(refused.is_error, Some(true), "{arguments}");
        assert_eq!(
            text(&refused),
            "give the result as a non-empty JSON object: {\"result\": {...}}",
            "one message, no doubled prefix"
        );
    }
    let no_lease = good
        .call(
            "quest_submit",
            Some(json!({"result": {"email": "a@b.test"}})),
        )
        .await;
    assert_eq!(no_lease.is_error, Some(true));
    assert!(
        text(&no_lease).contains("call quest_next first"),
        "{}",
        text(&no_lease)
    );
    assert_eq!(
        data(&good.call("quest_next", None).await)["status"],
        "assigned"
    );
    assert_eq!(
        app.status(&session).await["leased"],
        1,
        "the refusals changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_token_gets_the_paused_answer_not_an_error() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(crate::containment::pausing(1), companies(3)).await;
    crate::containment::burn(&app, &token, &session, "other").await;
    let mcp = AgentEnv::new(&app, &token, &session, "mcp-1").mcp().await;

    let paused = mcp.call("quest_next", None).await;
    let answer = data(&paused);
    assert_eq!(answer["status"], "paused", "{answer}");
    assert!(
        text(&paused).starts_with("paused: ")
            && text(&paused).contains("stop and tell the operator"),
        "{}",
        text(&paused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_examples_hands_out_its_shape_with_placeholders() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    // The README's own example: instructions, no examples.
    let mut config = contact_config(3);
    config["prompt"] = json!({"instructions": "Find the contact email of {{ company }}."});
    let session = app.scan(config, companies(1)).await;
    let mcp = AgentEnv::new(&app, &token, &session, "mcp-1").mcp().await;

    let next = mcp.call("quest_next", None).await;
    let answer = data(&next);
    assert_eq!(
        answer["result_example"],
        json!({"email": "<email: string>", "confidence": r#"<confidence: one of "high", "low">"#}),
        "{answer}"
    );
    let prompt = text(&next);
    assert!(prompt.contains("- `email`: string"), "{prompt}");
    assert!(
        prompt.contains(r#"Call quest_submit with {"result": {"email":"<email: string>""#),
        "{prompt}"
    );
}
