//! AI verifier backends (L2) behind one trait, [`Verifier`], and the registry
//! of the ones the operator's configuration declares.
//!
//! A backend makes one attempt at one question and reports whether a failure
//! is worth retrying; the retry loop, the deadline and the concurrency limit
//! live in the worker (`workers::verifier_runner`), so they hold for every
//! backend and tests can drive them with fakes.

pub mod command;
pub mod openai;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::config::{VerifierBackend, VerifierConfig};
use crate::domain::verify::{Answer, NotAnAnswer, Question, VerifierRequest};
use crate::process::ProcessRunner;

/// The longest raw reply kept with an answer, in characters.
pub const MAX_RAW_CHARS: usize = 4000;

/// A backend's reply to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The reply as received (cut to a sane length).
    pub raw: String,
    /// The clean answer and its reason, or why the reply is no answer.
    pub parsed: Result<(Answer, String), NotAnAnswer>,
}

/// Why an attempt gave no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// Worth another attempt: refused connection, 5xx, 429, a dropped connection.
    #[error("{0}")]
    Transient(String),
    /// Not worth another attempt: 4xx, a body that is not a chat-completions reply.
    #[error("{0}")]
    Permanent(String),
}

/// One AI verifier backend.
#[async_trait]
pub trait Verifier: Send + Sync {
    /// The model recorded with each answer.
    fn model(&self) -> &str;
    /// One attempt at one question about one request.
    async fn ask(&self, request: &VerifierRequest, question: &Question) -> Result<Reply, AskError>;
}

/// A declared verifier with its limits.
#[derive(Clone)]
pub struct Declared {
    pub verifier: Arc<dyn Verifier>,
    /// Calls in flight at once.
    pub max_concurrency: usize,
    /// How long one answer may take, retries included.
    pub timeout: Duration,
}

/// The verifiers this server declares, by name.
#[derive(Clone, Default)]
pub struct VerifierRegistry {
    declared: BTreeMap<String, Declared>,
}

impl VerifierRegistry {
    /// The verifiers the operator's configuration declares.
    pub fn from_config(
        configs: &[VerifierConfig],
        runner: Arc<dyn ProcessRunner>,
    ) -> Result<VerifierRegistry, reqwest::Error> {
        let mut registry = VerifierRegistry::default();
        let client = openai::client()?;
        for c in configs {
            let verifier: Arc<dyn Verifier> = match &c.backend {
                VerifierBackend::OpenAi {
                    base_url,
                    model,
                    api_key,
                    sampling,
                } => Arc::new(openai::OpenAiVerifier::new(
                    client.clone(),
                    base_url,
                    model,
                    api_key.clone(),
                    *sampling,
                )),
                VerifierBackend::Command { process, model } => Arc::new(
                    command::CommandVerifier::new(process.clone(), model, runner.clone()),
                ),
            };
            registry.insert(&c.name, verifier, c.max_concurrency, c.timeout);
        }
        Ok(registry)
    }

    /// Adds (or replaces) a verifier.
    pub fn insert(
        &mut self,
        name: &str,
        verifier: Arc<dyn Verifier>,
        max_concurrency: usize,
        timeout: Duration,
    ) {
        self.declared.insert(
            name.to_owned(),
            Declared {
                verifier,
                max_concurrency: max_concurrency.max(1),
                timeout,
            },
        );
    }

    /// The verifier declared under `name`.
    pub fn get(&self, name: &str) -> Option<&Declared> {
        self.declared.get(name)
    }

    /// Every declared name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.declared.keys().map(String::as_str).collect()
    }
}

impl std::fmt::Debug for VerifierRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifierRegistry")
            .field("names", &self.names())
            .finish()
    }
}
