//! The use cases behind the HTTP API: scan, lease, submit and wait, review,
//! tokens; the web console's own are in [`console`]. Handlers call exactly one
//! of these; these call the store, the [`Checker`] (a gate that decides at
//! once runs in the submit request) and the gate runner (which queues the
//! others), and never speak HTTP.

use crate::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId, TokenId};
use crate::domain::work::Refusal;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rand::RngCore;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::api::{
    self, Lease, LeasedQuest, NextResponse, Session, Status, SubmitHint, SubmitResponse,
};
use crate::domain::prompt::{self, PromptParts};
use crate::domain::receipt::digest;
use crate::domain::replay::IdempotencyKey;
use crate::domain::session::{ConfigError, SessionConfig};
use crate::domain::table::{self, Format, Table, TableError};
use crate::domain::verify::VerifyConfig;
use crate::domain::{Decision, EventKind, QuestEvent, Role, SubmissionVerdict, token_hash};
use crate::export::{Exports, StreamError};
use crate::gates::{Check, Checker, Gate, GateConfigError};
use crate::store::{
    GateDecision, LeaseOutcome, LeaseRow, NewSession, NewSubmission, QuestRow, SessionRow, Store,
    StoreError, SubmissionView, SubmitOutcome, TokenRow,
};
use crate::verifiers::VerifierRegistry;
use crate::workers::{GateRunner, Rechecker};
use tokio_util::sync::CancellationToken;

mod agents;
mod cache;
mod calibration;
pub mod console;
mod exports;
mod gold;
mod pauses;
mod quality;
mod recheck;
pub mod review;
mod scan;
mod tokens;

use review::{check_filter, check_note};
pub use tokens::new_secret;

use crate::domain::work::{AgentId, CheckFilter};
use cache::{Inputs, QuestInput, Tokens};

/// Why a use case refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Gate(#[from] GateConfigError),
    /// Well-formed but invalid input; `details` are its particulars for a
    /// program (a `duplicate_keys` refusal's row pairs), when it has any.
    #[error("{message}")]
    Invalid {
        code: &'static str,
        message: String,
        details: Option<Value>,
    },
    /// The server failed (a writer, a panicked blocking task): a 500 whose
    /// cause is logged and never echoed.
    #[error("{0}")]
    Fault(String),
    /// Input larger than its limit (413).
    #[error("{message}")]
    TooLarge { code: &'static str, message: String },
    /// The server is at a bound (running exports); the request may be retried.
    #[error("{message}")]
    Busy {
        code: &'static str,
        message: String,
        retry_after_seconds: u32,
    },
}

fn invalid(code: &'static str, message: impl Into<String>) -> ServiceError {
    ServiceError::Invalid {
        code,
        message: message.into(),
        details: None,
    }
}

/// 422 `invalid_text`: `place` holds a NUL, which neither store can keep.
/// The HTTP layer refuses it in any JSON body or query first; this repeats
/// the rule for what reaches a use case another way (a console form).
fn invalid_text(place: &str) -> ServiceError {
    invalid(
        "invalid_text",
        format!(
            "{place} holds U+0000 (NUL), which the server cannot store; remove it and send again"
        ),
    )
}

/// Refuses an agent name that is too long or holds a NUL.
fn check_agent(agent: &AgentId) -> Result<(), ServiceError> {
    if agent.to_string().len() > MAX_AGENT_LEN {
        return Err(invalid(
            "invalid_agent",
            format!("the agent name is longer than {MAX_AGENT_LEN} bytes; shorten it"),
        ));
    }
    if crate::domain::text::has_nul(&agent.name) {
        return Err(invalid_text("the agent name"));
    }
    Ok(())
}

/// The name of the bootstrap admin token.
pub const BOOTSTRAP_ADMIN: &str = "admin";

/// An export body: streamed page by page, or built into a temporary file.
pub enum Export {
    Stream(futures_util::stream::BoxStream<'static, Result<axum::body::Bytes, StreamError>>),
    File(std::fs::File),
}

/// An uploaded file, streamed from the store piece by piece.
pub struct Source {
    pub name: String,
    pub media_type: String,
    pub size: u64,
    pub body: futures_util::stream::BoxStream<'static, Result<axum::body::Bytes, StoreError>>,
}

/// What a scan uploads: a file, read by its name's extension (JSON items
/// arrive as `items.jsonl`).
#[derive(Debug)]
pub struct Upload {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// How long reading one upload may take.
pub const SCAN_TIME_LIMIT: Duration = Duration::from_secs(120);

/// The longest agent identity (`<token id>/<name>`) accepted.
pub const MAX_AGENT_LEN: usize = 240;
/// The longest a submit may wait for its verdict.
pub const MAX_WAIT_SECONDS: u32 = 300;
/// How long a reviewer's claim lasts.
pub const REVIEW_CLAIM_SECONDS: u32 = 900;

/// The service's use cases over one store.
pub struct Service {
    store: Arc<dyn Store>,
    /// Checks results, and builds the gates whose prompts leases show.
    checker: Arc<Checker>,
    verifiers: Arc<VerifierRegistry>,
    /// Queues the submissions whose gate does not decide at once.
    runner: GateRunner,
    events: broadcast::Sender<QuestEvent>,
    /// Fires when the server stops: waits and event streams end early.
    shutdown: CancellationToken,
    /// Sessions never change after the scan, so they are cached once read.
    sessions: RwLock<HashMap<SessionId, Arc<SessionRow>>>,
    /// The input of leased quests, for the gate that runs in the submit request.
    inputs: Inputs,
    /// Token lookups, trusted for a second.
    tokens: Tokens,
    exports: Exports,
    /// Woken when a re-check run starts (none in tools that run no workers).
    rechecker: Option<Rechecker>,
    /// Fires when a review decision is held, for the worker that records it.
    held_posted: Arc<tokio::sync::Notify>,
    /// The server's key of the overlap draws, read (or made) once.
    review_key: tokio::sync::OnceCell<String>,
    /// The server's key of the gold draws, read (or made) once.
    gold_key: tokio::sync::OnceCell<String>,
}

impl Service {
    /// Wires the use cases to their collaborators.
    pub fn new(
        store: Arc<dyn Store>,
        checker: Arc<Checker>,
        verifiers: Arc<VerifierRegistry>,
        runner: GateRunner,
        events: broadcast::Sender<QuestEvent>,
        shutdown: CancellationToken,
    ) -> Service {
        Service {
            store,
            checker,
            verifiers,
            runner,
            events,
            shutdown,
            sessions: RwLock::new(HashMap::new()),
            inputs: Inputs::new(1 << 16),
            tokens: Tokens::new(Duration::from_secs(1), 1 << 14),
            exports: Exports::default(),
            rechecker: None,
            held_posted: Arc::new(tokio::sync::Notify::new()),
            review_key: tokio::sync::OnceCell::new(),
            gold_key: tokio::sync::OnceCell::new(),
        }
    }

    /// The server's secret key of the overlap draws (`review.overlap_rate`):
    /// made on first use, kept in the database, never served.
    async fn review_key(&self) -> Result<String, StoreError> {
        self.review_key
            .get_or_try_init(|| async {
                let candidate = tokens::new_secret();
                self.store.server_secret("review_overlap", &candidate).await
            })
            .await
            .cloned()
    }

    /// Fires when the server stops.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Whether the store can read and write.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// A consistent copy of the database, made while the server serves.
    pub async fn create_backup(&self) -> Result<crate::store::Backup, ServiceError> {
        Ok(self.store.backup().await?)
    }

    /// The live token with this secret's digest.
    pub async fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        if let Some(token) = self.tokens.get(hash) {
            return Ok(Some(token));
        }
        let found = self.store.find_token(hash).await?;
        if let Some(token) = &found {
            self.tokens.put(token.clone());
        }
        Ok(found)
    }

    /// Gives a leased quest back.
    pub async fn release_lease(
        &self,
        token_id: TokenId,
        quest_id: QuestId,
        lease_id: LeaseId,
    ) -> Result<(), ServiceError> {
        Ok(self.store.release(quest_id, lease_id, token_id).await?)
    }

    /// A submission with what its submitter needs next (the poll after a 202).
    pub async fn get_submission(
        &self,
        id: SubmissionId,
    ) -> Result<api::SubmissionDetail, ServiceError> {
        let mut view = self.store.submission_view(id).await?;
        if let Some((real, remaining)) = self.gold_outer(view.submission.session_id).await? {
            view.submission.session_id = real;
            view.remaining = remaining;
        }
        let response = submit_response(view.clone());
        Ok(api::SubmissionDetail {
            submission: view.submission.into(),
            state: response.state,
            phase: response.phase,
            tries: response.tries,
            max_tries: response.max_tries,
            remaining: response.remaining,
            lease: response.lease,
        })
    }

    /// Every token (never their secrets).
    pub async fn list_tokens(&self) -> Result<Vec<api::Token>, ServiceError> {
        Ok(self
            .store
            .list_tokens()
            .await?
            .into_iter()
            .map(api::Token::from)
            .collect())
    }

    /// Revokes a token. The bootstrap admin token is managed by the server's configuration.
    pub async fn revoke_token(&self, id: TokenId) -> Result<api::Token, ServiceError> {
        let bootstrap = self
            .store
            .list_tokens()
            .await?
            .into_iter()
            .any(|t| t.id == id && t.name == BOOTSTRAP_ADMIN);
        if bootstrap {
            return Err(ServiceError::Store(Refusal::BootstrapToken.into()));
        }
        let revoked = self.store.revoke_token(id).await?;
        self.tokens.clear();
        Ok(revoked.into())
    }

    /// Bounds the exports that run at once (the default: 4, in the system's temporary directory).
    pub fn with_exports(mut self, exports: Exports) -> Service {
        self.exports = exports;
        self
    }

    /// Wakes `rechecker` when a re-check run starts.
    pub fn with_rechecker(mut self, rechecker: Rechecker) -> Service {
        self.rechecker = Some(rechecker);
        self
    }

    /// A receiver of every committed state change.
    pub fn subscribe(&self) -> broadcast::Receiver<QuestEvent> {
        self.events.subscribe()
    }

    async fn session(&self, id: SessionId) -> Result<Arc<SessionRow>, StoreError> {
        if let Some(s) = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return Ok(s.clone());
        }
        let session = Arc::new(self.store.get_session(id).await?);
        self.sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, session.clone());
        Ok(session)
    }

    /// A session with its status.
    pub async fn get_session(&self, id: SessionId) -> Result<Session, ServiceError> {
        let row = self.store.get_session(id).await?;
        if row.gold_of.is_some() {
            return Err(StoreError::NotFound("session").into());
        }
        let status = self.store.session_status(id).await?;
        let full = self.full_status(id, &status).await?;
        Ok(Session {
            status: full,
            ..Session::new(row, &status)
        })
    }

    /// The progress of a session.
    pub async fn get_session_status(&self, id: SessionId) -> Result<Status, ServiceError> {
        let status = self.store.session_status(id).await?;
        self.full_status(id, &status).await
    }

    /// Leases the agent's next quest and renders its prompt.
    pub async fn lease_next_quest(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<NextResponse, ServiceError> {
        check_agent(agent)?;
        let session = self.public_session(session_id).await?;
        let outcome = match self.gold_lease(&session, agent).await? {
            Some((quest, lease)) => LeaseOutcome::Assigned { quest, lease },
            None => self.store.lease_next(session_id, agent).await?,
        };
        Ok(match outcome {
            LeaseOutcome::Assigned { quest, lease } => {
                metrics::counter!("quest_leases_total").increment(1);
                self.inputs.remember(&quest);
                let (prompt, result_example) = self.prompt(&session, &quest, &lease);
                let config = &session.config;
                let url = format!("/v1/quests/{}/submit", quest.id);
                NextResponse::Assigned {
                    quest: LeasedQuest {
                        id: quest.id,
                        session_id,
                        key: quest.key,
                        input: quest.input,
                        tries: quest.tries,
                        max_tries: config.max_tries,
                        last_facts: quest.last_facts,
                    },
                    lease: Lease {
                        id: lease.id,
                        expires_at: lease.expires_at,
                    },
                    prompt,
                    submit: SubmitHint {
                        url,
                        result_example,
                    },
                }
            }
            LeaseOutcome::Wait {
                retry_after_seconds,
            } => NextResponse::Wait {
                retry_after_seconds,
            },
            LeaseOutcome::Finished => NextResponse::Finished,
        })
    }

    /// The prompt for a leased quest and an example result. The session's task
    /// template and examples win; the gate's defaults fill what they leave out.
    fn prompt(&self, session: &SessionRow, quest: &QuestRow, lease: &LeaseRow) -> (String, Value) {
        let config = &session.config;
        let defaults = self
            .checker
            .gate(session.id, &config.gate)
            .ok()
            .map(|g| g.default_prompt());
        let task = prompt::task_for(
            &config.prompt.instructions,
            &quest.key,
            &quest.input,
            || {
                defaults.as_ref().map_or_else(
                    || "Produce the result for the input below.".to_owned(),
                    |d| d.task.clone(),
                )
            },
        );
        let (examples, shape) = match defaults {
            Some(d) if config.prompt.examples.is_empty() => {
                (d.example.into_iter().collect(), d.shape)
            }
            Some(d) => (config.prompt.examples.clone(), d.shape),
            None => (config.prompt.examples.clone(), Vec::new()),
        };
        let text = prompt::render(&PromptParts {
            task: &task,
            examples: &examples,
            key: &quest.key,
            input: &quest.input,
            tries: quest.tries,
            max_tries: config.max_tries,
            last_facts: &quest.last_facts,
            repeated_failure: quest.repeated_failure,
            submit_url: &format!("/v1/quests/{}/submit", quest.id),
            lease_id: &lease.id.to_string(),
            shape: &shape,
        });
        // Without an example, the shape with a placeholder per field: never an invented value.
        let example = examples
            .first()
            .map_or_else(|| prompt::shape_example(&shape), |e| e.result.clone());
        (text, example)
    }

    /// Records a result and answers its verdict, unless a recorded submission
    /// answers it ([`crate::domain::replay`]: the same `idempotency_key`, or
    /// the same result as a PENDING or final one). A gate that decides at once
    /// runs here and its verdict is recorded with the submission; any other
    /// gate runs on the gate runner after a PENDING record, and the answer
    /// waits up to `wait` for its verdict.
    pub async fn submit_result(
        &self,
        token_id: TokenId,
        quest_id: QuestId,
        lease_id: LeaseId,
        result: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
        wait: Duration,
    ) -> Result<SubmitResponse, ServiceError> {
        let (quest, session) = self.quest_and_session(quest_id).await?;
        let result = Value::Object(result);
        let limit = session.config.max_result_bytes;
        let size = crate::domain::text::json_len(&result);
        if size > limit as usize {
            return Err(ServiceError::TooLarge {
                code: "result_too_large",
                message: format!(
                    "the result is {size} bytes of JSON; this session accepts {limit} at most \
                     (its max_result_bytes): send a shorter result"
                ),
            });
        }
        let new = NewSubmission {
            quest_id,
            lease_id,
            token_id,
            result_hash: digest(&result),
            result,
            idempotency_key,
        };
        let companion = session.id;
        let mut response = self.record_result(&quest, &session, new, wait).await?;
        if let Some((real, remaining)) = self.gold_outer(companion).await? {
            response.remaining = remaining;
            // A gold answer just decided meets the floor now, not at the
            // token's next `next`; the answer stands whatever the judgement.
            let real = self.session(real).await?;
            if response.state != crate::domain::State::Todo
                && let Some(config) = &real.config.gold
                && let Err(e) = self.hold_to_the_floor(&real, config, token_id).await
            {
                tracing::warn!(session = %real.id, token = %token_id, error = %e,
                    "the gold floor could not be judged at submit; the next `next` judges it");
            }
        }
        Ok(response)
    }

    async fn record_result(
        &self,
        quest: &QuestInput,
        session: &SessionRow,
        new: NewSubmission,
        wait: Duration,
    ) -> Result<SubmitResponse, ServiceError> {
        let quest_id = new.quest_id;
        let decision = self.decide_at_once(&new, quest, session).await?;
        // Subscribe before the gate can possibly finish, so its event is not missed.
        let mut events = decision.is_none().then(|| self.events.subscribe());
        let view = match self.store.submit(new, decision).await? {
            SubmitOutcome::Recorded { view, l2_jobs } => {
                metrics::counter!("quest_submissions_total").increment(1);
                if view.submission.verdict == SubmissionVerdict::Pending {
                    self.runner.enqueue(&view.submission);
                } else {
                    self.inputs.forget(quest_id, view.quest.state);
                    self.runner.enqueue_verifiers(&l2_jobs);
                }
                view
            }
            SubmitOutcome::Replayed(view) => {
                let response = submit_response(view.clone());
                if response.verdict != SubmissionVerdict::Pending || wait.is_zero() {
                    return Ok(SubmitResponse {
                        replayed: true,
                        ..response
                    });
                }
                view
            }
        };
        let (Some(events), SubmissionVerdict::Pending, false) =
            (events.as_mut(), view.submission.verdict, wait.is_zero())
        else {
            return Ok(submit_response(view));
        };
        let id = view.submission.id;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let event = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                event = tokio::time::timeout_at(deadline, events.recv()) => event,
            };
            match event {
                Err(_) => break,
                Ok(Ok(e)) if e.kind == EventKind::Decided && e.submission_id == Some(id) => break,
                Ok(Ok(_)) => {}
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                    if self.store.get_submission(id).await?.verdict != SubmissionVerdict::Pending {
                        break;
                    }
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => break,
            }
        }
        Ok(submit_response(self.store.submission_view(id).await?))
    }

    /// The input of the quest a result is sent for, and its session.
    async fn quest_and_session(
        &self,
        quest_id: QuestId,
    ) -> Result<(Arc<QuestInput>, Arc<SessionRow>), ServiceError> {
        let quest = match self.inputs.get(quest_id) {
            Some(quest) => quest,
            None => Arc::new(QuestInput::of(&self.store.get_quest(quest_id).await?)),
        };
        let session = self.session(quest.session_id).await?;
        Ok((quest, session))
    }

    /// The decision of the session's gate when it decides at once.
    async fn decide_at_once(
        &self,
        new: &NewSubmission,
        quest: &QuestInput,
        session: &SessionRow,
    ) -> Result<Option<GateDecision>, ServiceError> {
        let check = Check {
            session_id: quest.session_id,
            quest_id: new.quest_id,
            key: &quest.key,
            input: &quest.input,
            result: &new.result,
            config: &session.config,
            gold: session.gold_of.is_some(),
        };
        Ok(self.checker.decide_at_once(&check).await?)
    }

    /// Extends a lease.
    pub async fn heartbeat_lease(
        &self,
        token_id: TokenId,
        quest_id: QuestId,
        lease_id: LeaseId,
    ) -> Result<Lease, ServiceError> {
        let lease = self.store.heartbeat(quest_id, lease_id, token_id).await?;
        Ok(Lease {
            id: lease.id,
            expires_at: lease.expires_at,
        })
    }

    /// A quest with its full history.
    pub async fn get_quest(&self, id: QuestId) -> Result<api::Quest, ServiceError> {
        let quest = self.store.get_quest(id).await?;
        self.with_history(quest).await
    }

    /// A quest row with its submissions, reviews and L2 answers, as the API
    /// shows it: a gold quest's, like its submissions', names the session it
    /// was handed out in, not its companion.
    async fn with_history(&self, mut quest: QuestRow) -> Result<api::Quest, ServiceError> {
        let (mut submissions, reviews) = self.store.quest_history(quest.id).await?;
        let outer = self.outer_session(quest.session_id).await?;
        quest.session_id = outer;
        for submission in &mut submissions {
            submission.session_id = outer;
        }
        let l2 = self.store.l2_answers(quest.id).await?;
        let rechecks = self.store.rechecks(quest.id).await?;
        let marks = self.store.quest_marks(quest.id).await?;
        Ok(api::Quest {
            suspect: marks.suspect,
            audit_rejected: marks.audit_rejected,
            ..api::Quest::new(quest, submissions, reviews, l2).with_rechecks(rechecks)
        })
    }
}

fn submit_response(view: SubmissionView) -> SubmitResponse {
    let SubmissionView {
        submission,
        quest,
        max_tries,
        remaining,
        lease,
    } = view;
    let lease = lease
        .filter(|l| l.id == submission.lease_id && submission.verdict != SubmissionVerdict::Pending)
        .map(|l| Lease {
            id: l.id,
            expires_at: l.expires_at,
        });
    SubmitResponse {
        submission_id: submission.id,
        verdict: submission.verdict,
        state: quest.state,
        phase: quest.phase,
        tries: quest.tries,
        max_tries,
        facts: submission.facts,
        remaining,
        receipt: submission.receipt,
        lease,
        replayed: false,
    }
}
