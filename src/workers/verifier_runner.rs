//! The L2 worker: asks each queued verifier job's backend, within the
//! backend's concurrency limit and deadline, and records the outcome; the store
//! applies the decision when a submission's last job is recorded.
//!
//! Jobs are durable before they are queued here (written with the L1 PASS), so
//! a crash loses nothing: at start-up every unanswered job is queued again. On
//! shutdown, calls in flight are abandoned and stay queued for the next start.
//!
//! A job is asked at most once per run of the server: a job already queued or
//! running here is not queued again, and a job the store says is answered is
//! not asked. A store failure (reading the job, recording the answer) is
//! retried by the workers' one policy ([`crate::workers::retry`]); the
//! answer already obtained is kept, so the backend is not asked again.
//!
//! A transient failure (refused connection, 5xx, 429) is retried with
//! exponential back-off until the verifier's `timeout_ms`, counted from the first
//! attempt, runs out; then, like any permanent failure or a reply that is not a
//! clean YES or NO, it is recorded as no answer.
//!
//! Each queued job is a small task waiting on its backend's semaphore, so a
//! slow backend never holds up another. (With a very large backlog at start-up
//! that is many idle tasks; a bounded feeder per backend would cap them.)

use crate::domain::ids::L2JobId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::domain::State;
use crate::domain::verify::{Answer, L2JobStatus, Question};
use crate::store::{Job, JobClaim, L2Job, L2Recorded, NewL2Answer, Store, StoreError};
use crate::verifiers::{AskError, Declared, VerifierRegistry};
use crate::workers::claims::{self, Held};
use crate::workers::retry::{Pool, Retry, Slot, Stop};

/// The first pause after a transient failure; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs L2 jobs.
#[derive(Clone)]
pub struct VerifierRunner {
    inner: Arc<Inner>,
    queue: mpsc::UnboundedSender<L2JobId>,
}

struct Inner {
    store: Arc<dyn Store>,
    verifiers: Arc<VerifierRegistry>,
    /// One per declared verifier: its `max_concurrency`.
    permits: HashMap<String, Pool>,
    /// Jobs queued or running here, so that none runs twice at once.
    in_flight: Mutex<HashSet<L2JobId>>,
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
                Some((name.to_owned(), Pool::new(declared.max_concurrency)))
            })
            .collect();
        let (queue, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            verifiers,
            permits,
            in_flight: Mutex::new(HashSet::new()),
        });
        tokio::spawn(run(inner.clone(), rx, shutdown));
        VerifierRunner { inner, queue }
    }

    /// Queues jobs that are durable in the store; a job already queued or
    /// running here is skipped.
    pub fn enqueue(&self, jobs: impl IntoIterator<Item = L2JobId>) {
        for id in jobs {
            // After shutdown (or on an API-only replica) the job stays queued
            // in the store, for the next start or a replica with workers.
            if self.inner.in_flight().insert(id) && self.queue.send(id).is_err() {
                self.inner.in_flight().remove(&id);
            }
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
    /// `None` when the job was already answered: nothing is asked then.
    pub async fn run_once(&self, job_id: L2JobId) -> Result<Option<L2Recorded>, StoreError> {
        let job = self.inner.store.l2_job(job_id).await?;
        if job.status == L2JobStatus::Answered {
            return Ok(None);
        }
        let (answer, latency) = self.inner.ask(&job).await;
        let recorded = self.inner.store.record_l2_answer(answer).await?;
        record_metrics(&recorded, latency);
        Ok(Some(recorded))
    }
}

async fn run(
    inner: Arc<Inner>,
    mut rx: mpsc::UnboundedReceiver<L2JobId>,
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
                _ = inner.run_until_recorded(id, &shutdown) => {}
            }
            inner.in_flight().remove(&id);
        });
    }
}

impl Inner {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<L2JobId>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a job until its answer is stored: reads it, asks its backend within
    /// the backend's concurrency limit, records the outcome, under the
    /// [`retry`] policy: transient store failures are waited out (with the
    /// backend's permit given back during each wait); a job or quest that is
    /// gone, or no longer verified for this job, is dropped; an answer the
    /// database refuses is recorded once more cleaned, then as no answer
    /// naming the cause. Only shutdown stops it otherwise.
    async fn run_until_recorded(&self, id: L2JobId, shutdown: &CancellationToken) {
        let name = format!("L2 job {id}");
        let retry = Retry::new(&name, shutdown);
        let dropped = |stop: Stop| {
            if let Stop::Permanent(e, _) = stop {
                tracing::error!(job = %id, error = %e, "L2 job dropped: nothing to record it on");
            }
        };
        let mut unpooled = Slot::unpooled();
        let job = match retry
            .until_stored(&mut unpooled, || self.store.l2_job(id))
            .await
        {
            Ok(job) => job,
            Err(stop) => return dropped(stop),
        };
        if job.status == L2JobStatus::Answered {
            return; // an earlier run asked and recorded it
        }
        // Of several replicas, the one holding the claim asks; the others leave it.
        let claim = match retry
            .until_stored(&mut unpooled, || {
                self.store.claim_job(Job::Verify(id), claims::CLAIM_SECONDS)
            })
            .await
        {
            Ok(Some(claim)) => claim,
            Ok(None) => return,
            Err(stop) => return dropped(stop),
        };
        let work = async {
            // Read again under the claim: an earlier holder may have answered it
            // since the read above.
            let job = match retry
                .until_stored(&mut Slot::unpooled(), || self.store.l2_job(id))
                .await
            {
                Ok(job) => job,
                Err(stop) => {
                    dropped(stop);
                    return None;
                }
            };
            if job.status == L2JobStatus::Answered {
                return Some(true);
            }
            let mut slot = match self.permits.get(&job.verifier) {
                // The pools are never closed.
                Some(pool) => Slot::take(pool).await.unwrap_or_else(Slot::unpooled),
                None => Slot::unpooled(),
            };
            let (answer, latency) = self.ask(&job).await;
            let recorded = match self.record(answer, &claim, &retry, &mut slot).await {
                Ok(recorded) => recorded,
                Err(stop) => {
                    dropped(stop);
                    return None;
                }
            };
            let Some(recorded) = recorded else {
                return Some(false);
            };
            record_metrics(&recorded, latency);
            Some(true)
        };
        match claims::hold(self.store.as_ref(), &claim, work).await {
            Held::Done(Some(true)) => {
                if let Err(e) = self.store.release_job(&claim).await {
                    // It lapses by itself within moments.
                    tracing::warn!(job = %id, error = %e, "the claim on an answered L2 job was not released");
                }
            }
            // Shut down (its claims are given back with all of this replica's),
            // or the job is gone.
            Held::Done(None) => {}
            Held::Done(Some(false)) | Held::Lost => {
                tracing::warn!(job = %id, "the claim on this L2 job was lost: its answer is not recorded here");
            }
        }
    }

    /// Records an answer while `claim` holds (`None`: it was lost). Data the
    /// database refuses (not a refusal of the job itself) is recorded once
    /// more with its texts cleaned, then as no answer naming the cause, so
    /// that the quest goes on to its decision.
    async fn record(
        &self,
        answer: NewL2Answer,
        claim: &JobClaim,
        retry: &Retry<'_>,
        slot: &mut Slot<'_>,
    ) -> Result<Option<L2Recorded>, Stop> {
        let mut answer = answer;
        let mut attempt = 0;
        loop {
            let recorded = retry
                .until_stored(slot, || {
                    let record = self.store.record_l2_answer(answer.clone());
                    claims::record_if_held(self.store.as_ref(), claim, record)
                })
                .await;
            let cause = match recorded {
                Err(Stop::Permanent(e, cause)) if cause.about_the_data() && attempt < 2 => {
                    tracing::error!(job = %answer.job_id, error = %e, attempt, "the database refused the L2 answer");
                    cause
                }
                other => return other,
            };
            answer = match attempt {
                0 => cleaned(answer),
                _ => NewL2Answer {
                    raw_reply: None,
                    answer: None,
                    detail: format!(
                        "no answer stored: the database refused the verifier's reply ({cause})"
                    ),
                    ..answer
                },
            };
            attempt += 1;
        }
    }

    /// Asks the job's verifier, retries included; the outcome and how long it took.
    async fn ask(&self, job: &L2Job) -> (NewL2Answer, Duration) {
        let started = Instant::now();
        let (model, asked) = match self.verifiers.get(&job.verifier) {
            Some(declared) => (
                declared.verifier.model().to_owned(),
                ask_until_deadline(declared, job, started).await,
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
        let Asked {
            mut raw,
            mut detail,
            ..
        } = asked;
        // A model's reply is text nobody checked: cleaned before it is stored.
        crate::domain::text::clean_reply(&mut raw, &mut detail);
        let answer = NewL2Answer {
            job_id: job.id,
            model,
            raw_reply: raw,
            answer: asked.answer,
            detail,
            attempts: asked.attempts,
            latency_ms: latency.as_millis() as u64,
        };
        (answer, latency)
    }
}

/// `answer` with U+0000 replaced by U+FFFD in every text: PostgreSQL
/// stores no NUL in text.
fn cleaned(answer: NewL2Answer) -> NewL2Answer {
    let clean = |text: String| text.replace('\0', "\u{FFFD}");
    NewL2Answer {
        model: clean(answer.model),
        raw_reply: answer.raw_reply.map(clean),
        detail: clean(answer.detail),
        ..answer
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
            let question = Question {
                text: job.question.clone(),
                flag_on: job.flag_on,
            };
            match tokio::time::timeout(left, declared.verifier.ask(&job.request, &question)).await {
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

/// Counts a freshly recorded answer; a replayed one was counted when it was recorded.
fn record_metrics(recorded: &L2Recorded, latency: Duration) {
    if recorded.replayed {
        return;
    }
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
        async fn ask(&self, _: &VerifierRequest, _: &Question) -> Result<Reply, AskError> {
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
            id: L2JobId::new(),
            submission_id: crate::domain::ids::SubmissionId::new(),
            quest_id: crate::domain::ids::QuestId::new(),
            session_id: crate::domain::ids::SessionId::new(),
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
            status: L2JobStatus::Queued,
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
