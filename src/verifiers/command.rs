//! A verifier that is the operator's own program: it reads the same request as
//! JSON on stdin (the chat-completions body, plus the contract, the artifact and
//! the question as fields of their own) and prints `{"answer": "yes" | "no",
//! "reason": "..."}`. Exit status 75 (EX_TEMPFAIL) asks for a retry; any other
//! failure is no answer.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;

use super::openai::chat_body;
use super::{AskError, MAX_RAW_CHARS, Reply, Verifier};
use crate::config::Sampling;
use crate::domain::verify::{Answer, NotAnAnswer, Question, VerifierRequest, cut};
use crate::process::{ProcessRunner, ProcessSpec};

/// `EX_TEMPFAIL` from sysexits.h: "try again later".
const EXIT_TEMPFAIL: i32 = 75;

/// An operator program as a verifier.
pub struct CommandVerifier {
    process: ProcessSpec,
    model: String,
    runner: Arc<dyn ProcessRunner>,
}

impl CommandVerifier {
    /// Wraps a declared program.
    pub fn new(
        process: ProcessSpec,
        model: &str,
        runner: Arc<dyn ProcessRunner>,
    ) -> CommandVerifier {
        CommandVerifier {
            process,
            model: model.to_owned(),
            runner,
        }
    }
}

#[derive(Deserialize)]
struct Printed {
    answer: String,
    #[serde(default)]
    reason: String,
}

/// Reads `{"answer": "yes" | "no", "reason": "..."}` (the whole output or its last line).
fn parse_printed(stdout: &str) -> Result<(Answer, String), NotAnAnswer> {
    let text = stdout.trim();
    let printed = serde_json::from_str::<Printed>(text)
        .ok()
        .or_else(|| serde_json::from_str::<Printed>(text.lines().last()?.trim()).ok())
        .ok_or_else(|| {
            NotAnAnswer(format!(
                "not {{\"answer\": \"yes\"|\"no\"}}: {}",
                cut(text, 120)
            ))
        })?;
    let answer: Answer = printed
        .answer
        .trim()
        .to_ascii_lowercase()
        .parse()
        .map_err(|_| {
            NotAnAnswer(format!(
                "answer `{}` is neither yes nor no",
                cut(&printed.answer, 40)
            ))
        })?;
    let reason = printed
        .reason
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    Ok((answer, cut(&reason, 500)))
}

#[async_trait]
impl Verifier for CommandVerifier {
    fn model(&self) -> &str {
        &self.model
    }

    async fn ask(&self, request: &VerifierRequest, question: &Question) -> Result<Reply, AskError> {
        let mut body = chat_body(&self.model, Sampling::DEFAULT, request, question);
        body["question"] = question.text.as_str().into();
        body["flag_on"] = question.flag_on.as_str().into();
        body["contract"] = serde_json::to_value(&request.contract).unwrap_or_default();
        body["artifact"] = serde_json::to_value(&request.artifact).unwrap_or_default();
        let out = self
            .runner
            .run(&self.process, body.to_string().into_bytes())
            .await
            .map_err(|e| AskError::Permanent(e.to_string()))?;
        match out.code {
            Some(0) => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                Ok(Reply {
                    parsed: parse_printed(&stdout),
                    raw: cut(stdout.trim(), MAX_RAW_CHARS),
                })
            }
            Some(EXIT_TEMPFAIL) => Err(AskError::Transient(format!(
                "exit status 75 (try again): {}",
                out.stderr_text(300)
            ))),
            _ => Err(AskError::Permanent(format!(
                "{}: {}",
                out.status_text(),
                out.stderr_text(300)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_printed_yes_or_no_is_an_answer() {
        assert_eq!(
            parse_printed(r#"{"answer": "YES", "reason": "personal address"}"#).unwrap(),
            (Answer::Yes, "personal address".to_owned())
        );
        assert_eq!(
            parse_printed("thinking...\n{\"answer\": \"no\"}\n")
                .unwrap()
                .0,
            Answer::No
        );
        assert!(parse_printed(r#"{"answer": "maybe"}"#).is_err());
        assert!(parse_printed("YES").is_err());
    }
}
