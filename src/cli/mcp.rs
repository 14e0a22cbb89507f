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
use crate::domain::prompt::SUBMIT_HEADING;
use crate::domain::replay::UNCHANGED;
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

/// `quest_next`'s answer: one object whose `status` says which of the four it is.
fn next_output() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["assigned", "wait", "finished", "paused"]},
            "prompt": {"type": "string", "description": "assigned: what to do, and how to submit."},
            "quest": {"type": "object", "description": "assigned: the quest's id, key, input, tries and last facts."},
            "lease": {"type": "object", "description": "assigned: the lease's id and expiry."},
            "tries_left": {"type": "integer", "minimum": 0},
            "result_example": {"description": "assigned: the result's shape."},
            "retry_after_seconds": {"type": "integer", "minimum": 0, "description": "wait: call quest_next again after this."},
            "message": {"type": "string", "description": "paused: why, for the operator."}
        },
        "required": ["status"]
    }))
}

/// `quest_submit`'s answer.
fn submit_output() -> Arc<JsonObject> {
    let count = json!({"type": "integer", "minimum": 0});
    schema(json!({
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["PASS", "FAIL", "REVIEW", "PENDING"]},
            "state": {"type": "string", "enum": ["TODO", "PASS", "REVIEW", "DONE"]},
            "tries": count, "max_tries": count, "tries_left": count, "remaining": count,
            "facts": {"type": "array", "items": {"type": "object", "properties": {
                "check": {"type": "string"}, "field": {"type": "string"}, "expected": {"type": "string"},
                "actual": {"type": "string"}, "hint": {"type": "string"}}}},
            "unchanged": {"type": "boolean", "description": "true: this result is identical to the last FAIL, which failed again and used a try; change it according to the facts."},
            "replayed": {"type": "boolean", "description": "true: the verdict already recorded for this very submit (a retry); nothing was checked again and no try was used."},
            "submission_id": {"type": "string"}
        },
        "required": ["verdict", "state", "tries", "max_tries", "remaining", "facts", "unchanged", "replayed"]
    }))
}

/// The counts `quest_status` answers, in the order its text says them.
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

fn status_output() -> Arc<JsonObject> {
    let properties: JsonObject = STATUS_COUNTS
        .iter()
        .map(|name| (name.to_string(), json!({"type": "integer", "minimum": 0})))
        .chain([("session".to_owned(), json!({"type": "string"}))])
        .collect();
    schema(json!({"type": "object", "properties": properties, "required": STATUS_COUNTS}))
}

fn release_output() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {"released": {"type": "string", "description": "The key of the quest given back."}},
        "required": ["released"]
    }))
}

/// A tool answer: text for the agent (terminal controls removed) and the same
/// answer as structured content, valid against the tool's output schema.
fn answer(text: &str, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(clean(text))]);
    result.structured_content = Some(structured);
    result
}

/// A refusal as a tool error, worded for a tool-calling agent; no structured content.
fn refusal(e: &CliError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(clean(&e.message(Surface::Mcp)))])
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
        input_schema = no_arguments(),
        output_schema = next_output()
    )]
    async fn quest_next(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::lease(&self.ctx).await {
            Ok(next) => {
                let done = match next {
                    NextResponse::Finished => agent::done_words(&self.ctx).await,
                    _ => String::new(),
                };
                next_answer(&next, &done)
            }
            Err(CliError::Refused { code, message, .. }) if code == "agent_paused" => answer(
                &format!("paused: {message}"),
                json!({"status": "paused", "message": message}),
            ),
            Err(e) => refusal(&e),
        })
    }

    #[tool(
        description = "Submit the result for your quest as a JSON object. Returns the verdict with every fact and hint, tries left and quests remaining. On FAIL fix each fact and submit again.",
        input_schema = submit_arguments(),
        output_schema = submit_output()
    )]
    async fn quest_submit(&self, arguments: JsonObject) -> Result<CallToolResult, ErrorData> {
        let result = match arguments.get("result") {
            Some(Value::Object(result)) if !result.is_empty() => result.clone(),
            _ => {
                return Ok(refusal(&CliError::Usage(
                    "give the result as a non-empty JSON object: {\"result\": {...}}".into(),
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
        description = "The session's counts: total, remaining, open, leased, checking, verifying, pass, review, done.",
        input_schema = no_arguments(),
        output_schema = status_output()
    )]
    async fn quest_status(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::session(&self.ctx).await {
            Ok(session) => {
                let all = structured(&session.status);
                let mut counts = serde_json::Map::new();
                let mut said = Vec::new();
                for name in STATUS_COUNTS {
                    said.push(format!("{} {name}", all[name]));
                    counts.insert(name.to_owned(), all[name].clone());
                }
                counts.insert("session".to_owned(), json!(session.name));
                let text = format!("Session {}: {}.", session.name, said.join(", "));
                answer(&text, Value::Object(counts))
            }
            Err(e) => refusal(&e),
        })
    }

    #[tool(
        description = "Give your current quest back without using a try, so another agent can take it.",
        input_schema = no_arguments(),
        output_schema = release_output()
    )]
    async fn quest_release(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match agent::release(&self.ctx).await {
            Ok(held) => {
                let key = held.key.unwrap_or_default();
                answer(
                    &format!(
                        "Released {key}; another agent can take it. Call quest_next for a quest."
                    ),
                    json!({"released": key}),
                )
            }
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

/// `done`: what the session says once finished (see [`agent::done_words`]).
fn next_answer(next: &NextResponse, done: &str) -> CallToolResult {
    match next {
        NextResponse::Assigned {
            quest,
            lease,
            prompt,
            submit,
        } => {
            let tries_left = quest.max_tries.saturating_sub(quest.tries);
            let prompt = tool_prompt(prompt, tries_left, quest.max_tries, &submit.result_example);
            let data = json!({
                "status": "assigned", "prompt": prompt, "quest": quest, "lease": lease,
                "tries_left": tries_left, "result_example": submit.result_example
            });
            answer(&prompt, data)
        }
        NextResponse::Wait {
            retry_after_seconds,
        } => answer(
            &format!(
                "wait: nothing is open right now; other agents hold the remaining quests. \
                 Call quest_next again in {retry_after_seconds} s."
            ),
            structured(next),
        ),
        NextResponse::Finished => {
            answer(&format!("finished: {done}. Stop here."), structured(next))
        }
    }
}

/// The server's prompt with its last section, which teaches the CLI and raw
/// HTTP, replaced by the one way a tool-calling agent submits.
fn tool_prompt(prompt: &str, tries_left: u32, max_tries: u32, example: &Value) -> String {
    let body = prompt
        .find(SUBMIT_HEADING)
        .map_or(prompt, |at| &prompt[..at]);
    format!(
        "{body}{SUBMIT_HEADING}Tries left: {tries_left} of {max_tries}. Call quest_submit with \
         {{\"result\": {example}}}, each value from your own work.\n"
    )
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
        text.push('\n');
        text.push_str(&super::text::remain(s.remaining));
    }
    let data = json!({
        "verdict": s.verdict, "state": s.state, "tries": s.tries, "max_tries": s.max_tries,
        "tries_left": left, "remaining": s.remaining, "facts": s.facts,
        "unchanged": s.facts.iter().any(|f| f.check == UNCHANGED), "replayed": s.replayed,
        "submission_id": s.submission_id
    });
    answer(&text, data)
}

/// Runs the MCP server on stdin/stdout until the client goes away.
pub async fn serve(ctx: Ctx) -> Result<u8, CliError> {
    // Stdout belongs to the protocol: anything logged goes to stderr.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
