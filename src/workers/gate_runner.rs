//! The gate runner: a queue of PENDING submissions and the tasks that run
//! each through its session's gate and apply the decision. The checks wait
//! for a worker in the replica's fair [`Scheduler`], shared with the
//! re-checker, under the submission's session and token; a submission found
//! by a scan or an event (start-up, the orphan scan) has its owner looked up
//! once first, in one task.
//!
//! A submission is durable (PENDING) before it is queued, so a crash loses no
//! work: at start-up every PENDING submission is queued again, and because
//! gates are deterministic the re-run decides what the first run would have.
//!
//! For a session with AI verifiers, the runner also cuts out what they may see
//! (the contract and the gate's artifact); an L1 PASS is stored together with
//! its L2 jobs, which are then handed to the [`VerifierRunner`].

use crate::domain::fair::Owner;
use crate::domain::ids::{L2JobId, QuestId, SessionId, SubmissionId};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::domain::prompt;
use crate::domain::receipt::ReceiptParts;
use crate::domain::session::GateConfig;
use crate::domain::verify::{Artifact, Contract, VerifierRequest};
use crate::domain::{Fact, SubmissionVerdict, Verdict};
use crate::gates::fetch::PageCache;
use crate::gates::{Gate, GateOutcome, GateRegistry, HOLDERS_SHOWN, SessionView};
use crate::store::{
    Decided, GateDecision, GateJob, Job, JobClaim, Store, StoreError, SubmissionRow, is_plain_field,
};
use crate::workers::VerifierRunner;
use crate::workers::claims::{self, Held};
use crate::workers::recent_gates::{KEPT_GATES, RecentGates};
use crate::workers::retry::{Cause, Retry, Slot, Stop};
use crate::workers::scheduler::Scheduler;

/// One result to check for one quest.
pub struct Check<'a> {
    pub session_id: SessionId,
    pub quest_id: QuestId,
    pub key: &'a str,
    pub input: &'a serde_json::Value,
    pub result: &'a serde_json::Value,
    pub config: &'a crate::domain::session::SessionConfig,
}

/// Runs gates for queued submissions.
#[derive(Clone)]
pub struct GateRunner {
    inner: Arc<Inner>,
    /// Submissions whose owner is looked up before they are queued.
    found: mpsc::UnboundedSender<SubmissionId>,
}

struct Inner {
    store: Arc<dyn Store>,
    registry: Arc<GateRegistry>,
    verifiers: VerifierRunner,
    /// The replica's gate workers, shared with the re-checker.
    scheduler: Scheduler,
    shutdown: CancellationToken,
    /// The longest a check may take, unless its gate declares its own.
    timeout: Duration,
    /// Submissions queued or running here, so that one queued twice (by the
    /// orphan scan or an event) is checked once.
    in_flight: Mutex<HashSet<SubmissionId>>,
    /// Built gates of the sessions used most recently: a session's gate config
    /// never changes, so a gate dropped here is simply built again.
    gates: Mutex<RecentGates>,
}

impl GateRunner {
    /// Starts a runner with `workers` gate workers (shared with re-checks,
    /// see [`GateRunner::scheduler`]); L1 PASSes that await AI verifiers go
    /// on to `verifiers`. It stops when `shutdown` fires.
    pub fn start(
        store: Arc<dyn Store>,
        registry: Arc<GateRegistry>,
        verifiers: VerifierRunner,
        workers: usize,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> GateRunner {
        let (found, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            registry,
            verifiers,
            scheduler: Scheduler::start(workers, shutdown.clone()),
            shutdown,
            timeout,
            in_flight: Mutex::new(HashSet::new()),
            gates: Mutex::new(RecentGates::new(KEPT_GATES)),
        });
        tokio::spawn(look_up_owners(inner.clone(), rx));
        GateRunner { inner, found }
    }

    /// The replica's gate workers: the re-checker queues its checks there too.
    pub fn scheduler(&self) -> Scheduler {
        self.inner.scheduler.clone()
    }

    /// Queues a PENDING submission just recorded, under its session and the
    /// token that submitted it, unless it is queued or running here already.
    pub fn enqueue(&self, submission: &SubmissionRow) {
        if self.inner.in_flight().insert(submission.id) {
            self.inner.schedule(submission.id, owner(submission));
        }
    }

    /// Queues a PENDING submission found by a scan or an event, once its
    /// owner is looked up, unless it is queued or running here already.
    pub fn enqueue_found(&self, submission_id: SubmissionId) {
        if !self.inner.in_flight().insert(submission_id) {
            return;
        }
        // The receiver lives as long as the runner; after shutdown (or on an
        // API-only replica) the submission stays PENDING in the store, for the
        // next start or a replica with workers.
        if self.found.send(submission_id).is_err() {
            self.inner.in_flight().remove(&submission_id);
        }
    }

    /// Queues every PENDING submission in the store (at start-up).
    pub async fn requeue_pending(&self) -> Result<usize, StoreError> {
        let pending = self.inner.store.pending_submissions().await?;
        for id in &pending {
            self.enqueue_found(*id);
        }
        Ok(pending.len())
    }

    /// The gate of a session, built once and cached.
    pub fn gate(
        &self,
        session_id: SessionId,
        config: &GateConfig,
    ) -> Result<Arc<dyn Gate>, String> {
        self.inner.gate(session_id, config)
    }

    /// The decision of a gate that decides at once (see
    /// [`Gate::decides_at_once`]) on a result for a quest, made in the
    /// caller's task; `None` when the session's gate must run here after a
    /// PENDING record.
    pub async fn decide_at_once(
        &self,
        check: &Check<'_>,
    ) -> Result<Option<GateDecision>, StoreError> {
        match self.gate(check.session_id, &check.config.gate) {
            Ok(gate) if gate.decides_at_once() => Ok(Some(
                self.inner.decide(check, Ok(gate), Others::Session).await?,
            )),
            _ => Ok(None),
        }
    }

    /// Runs the session's gate on an accepted result and seals its decision,
    /// applying nothing: a re-check. The same gate, timeout and outside world
    /// (per-host limits, the SSRF guard) as a submission's check, but no other
    /// quest of the session: a re-check asks whether the world still confirms
    /// the result, and what the session's other quests hold now is no part of
    /// that world (another quest under review with the same address would
    /// otherwise leave this one `unconfirmed`).
    ///
    /// The gate reads pages through `pages`, the re-check run's own cache,
    /// never the submissions' one: a page read by a submission's check a
    /// minute ago says nothing about the world now. It is built for the
    /// re-check (re-checks are rare; the runner's built gates hold the
    /// submissions' cache).
    pub async fn recheck(
        &self,
        check: &Check<'_>,
        pages: &Arc<PageCache>,
    ) -> Result<GateDecision, StoreError> {
        let gate = self
            .inner
            .registry
            .build_with(&check.config.gate, pages)
            .map_err(|e| e.to_string());
        self.inner.decide(check, gate, Others::Nobody).await
    }

    /// An empty page cache for a re-check run (see [`GateRunner::recheck`]).
    pub fn fresh_pages(&self) -> Arc<PageCache> {
        self.inner.registry.fresh_pages()
    }

    /// Queues the L2 jobs a PASS decided in a request created.
    pub fn enqueue_verifiers(&self, jobs: &[L2JobId]) {
        self.inner.verifiers.enqueue(jobs.iter().copied());
    }

    /// Decides one submission: runs its gate and applies the verdict.
    pub async fn run_once(&self, submission_id: SubmissionId) -> Result<Decided, StoreError> {
        self.inner.run_once(submission_id).await
    }
}

/// Whose check a submission is: its session's and its submitter's token's.
fn owner(submission: &SubmissionRow) -> Owner {
    Owner::Check {
        session: submission.session_id,
        token: submission.agent.token,
    }
}

/// Looks up the owner of each submission found by a scan or an event, one at
/// a time, and queues the ones still PENDING.
async fn look_up_owners(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<SubmissionId>) {
    let shutdown = inner.shutdown.clone();
    loop {
        let id = tokio::select! {
            _ = shutdown.cancelled() => break,
            id = rx.recv() => match id { Some(id) => id, None => break },
        };
        let name = format!("owner of {id}");
        let found = Retry::new(&name, &shutdown)
            .until_stored(&mut Slot::unpooled(), || inner.store.get_submission(id))
            .await;
        match found {
            Ok(submission) if submission.verdict == SubmissionVerdict::Pending => {
                inner.schedule(id, owner(&submission));
            }
            // Decided meanwhile (by another replica): nothing to check.
            Ok(_) => {
                inner.in_flight().remove(&id);
            }
            Err(Stop::Shutdown) => break,
            Err(Stop::Permanent(e, _)) => {
                tracing::error!(submission = %id, error = %e, "a PENDING submission could not be read; it is not checked here");
                inner.in_flight().remove(&id);
            }
        }
    }
}

/// Whose results a check compares the result's unique fields with.
#[derive(Debug, Clone, Copy)]
enum Others {
    /// The session's other quests that hold or await a result: a submission's check.
    Session,
    /// None: a re-check of an accepted result.
    Nobody,
}

/// What a claimed check came to.
enum Claimed {
    Decided,
    /// An earlier holder decided it: not checked again.
    AlreadyDecided,
    /// The claim lapsed before the verdict was recorded: nothing recorded.
    Lost,
}

impl Inner {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<SubmissionId>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the check of a submission (in flight already) on the
    /// scheduler; its task runs once a worker is its.
    fn schedule(self: &Arc<Self>, id: SubmissionId, owner: Owner) {
        let inner = self.clone();
        let queued = self.scheduler.queue(owner, move |permit| {
            tokio::spawn(async move {
                let permits = inner.scheduler.permits(owner);
                let slot = Slot::holding(&permits, permit);
                inner.run_until_decided(id, slot, &inner.shutdown).await;
                inner.in_flight().remove(&id);
            });
        });
        if !queued {
            // Closed: the submission stays PENDING, for the next start.
            self.in_flight().remove(&id);
        }
    }

    /// Runs a submission until its decision is stored, under a renewed claim
    /// (see [`claims`]) and the [`retry`] policy: a transient store failure
    /// is waited out (a quest must never stay `checking` for want of a
    /// retry) with the worker given back during each wait; a permanent one
    /// while recording is handled by [`Inner::record`]. Only shutdown stops
    /// it, leaving the submission PENDING for the next start, or a lost
    /// claim, leaving it to the holder that took it over.
    async fn run_until_decided(
        &self,
        id: SubmissionId,
        mut slot: Slot<'_>,
        shutdown: &CancellationToken,
    ) {
        let name = format!("gate {id}");
        let retry = Retry::new(&name, shutdown);
        let claimed = retry
            .until_stored(&mut slot, || {
                self.store.claim_job(Job::Gate(id), claims::CLAIM_SECONDS)
            })
            .await;
        let claim = match claimed {
            Ok(Some(claim)) => claim,
            // Another runner (of this replica or another) holds the check.
            Ok(None) | Err(Stop::Shutdown) => return,
            Err(Stop::Permanent(e, _)) => {
                tracing::error!(submission = %id, error = %e, "the check could not be claimed");
                return;
            }
        };
        let work = self.decide_claimed(id, &claim, &retry, &mut slot);
        match claims::hold(self.store.as_ref(), &claim, work).await {
            Held::Lost | Held::Done(Some(Claimed::Lost)) => {
                tracing::warn!(submission = %id, "the claim on this check was lost: its verdict is not recorded here");
                return;
            }
            // Decided, or stopped (shutdown, or nothing left to decide).
            Held::Done(_) => {}
        }
        if let Err(e) = self.store.release_job(&claim).await {
            // It lapses by itself within moments.
            tracing::warn!(submission = %id, error = %e, "the claim on a decided check was not released");
        }
    }

    /// [`Inner::run_once`] for the holder of `claim`: a submission decided
    /// meanwhile (by an earlier holder) is not checked again, and the verdict
    /// is recorded only if a renewal just before says the claim still lives.
    /// `None` when it stopped: shutdown, or nothing left to decide.
    async fn decide_claimed(
        &self,
        submission_id: SubmissionId,
        claim: &JobClaim,
        retry: &Retry<'_>,
        slot: &mut Slot<'_>,
    ) -> Option<Claimed> {
        let gone = |e: StoreError| {
            tracing::error!(submission = %submission_id, error = %e, "nothing to decide: the submission or its quest is gone");
        };
        let job = match retry
            .until_stored(slot, || self.store.gate_job(submission_id))
            .await
        {
            Ok(job) => job,
            Err(Stop::Shutdown) => return None,
            Err(Stop::Permanent(e, _)) => {
                gone(e);
                return None;
            }
        };
        if job.submission.verdict != SubmissionVerdict::Pending {
            return Some(Claimed::AlreadyDecided);
        }
        // Only the look-up of the session's other quests fails here, before
        // the gate runs: retrying it runs no gate twice.
        let decision = match retry.until_stored(slot, || self.decide_job(&job)).await {
            Ok(decision) => decision,
            Err(Stop::Shutdown) => return None,
            Err(Stop::Permanent(e, _)) => {
                gone(e);
                return None;
            }
        };
        self.record(&job, decision, claim, retry, slot).await
    }

    /// Records a decision. A permanent store error is answered once by the
    /// same decision with every text cleaned ([`GateOutcome::bounded`]), and
    /// if the database refuses that too, by a REVIEW whose one fact names
    /// the cause (its SQLSTATE, or the refusal): the quest goes to a person
    /// instead of staying `checking`.
    async fn record(
        &self,
        job: &GateJob,
        decision: GateDecision,
        claim: &JobClaim,
        retry: &Retry<'_>,
        slot: &mut Slot<'_>,
    ) -> Option<Claimed> {
        let id = job.submission.id;
        let mut decision = decision;
        for attempt in 0..3 {
            let recorded = retry
                .until_stored(slot, || {
                    let record = self.store.apply_verdict(id, decision.clone());
                    claims::record_if_held(self.store.as_ref(), claim, record)
                })
                .await;
            let cause = match recorded {
                Ok(Some(decided)) => {
                    self.verifiers.enqueue(decided.l2_jobs.iter().copied());
                    return Some(Claimed::Decided);
                }
                Ok(None) => return Some(Claimed::Lost),
                Err(Stop::Shutdown) => return None,
                Err(Stop::Permanent(e, cause)) if cause.about_the_data() => {
                    tracing::error!(submission = %id, error = %e, attempt, "the database refused the verdict");
                    cause
                }
                Err(Stop::Permanent(e, _)) => {
                    tracing::error!(submission = %id, error = %e, "the verdict cannot be recorded; the submission stays PENDING");
                    return None;
                }
            };
            decision = match attempt {
                0 => cleaned(&checked(job), decision),
                _ => refused(&checked(job), decision, &cause),
            };
        }
        tracing::error!(submission = %id, "the database refused even a REVIEW naming its refusal; the submission stays PENDING");
        None
    }

    async fn run_once(&self, submission_id: SubmissionId) -> Result<Decided, StoreError> {
        let job = self.store.gate_job(submission_id).await?;
        let decision = self.decide_job(&job).await?;
        let decided = self.store.apply_verdict(submission_id, decision).await?;
        self.verifiers.enqueue(decided.l2_jobs.iter().copied());
        Ok(decided)
    }

    /// Runs the session's gate on a submission.
    async fn decide_job(&self, job: &GateJob) -> Result<GateDecision, StoreError> {
        let gate = self.gate(job.submission.session_id, &job.config.gate);
        self.decide(&checked(job), gate, Others::Session).await
    }

    /// Runs `gate` on one result, comparing its unique fields with `others`,
    /// and seals the decision: verdict, facts, evidence, receipt, and what
    /// the AI verifiers may see.
    async fn decide(
        &self,
        job: &Check<'_>,
        gate: Result<Arc<dyn Gate>, String>,
        others: Others,
    ) -> Result<GateDecision, StoreError> {
        let started = std::time::Instant::now();
        let (outcome, name, version) = match &gate {
            Ok(gate) => {
                let session = match others {
                    Others::Session => self.session_view(job, gate.as_ref()).await?,
                    Others::Nobody => SessionView::of_key(job.key),
                };
                let check =
                    AssertUnwindSafe(gate.check(job.input, job.result, &session)).catch_unwind();
                let limit = gate.timeout().unwrap_or(self.timeout);
                let outcome = match tokio::time::timeout(limit, check).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(_)) => {
                        tracing::error!(quest = %job.quest_id, "the gate panicked; the verdict is REVIEW");
                        review(
                            Fact::new(
                                "gate",
                                "",
                                "a verdict",
                                "no verdict: the gate crashed",
                                "nothing for you to fix; a person will look at it",
                            )
                            .no_answer(),
                        )
                    }
                    Err(_) => review(
                        Fact::new(
                            "gate",
                            "",
                            format!("a verdict within {} ms", limit.as_millis()),
                            "no verdict: the gate timed out",
                            "nothing for you to fix; a person will look at it",
                        )
                        .no_answer(),
                    ),
                };
                (outcome, gate.name().to_owned(), gate.version().to_owned())
            }
            Err(e) => (
                review(
                    Fact::new(
                        "gate",
                        "",
                        "a gate that can be built",
                        e.to_string(),
                        "nothing for you to fix; a person will look at it",
                    )
                    .no_answer(),
                ),
                job.config.gate.kind.clone(),
                "unavailable".to_owned(),
            ),
        };
        // The one place every verdict passes on its way to the store: what a
        // gate, a page or a program gave back is cleaned and cut here.
        let outcome = outcome.bounded();
        metrics::histogram!("quest_gate_seconds", "gate" => name.clone())
            .record(started.elapsed().as_secs_f64());
        metrics::counter!("quest_verdicts_total", "verdict" => outcome.verdict.as_str())
            .increment(1);
        // Only the contract and the artifact: never the agent's other fields or earlier attempts.
        // The task is the one the agent was given for this quest.
        let verify = match (&job.config.verify, &gate) {
            (Some(_), Ok(gate)) => Some(VerifierRequest {
                contract: Contract {
                    task: prompt::task_for(
                        &job.config.prompt.instructions,
                        job.key,
                        job.input,
                        || gate.default_prompt().task,
                    ),
                    input: job.input.clone(),
                },
                artifact: Artifact {
                    result: gate.artifact(job.result),
                    evidence: outcome.evidence.clone(),
                },
            }),
            _ => None,
        };
        Ok(seal(job, outcome, name, version, verify))
    }

    /// Which other quests of the session hold the values of the gate's unique
    /// fields. A store failure here is retried like any other.
    async fn session_view(
        &self,
        job: &Check<'_>,
        gate: &dyn Gate,
    ) -> Result<SessionView, StoreError> {
        let mut view = SessionView::of_key(job.key);
        for field in gate.unique_fields() {
            if !is_plain_field(&field) {
                // A gate's mistake, not the store's: retrying would never help.
                tracing::error!(
                    gate = gate.name(),
                    field,
                    "a unique field that is no plain name is not looked up"
                );
                continue;
            }
            let Some(value) = job.result.get(&field).and_then(|v| v.as_str()) else {
                continue;
            };
            let holders = self
                .store
                .result_holders(
                    job.session_id,
                    job.quest_id,
                    &field,
                    value,
                    HOLDERS_SHOWN as u32,
                )
                .await?;
            if !holders.is_empty() {
                view.holders.insert(field, holders);
            }
        }
        Ok(view)
    }

    fn gate(&self, session_id: SessionId, config: &GateConfig) -> Result<Arc<dyn Gate>, String> {
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = gates.get(session_id) {
            return Ok(gate);
        }
        let gate = self.registry.build(config).map_err(|e| e.to_string())?;
        gates.insert(session_id, gate.clone());
        Ok(gate)
    }
}

/// `decision` with every text cleaned again, its receipt sealed anew.
pub(crate) fn cleaned(job: &Check<'_>, decision: GateDecision) -> GateDecision {
    let outcome = GateOutcome {
        verdict: decision.verdict,
        facts: decision.facts,
        evidence: decision.evidence,
    }
    .bounded();
    let verify = decision.verify.map(|mut request| {
        request.artifact.evidence = outcome.evidence.clone();
        request
    });
    seal(job, outcome, decision.gate, decision.gate_version, verify)
}

/// A REVIEW in place of a decision the database refused twice: the
/// gate's facts and evidence are what it refused, so only the cause is kept.
pub(crate) fn refused(job: &Check<'_>, decision: GateDecision, cause: &Cause) -> GateDecision {
    let fact = Fact::new(
        "store",
        "",
        "a verdict the database can store",
        format!(
            "the database refused the gate's verdict and its facts ({cause}); they are not stored"
        ),
        "nothing for you to fix; a person will look at it",
    )
    .no_answer();
    seal(
        job,
        review(fact),
        decision.gate,
        decision.gate_version,
        None,
    )
}

/// The check of a queued submission.
fn checked(job: &GateJob) -> Check<'_> {
    Check {
        session_id: job.submission.session_id,
        quest_id: job.submission.quest_id,
        key: &job.key,
        input: &job.input,
        result: &job.submission.result,
        config: &job.config,
    }
}

/// A gate's outcome as a decision, with its receipt sealed.
fn seal(
    job: &Check<'_>,
    outcome: GateOutcome,
    gate: String,
    gate_version: String,
    verify: Option<VerifierRequest>,
) -> GateDecision {
    let gate_config = serde_json::to_value(&job.config.gate).unwrap_or_default();
    let receipt = ReceiptParts {
        input: job.input,
        result: job.result,
        facts: &outcome.facts,
        evidence: &outcome.evidence,
        gate: &gate,
        gate_version: &gate_version,
        gate_config: &gate_config,
    }
    .seal();
    GateDecision {
        verdict: outcome.verdict,
        facts: outcome.facts,
        evidence: outcome.evidence,
        gate,
        gate_version,
        receipt,
        verify,
    }
}

fn review(fact: Fact) -> GateOutcome {
    GateOutcome {
        verdict: Verdict::Review,
        facts: vec![fact],
        evidence: Vec::new(),
    }
}
