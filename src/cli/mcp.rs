//! `quest mcp`: the agent loop as exactly four MCP tools over stdio, for
//! harnesses that speak the Model Context Protocol.
//!
//! The tools call [`super::agent`], the same operations as `quest next` and
//! `quest submit`, with the same token, session, agent name and lease state
//! file, so an agent may mix tool calls and CLI verbs. Descriptions and input
//! schemas are written by hand and kept short: the whole `tools/list` answer
//! stays far under 1,500 tokens (a test measures it). Every failure is a tool
//! error carrying the CLI's one-line message; the server itself keeps running.
//! Stdout carries the protocol only; logs go to stderr.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use super::agent::{self, Surface};
use super::client::CliError;
use super::text::clean;
use super::{Ctx, exit};
use crate::api::NextResponse;
use crate::domain::{State, SubmissionVerdict};

/// How long `quest_submit` lets the server wait for a verdict before it answers PENDING.
const SUBMIT_WAIT_SECONDS: u32 = 30;

/// Instructions the server gives the client at `initialize`.
const INSTRUCTIONS: &str = "Work the quests of a quest session: call quest_next, do what its prompt says, \
    submit with quest_submit, and repeat until quest_next says finished. Only the gate's PASS ends a quest.";

/// The four tools over one client context.
#[derive(Clone)]
pub struct QuestTools {
    ctx: Arc<Ctx>,
    tool_router: ToolRouter<QuestTools>,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are written as JSON objects"),
    }
}

fn no_arguments() -> Arc<JsonObject> {
    schema(json!({"type": "object", "properties": {}}))
}

fn submit_arguments() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {"result": {"type": "object", "description": "The result, shaped like the prompt's example."}},
        "required": ["result"]
    }))
}

/// A tool answer: text for the agent (terminal controls removed) and, when
/// given, the same answer as structured content.
fn answer(text: &str, structured: Option<Value>) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(clean(text))]);
    result.structured_content = structured;
    result
}

/// A refusal as a tool error, in the CLI's words.
fn refusal(e: &CliError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(clean(&e.line()))])
}

fn structured(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[tool_router]
impl QuestTools {
    /// The tools over `ctx`.
    pub fn new(ctx: Ctx) -> QuestTools {
        QuestTools {
            ctx: Arc::new(ctx),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Lease your next quest and get its prompt (task, input, example, last facts, tries left), or `wait` (with seconds) or `finished`. While you hold a quest it returns that quest and renews its lease.",
        input_schema = no_arguments()
    )]
    async fn quest_next(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::lease(&self.ctx).await {
            Ok(next) => next_answer(&next),
            Err(e) => refusal(&e),
        })
    }

    #[tool(
        description = "Submit the result for your quest as a JSON object. Returns the verdict with every fact and hint, tries left and quests remaining. On FAIL fix each fact and submit again.",
        input_schema = submit_arguments()
    )]
    async fn quest_submit(&self, arguments: JsonObject) -> Result<CallToolResult, ErrorData> {
        let result = match arguments.get("result") {
            Some(Value::Object(result)) if !result.is_empty() => result.clone(),
            _ => {
                return Ok(refusal(&CliError::Usage(
                    "quest: give the result as a non-empty JSON object: {\"result\": {...}}".into(),
                )));
            }
        };
        Ok(
            match agent::submit(&self.ctx, result, SUBMIT_WAIT_SECONDS).await {
                Ok(submitted) => {
                    let answer = submit_answer(&submitted);
                    // A PENDING answer keeps the key: the same result again follows it.
                    match agent::settled(&self.ctx, submitted.verdict) {
                        Ok(()) => answer,
                        Err(e) => refusal(&e),
                    }
                }
                Err(e) => refusal(&e),
            },
        )
    }

    #[tool(
        description = "The session's counts: total, remaining, open, leased, checking, pass, review, done.",
        input_schema = no_arguments()
    )]
    async fn quest_status(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::session(&self.ctx).await {
            Ok(session) => {
                let s = &session.status;
                let text = format!(
                    "Session {}: {} quests, {} remaining ({} open, {} leased, {} checking, {} verifying); \
                     {} pass, {} review, {} done.",
                    session.name,
                    s.total,
                    s.remaining,
                    s.open,
                    s.leased,
                    s.checking,
                    s.verifying,
                    s.pass,
                    s.review,
                    s.done
                );
                answer(&text, Some(structured(s)))
            }
            Err(e) => refusal(&e),
        })
    }

    #[tool(
        description = "Give your current quest back without using a try, so another agent can take it.",
        input_schema = no_arguments()
    )]
    async fn quest_release(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::release(&self.ctx).await {
            Ok(held) => answer(
                &format!(
                    "Released {}; another agent can take it. Call quest_next for a quest.",
                    held.key.unwrap_or_default()
                ),
                None,
            ),
            Err(e) => refusal(&e),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for QuestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("quest", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

fn next_answer(next: &NextResponse) -> CallToolResult {
    match next {
        NextResponse::Assigned {
            quest,
            lease,
            prompt,
            submit,
        } => {
            let text = format!(
                "{prompt}\nWith the MCP tools, call quest_submit with {{\"result\": {}}}.",
                submit.result_example
            );
            // The prompt is in the text; the structured part carries the ids and the input.
            let tries_left = quest.max_tries.saturating_sub(quest.tries);
            let data = json!({"status": "assigned", "quest": quest, "lease": lease, "tries_left": tries_left});
            answer(&text, Some(data))
        }
        NextResponse::Wait {
            retry_after_seconds,
        } => answer(
            &format!(
                "wait: nothing is open right now; other agents hold the remaining quests. \
                 Call quest_next again in {retry_after_seconds} s."
            ),
            Some(structured(next)),
        ),
        NextResponse::Finished => answer(
            "finished: every quest of the session is decided. Stop here.",
            Some(structured(next)),
        ),
    }
}

fn submit_answer(s: &crate::api::SubmitResponse) -> CallToolResult {
    let left = s.max_tries.saturating_sub(s.tries);
    let mut text = agent::verdict_text(Surface::Mcp, s.verdict, s.state, Some(left), &s.facts);
    if s.replayed && s.state == State::Todo && s.verdict != SubmissionVerdict::Pending {
        text.push_str(&format!("\n{}", agent::REPLAYED_NOTE));
    }
    if s.verdict == SubmissionVerdict::Pending {
        text.push_str(&format!(
            "\npending: no verdict after {SUBMIT_WAIT_SECONDS} s. Call {} to wait for it.",
            Surface::Mcp.wait()
        ));
    } else {
        text.push_str(&format!("\n{} quests remain in this session.", s.remaining));
    }
    let mut data = structured(s);
    data["tries_left"] = json!(left);
    answer(&text, Some(data))
}

/// Runs the MCP server on stdin/stdout until the client goes away.
pub async fn serve(ctx: Ctx) -> Result<u8, CliError> {
    // Stdout belongs to the protocol: anything logged goes to stderr.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    let running = QuestTools::new(ctx)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::Usage(format!("the MCP session did not start: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| CliError::Usage(format!("the MCP server stopped: {e}")))?;
    Ok(exit::OK)
}
