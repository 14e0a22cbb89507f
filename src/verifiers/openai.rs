//! OpenAI-compatible chat completions (vLLM, llama.cpp, Ollama and the hosted
//! APIs alike): one POST to `{base_url}/chat/completions` per question.
//!
//! The endpoint is the operator's own choice, so loopback and private addresses
//! are allowed here (unlike agent-supplied URLs). Proxies from the environment
//! are not used and redirects are not followed, so the prompt and the key go
//! exactly where the configuration says.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{AskError, Reply, Verifier};
use crate::config::Secret;
use crate::domain::verify::{SYSTEM_PROMPT, VerifierRequest, cut, parse_reply};

/// The largest reply body read.
const MAX_BODY: usize = 1024 * 1024;
/// The longest raw reply kept.
const MAX_RAW_CHARS: usize = 4000;

/// The HTTP client shared by every OpenAI-compatible verifier.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!(
            "quest/",
            env!("CARGO_PKG_VERSION"),
            " (L2 verifier)"
        ))
        .build()
}

/// One model behind one OpenAI-compatible endpoint.
pub struct OpenAiVerifier {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<Secret>,
    max_tokens: u32,
}

impl OpenAiVerifier {
    /// A verifier for `model` at `base_url` (up to the version, e.g. `.../v1`).
    pub fn new(
        client: reqwest::Client,
        base_url: &str,
        model: &str,
        api_key: Option<Secret>,
        max_tokens: u32,
    ) -> OpenAiVerifier {
        OpenAiVerifier {
            client,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            api_key,
            max_tokens,
        }
    }
}

/// The chat-completions request body for one question: the same JSON a
/// command verifier receives on stdin.
pub fn chat_body(
    model: &str,
    max_tokens: u32,
    request: &VerifierRequest,
    question: &str,
) -> serde_json::Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": request.prompt(question)},
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": false,
    })
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

#[async_trait]
impl Verifier for OpenAiVerifier {
    fn model(&self) -> &str {
        &self.model
    }

    async fn ask(&self, request: &VerifierRequest, question: &str) -> Result<Reply, AskError> {
        let mut call = self.client.post(&self.url).json(&chat_body(
            &self.model,
            self.max_tokens,
            request,
            question,
        ));
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key.expose());
        }
        let mut response = call.send().await.map_err(|e| {
            if e.is_builder() {
                AskError::Permanent(format!("cannot build the request: {e}"))
            } else {
                AskError::Transient(format!("no reply from {}: {}", self.url, without_url(&e)))
            }
        })?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| AskError::Transient(format!("the reply broke off: {}", without_url(&e))))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(AskError::Permanent(format!(
                    "a reply larger than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body);
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            return Err(AskError::Transient(format!(
                "HTTP {status}: {}",
                cut(text.trim(), 200)
            )));
        }
        if !status.is_success() {
            return Err(AskError::Permanent(format!(
                "HTTP {status}: {}",
                cut(text.trim(), 200)
            )));
        }
        let completion: Completion = serde_json::from_slice(&body).map_err(|e| {
            AskError::Permanent(format!(
                "not a chat-completions reply ({e}): {}",
                cut(text.trim(), 200)
            ))
        })?;
        let content = completion
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .unwrap_or_default();
        Ok(Reply {
            parsed: parse_reply(&content),
            raw: cut(&content, MAX_RAW_CHARS),
        })
    }
}

/// reqwest's message without the URL (already named by the caller).
fn without_url(e: &reqwest::Error) -> String {
    let mut message = e.to_string();
    if let Some(url) = e.url() {
        message = message.replace(&format!(" ({url})"), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message = format!("{message}: {s}");
        source = s.source();
    }
    message
}
