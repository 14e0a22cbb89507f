//! The L2 worker: asks each queued verifier job's backend, within the
//! backend's concurrency limit and deadline, and records the outcome; the store
//! applies the decision when a submission's last job is recorded.
//!
//! Jobs are durable before they are queued here (written with the L1 PASS), so
//! a crash loses nothing: at start-up every unanswered job is queued again. On
//! shutdown, calls in flight are abandoned and stay queued for the next start.
//!
//! A transient failure (refused connection, 5xx, 429) is retried with
//! exponential back-off until the verifier's `timeout_ms`, counted from the first
//! attempt, runs out; then, like any permanent failure or a reply that is not a
//! clean YES or NO, it is recorded as no answer.
//!
//! Each queued job is a small task waiting on its backend's semaphore, so a
//! slow backend never holds up another. (With a very large backlog at start-up
//! that is many idle tasks; a bounded feeder per backend would cap them.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::domain::State;
use crate::domain::verify::Answer;
use crate::store::{L2Job, L2Recorded, NewL2Answer, Store, StoreError};
use crate::verifiers::{AskError, Declared, VerifierRegistry};

/// The first pause after a transient failure; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs L2 jobs.
#[derive(Clone)]
pub struct VerifierRunner {
    inner: Arc<Inner>,
    queue: mpsc::UnboundedSender<Uuid>,
}

struct Inner {
    store: Arc<dyn Store>,
    verifiers: Arc<VerifierRegistry>,
    /// One per declared verifier: its `max_concurrency`.
    permits: HashMap<String, Arc<Semaphore>>,
}

impl VerifierRunner {
    /// Starts the worker; it stops (abandoning calls in flight) when `shutdown` fires.
    pub fn start(
        store: Arc<dyn Store>,
        verifiers: Arc<VerifierRegistry>,
        shutdown: CancellationToken,
    ) -> VerifierRunner {
        let permits = verifiers
            .names()
            .into_iter()
            .filter_map(|name| {
                let declared = verifiers.get(name)?;
                Some((
                    name.to_owned(),
                    Arc::new(Semaphore::new(declared.max_concurrency)),
                ))
            })
            .collect();
        let (queue, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            verifiers,
            permits,
        });
        tokio::spawn(run(inner.clone(), rx, shutdown));
        VerifierRunner { inner, queue }
    }

    /// Queues jobs that are durable in the store.
    pub fn enqueue(&self, jobs: impl IntoIterator<Item = Uuid>) {
        for id in jobs {
            // After shutdown the job stays queued in the store for the next start.
            let _ = self.queue.send(id);
        }
    }

    /// Queues every unanswered job in the store (at start-up).
    pub async fn requeue_pending(&self) -> Result<usize, StoreError> {
        let pending = self.inner.store.pending_l2_jobs().await?;
        let n = pending.len();
        self.enqueue(pending);
        Ok(n)
    }

    /// Runs one job now, ignoring the concurrency limit: ask, retry, record.
    pub async fn run_once(&self, job_id: Uuid) -> Result<L2Recorded, StoreError> {
        self.inner.run_once(job_id).await
    }
}

async fn run(
    inner: Arc<Inner>,
    mut rx: mpsc::UnboundedReceiver<Uuid>,
    shutdown: CancellationToken,
) {
    loop {
        let id = tokio::select! {
            _ = shutdown.cancelled() => break,
            id = rx.recv() => match id { Some(id) => id, None => break },
        };
        let inner = inner.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                outcome = inner.run_limited(id) => if let Err(e) = outcome {
                    tracing::error!(job = %id, error = %e, "L2 job failed; it stays queued until restart");
                }
            }
        });
    }
}

impl Inner {
    async fn run_limited(&self, job_id: Uuid) -> Result<L2Recorded, StoreError> {
        let job = self.store.l2_job(job_id).await?;
        let _permit = match self.permits.get(&job.verifier) {
            Some(permits) => Some(
                permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| StoreError::Unavailable)?,
            ),
            None => None,
        };
        self.run_once(job_id).await
    }

    async fn run_once(&self, job_id: Uuid) -> Result<L2Recorded, StoreError> {
        let job = self.store.l2_job(job_id).await?;
        let started = Instant::now();
        let (model, asked) = match self.verifiers.get(&job.verifier) {
            Some(declared) => (
                declared.verifier.model().to_owned(),
                ask_until_deadline(declared, &job, started).await,
            ),
            // A verifier removed from the configuration since the job was written.
            None => (
                String::new(),
                Asked::no_answer(
                    format!("verifier `{}` is not declared on this server", job.verifier),
                    0,
                ),
            ),
        };
        let latency = started.elapsed();
        let recorded = self
            .store
            .record_l2_answer(NewL2Answer {
                job_id,
                model,
                raw_reply: asked.raw,
                answer: asked.answer,
                detail: asked.detail,
                attempts: asked.attempts,
                latency_ms: latency.as_millis() as u64,
            })
            .await?;
        record_metrics(&recorded, latency);
        Ok(recorded)
    }
}

/// What asking one verifier came to.
struct Asked {
    raw: Option<String>,
    answer: Option<Answer>,
    detail: String,
    attempts: u32,
}

impl Asked {
    fn no_answer(detail: String, attempts: u32) -> Asked {
        Asked {
            raw: None,
            answer: None,
            detail,
            attempts,
        }
    }
}

/// Asks until a reply, a permanent failure, or the verifier's deadline
/// (counted from `started`, retries and back-off included).
async fn ask_until_deadline(declared: &Declared, job: &L2Job, started: Instant) -> Asked {
    let deadline = started + declared.timeout;
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    let mut last_error: Option<String> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            attempts += 1;
            match tokio::time::timeout(left, declared.verifier.ask(&job.request, &job.question))
                .await
            {
                Ok(Ok(reply)) => {
                    return match reply.parsed {
                        Ok((answer, reason)) => Asked {
                            raw: Some(reply.raw),
                            answer: Some(answer),
                            detail: reason,
                            attempts,
                        },
                        Err(why) => Asked {
                            raw: Some(reply.raw),
                            answer: None,
                            detail: format!("not an answer: {why}"),
                            attempts,
                        },
                    };
                }
                Ok(Err(AskError::Permanent(e))) => return Asked::no_answer(e, attempts),
                Ok(Err(AskError::Transient(e))) => {
                    metrics::counter!("quest_l2_retries_total", "verifier" => job.verifier.clone())
                        .increment(1);
                    last_error = Some(e);
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(backoff.min(left)).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Err(_) => {}
            }
        }
        let last = last_error
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default();
        return Asked::no_answer(
            format!(
                "no valid answer within {} ms ({attempts} attempts){last}",
                declared.timeout.as_millis()
            ),
            attempts,
        );
    }
}

fn record_metrics(recorded: &L2Recorded, latency: Duration) {
    let a = &recorded.answer;
    let verifier = a.verifier.clone();
    let answer = a.answer.map_or("none", |a| a.as_str());
    metrics::counter!("quest_l2_answers_total", "verifier" => verifier.clone(), "answer" => answer)
        .increment(1);
    if a.answer.is_none() {
        metrics::counter!("quest_l2_no_answers_total", "verifier" => verifier.clone()).increment(1);
    }
    if a.flagged {
        metrics::counter!("quest_l2_flags_total", "verifier" => verifier.clone()).increment(1);
    }
    metrics::histogram!("quest_l2_latency_seconds", "verifier" => verifier)
        .record(latency.as_secs_f64());
    for (x, y, agreed) in &recorded.compared {
        metrics::counter!("quest_l2_pair_compared_total", "a" => x.clone(), "b" => y.clone())
            .increment(1);
        if *agreed {
            metrics::counter!("quest_l2_pair_agreed_total", "a" => x.clone(), "b" => y.clone())
                .increment(1);
        }
    }
    if let Some(quest) = &recorded.verified {
        let outcome = if quest.state == State::Pass {
            "pass"
        } else {
            "review"
        };
        metrics::counter!("quest_l2_decisions_total", "outcome" => outcome).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::domain::verify::{Artifact, Contract, FlagOn, VerifierRequest};
    use crate::verifiers::{Reply, Verifier};

    /// A backend that plays a script of outcomes, then hangs.
    struct Scripted(Mutex<VecDeque<Result<Reply, AskError>>>);

    #[async_trait]
    impl Verifier for Scripted {
        fn model(&self) -> &str {
            "scripted"
        }
        async fn ask(&self, _: &VerifierRequest, _: &str) -> Result<Reply, AskError> {
            let next = self.0.lock().unwrap().pop_front();
            match next {
                Some(outcome) => outcome,
                None => std::future::pending().await,
            }
        }
    }

    fn reply(raw: &str) -> Result<Reply, AskError> {
        Ok(Reply {
            raw: raw.into(),
            parsed: crate::domain::verify::parse_reply(raw),
        })
    }

    fn down() -> Result<Reply, AskError> {
        Err(AskError::Transient("connection refused".into()))
    }

    async fn ask(script: Vec<Result<Reply, AskError>>, timeout: Duration) -> Asked {
        let declared = Declared {
            verifier: Arc::new(Scripted(Mutex::new(script.into()))),
            max_concurrency: 1,
            timeout,
        };
        let job = L2Job {
            id: Uuid::nil(),
            submission_id: Uuid::nil(),
            quest_id: Uuid::nil(),
            session_id: Uuid::nil(),
            verifier: "alpha".into(),
            question_index: 0,
            question: "q?".into(),
            flag_on: FlagOn::Yes,
            request: VerifierRequest {
                contract: Contract {
                    task: String::new(),
                    input: json!({}),
                },
                artifact: Artifact {
                    result: json!({}),
                    evidence: vec![],
                },
            },
            answered: false,
        };
        ask_until_deadline(&declared, &job, Instant::now()).await
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_until_a_clean_answer() {
        let asked = ask(
            vec![down(), down(), reply("YES: personal")],
            Duration::from_secs(20),
        )
        .await;
        assert_eq!((asked.answer, asked.attempts), (Some(Answer::Yes), 3));
        assert_eq!(asked.detail, "personal");
    }

    #[tokio::test(start_paused = true)]
    async fn a_backend_that_stays_down_is_no_answer_at_the_deadline_with_its_last_error() {
        let started = Instant::now();
        let asked = ask(vec![down(); 100], Duration::from_millis(1_000)).await;
        assert_eq!(asked.answer, None);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(1_000),
            "back-off stops at the deadline"
        );
        assert!(
            asked.attempts >= 4 && asked.attempts < 100,
            "{}",
            asked.attempts
        );
        assert!(
            asked.detail.starts_with("no valid answer within 1000 ms"),
            "{}",
            asked.detail
        );
        assert!(
            asked.detail.ends_with("last error: connection refused"),
            "{}",
            asked.detail
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_backend_is_no_answer_at_the_deadline() {
        let asked = ask(vec![], Duration::from_millis(500)).await;
        assert_eq!((asked.answer, asked.attempts), (None, 1));
        assert_eq!(asked.detail, "no valid answer within 500 ms (1 attempts)");
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_failures_and_unclean_replies_are_not_retried() {
        let asked = ask(
            vec![Err(AskError::Permanent("HTTP 401".into())), reply("NO")],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            (asked.answer, asked.attempts, asked.detail.as_str()),
            (None, 1, "HTTP 401")
        );
        let asked = ask(
            vec![reply("Probably not"), reply("NO")],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!((asked.answer, asked.attempts), (None, 1));
        assert_eq!(asked.raw.as_deref(), Some("Probably not"));
        assert!(asked.detail.starts_with("not an answer"));
    }
}
