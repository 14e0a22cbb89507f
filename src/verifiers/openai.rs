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

use super::{AskError, MAX_RAW_CHARS, Reply, Verifier};
use crate::config::{Sampling, Secret, redact_url};
use crate::domain::verify::{Question, SYSTEM_PROMPT, VerifierRequest, cut, parse_reply};

/// The largest reply body read.
const MAX_BODY: usize = 1024 * 1024;

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
    /// `url` as it may appear in stored and logged text: no credentials.
    shown_url: String,
    /// The password of `url`'s userinfo, scrubbed from any message as a last guard.
    password: Option<String>,
    model: String,
    api_key: Option<Secret>,
    sampling: Sampling,
}

impl OpenAiVerifier {
    /// A verifier for `model` at `base_url` (up to the version, e.g. `.../v1`).
    pub fn new(
        client: reqwest::Client,
        base_url: &str,
        model: &str,
        api_key: Option<Secret>,
        sampling: Sampling,
    ) -> OpenAiVerifier {
        let url = match reqwest::Url::parse(base_url) {
            Ok(mut url) => {
                if let Ok(mut path) = url.path_segments_mut() {
                    path.pop_if_empty().extend(["chat", "completions"]);
                }
                url.to_string()
            }
            Err(_) => format!("{}/chat/completions", base_url.trim_end_matches('/')),
        };
        let password = reqwest::Url::parse(base_url)
            .ok()
            .and_then(|u| u.password().map(str::to_owned))
            .filter(|p| !p.is_empty());
        OpenAiVerifier {
            client,
            shown_url: redact_url(&url),
            password,
            url,
            model: model.to_owned(),
            api_key,
            sampling,
        }
    }
}

/// A fresh random fence marker: 128 bits, so that no data can guess it.
fn fence_marker() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The chat-completions request body for one question: the same JSON a
/// command verifier receives on stdin. A field `sampling` leaves out is not
/// sent. Every body fences its data with a marker of its own.
pub fn chat_body(
    model: &str,
    sampling: Sampling,
    request: &VerifierRequest,
    question: &Question,
) -> serde_json::Value {
    let mut body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": request.prompt(question, fence_marker)},
        ],
        "stream": false,
    });
    if let Some(temperature) = sampling.temperature {
        body["temperature"] = json!(temperature);
    }
    if let Some(max_tokens) = sampling.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    body
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

    async fn ask(&self, request: &VerifierRequest, question: &Question) -> Result<Reply, AskError> {
        let mut call = self.client.post(&self.url).json(&chat_body(
            &self.model,
            self.sampling,
            request,
            question,
        ));
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key.expose());
        }
        let mut response = call.send().await.map_err(|e| {
            if e.is_builder() {
                AskError::Permanent(
                    self.scrub(format!("cannot build the request: {}", without_url(&e))),
                )
            } else {
                AskError::Transient(self.scrub(format!(
                    "no reply from {}: {}",
                    self.shown_url,
                    without_url(&e)
                )))
            }
        })?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            AskError::Transient(self.scrub(format!("the reply broke off: {}", without_url(&e))))
        })? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(AskError::Permanent(format!(
                    "a reply larger than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        // The body of an error is the upstream's text: stored rows keep the
        // status and at most a short, masked reason from it, never the body.
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            return Err(AskError::Transient(self.scrub(http_error(status, &body))));
        }
        if !status.is_success() {
            return Err(AskError::Permanent(self.scrub(http_error(status, &body))));
        }
        let completion: Completion = serde_json::from_slice(&body).map_err(|e| {
            AskError::Permanent(self.scrub(format!(
                "not a chat-completions reply: {}",
                short_reason(&e.to_string())
            )))
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

impl OpenAiVerifier {
    /// Removes the base URL's password from a message, wherever it came from.
    fn scrub(&self, message: String) -> String {
        match &self.password {
            Some(password) => message.replace(password.as_str(), "***"),
            None => message,
        }
    }
}

/// The longest part of an upstream's error message that is kept.
const MAX_REASON_CHARS: usize = 60;

/// `HTTP 401 Unauthorized`, plus the upstream's own short message when its body
/// is the usual JSON error (`{"error": {"message": ...}}`), masked and cut.
fn http_error(status: reqwest::StatusCode, body: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            [
                &v["error"]["message"],
                &v["error"],
                &v["message"],
                &v["detail"],
            ]
            .into_iter()
            .find_map(|m| m.as_str().map(str::to_owned))
        })
        .map(|m| short_reason(&m))
        .filter(|m| !m.is_empty());
    match message {
        Some(message) => format!("HTTP {status}: {message}"),
        None => format!("HTTP {status}"),
    }
}

/// The first line of a message, with anything that looks like a key masked,
/// cut to [`MAX_REASON_CHARS`].
fn short_reason(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim();
    cut(&mask_keys(line), MAX_REASON_CHARS)
}

/// Masks every word that looks like a credential: an `sk-...` key, or a long
/// run of letters and digits such as a token or a hash.
fn mask_keys(text: &str) -> String {
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || "-_.+/=".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let letters = word.chars().any(|c| c.is_ascii_alphabetic());
        let digits = word.chars().any(|c| c.is_ascii_digit());
        let keyish = (word.len() >= 16 && letters && digits)
            || (word.len() >= 8 && word.to_ascii_lowercase().starts_with("sk-"));
        out.push_str(if keyish { "***" } else { word.as_str() });
        word.clear();
    };
    for c in text.chars() {
        if is_key_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_error_keeps_its_status_and_a_short_masked_reason_never_the_body() {
        let body = br#"{"error": {"message": "Incorrect API key provided: sk-live-0123456789abcdef0123. You can find your key at https://platform.test/keys and so on for a long while", "type": "invalid_request_error"}}"#;
        let text = http_error(reqwest::StatusCode::UNAUTHORIZED, body);
        assert!(
            text.starts_with("HTTP 401 Unauthorized: Incorrect API key provided: ***"),
            "{text}"
        );
        assert!(!text.contains("0123456789"), "{text}");
        assert!(text.chars().count() < 100, "{text}");
        let html =
            b"<html>trace id 9f8e7d6c5b4a39281706f5e4d3c2b1a0, internal host db-7.corp</html>";
        assert_eq!(
            http_error(reqwest::StatusCode::INTERNAL_SERVER_ERROR, html),
            "HTTP 500 Internal Server Error"
        );
    }

    #[test]
    fn key_like_words_are_masked_and_plain_words_kept() {
        assert_eq!(
            mask_keys("bad key sk-abc12345 for model judge-a, token ghp_0123456789abcdefXYZ"),
            "bad key *** for model judge-a, token ***"
        );
        assert_eq!(mask_keys("invalid_request_error"), "invalid_request_error");
    }

    #[test]
    fn the_url_shown_in_messages_has_no_credentials() {
        let v = OpenAiVerifier::new(
            client().unwrap(),
            "http://quest:hunter2@127.0.0.1:9/v1/?key=abc",
            "m",
            None,
            Sampling::DEFAULT,
        );
        assert_eq!(
            v.url,
            "http://quest:hunter2@127.0.0.1:9/v1/chat/completions?key=abc"
        );
        assert_eq!(
            v.shown_url,
            "http://***@127.0.0.1:9/v1/chat/completions?***"
        );
        assert_eq!(
            v.scrub("refused: hunter2".into()),
            "refused: ***",
            "the password is scrubbed from any message"
        );
    }
}
