//! The gate runner: a queue of PENDING submissions, each checked by the
//! [`Checker`] and its decision recorded. It owns no check of its own: for
//! each job it claims the submission, asks the checker, records what it
//! decided, and hands the L2 jobs of a PASS to the [`VerifierRunner`].
//!
//! Concurrency: the checks wait for a worker in the replica's fair
//! [`Scheduler`], shared with the re-checker, under the submission's session
//! and token; a submission found by a scan or an event (start-up, the orphan
//! scan) has its owner looked up once first, in one task. A submission queued
//! twice here is checked once (the in-flight set), and of several replicas
//! one checks it (the claim, see [`claims`]).
//!
//! A submission is durable (PENDING) before it is queued, so a crash loses no
//! work: at start-up every PENDING submission is queued again, and because
//! gates are deterministic the re-run decides what the first run would have.

use crate::domain::fair::Owner;
use crate::domain::ids::{L2JobId, SubmissionId};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::domain::SubmissionVerdict;
use crate::gates::checker::{cleaned, refused};
use crate::gates::{Check, Checker};
use crate::store::{
    Decided, GateDecision, GateJob, Job, JobClaim, Store, StoreError, SubmissionRow,
};
use crate::workers::VerifierRunner;
use crate::workers::claims::{self, Held};
use crate::workers::retry::{Retry, Slot, Stop};
use crate::workers::scheduler::Scheduler;

/// The queue of PENDING submissions to check.
#[derive(Clone)]
pub struct GateRunner {
    inner: Arc<Inner>,
    /// Submissions whose owner is looked up before they are queued.
    found: mpsc::UnboundedSender<SubmissionId>,
}

struct Inner {
    store: Arc<dyn Store>,
    checker: Arc<Checker>,
    verifiers: VerifierRunner,
    /// The replica's gate workers, shared with the re-checker.
    scheduler: Scheduler,
    shutdown: CancellationToken,
    /// Submissions queued or running here, so that one queued twice (by the
    /// orphan scan or an event) is checked once.
    in_flight: Mutex<HashSet<SubmissionId>>,
}

impl GateRunner {
    /// Starts a runner whose `workers` gate workers (shared with re-checks,
    /// see [`GateRunner::scheduler`]) check submissions with `checker`; L1
    /// PASSes that await AI verifiers go on to `verifiers`. It stops when
    /// `shutdown` fires.
    pub fn start(
        store: Arc<dyn Store>,
        checker: Arc<Checker>,
        verifiers: VerifierRunner,
        workers: usize,
        shutdown: CancellationToken,
    ) -> GateRunner {
        let (found, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            checker,
            verifiers,
            scheduler: Scheduler::start(workers, shutdown.clone()),
            shutdown,
            in_flight: Mutex::new(HashSet::new()),
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

    /// Queues the L2 jobs a PASS decided in a request created.
    pub fn enqueue_verifiers(&self, jobs: &[L2JobId]) {
        self.inner.verifiers.enqueue(jobs.iter().copied());
    }

    /// Decides one submission: checks it and applies the verdict.
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
        let check = Check::of_job(&job);
        let decision = match retry
            .until_stored(slot, || self.checker.check(&check))
            .await
        {
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
    /// same decision with every text cleaned ([`cleaned`]), and
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
            let check = Check::of_job(job);
            decision = match attempt {
                0 => cleaned(&check, decision),
                _ => refused(&check, decision, &cause),
            };
        }
        tracing::error!(submission = %id, "the database refused even a REVIEW naming its refusal; the submission stays PENDING");
        None
    }

    async fn run_once(&self, submission_id: SubmissionId) -> Result<Decided, StoreError> {
        let job = self.store.gate_job(submission_id).await?;
        let decision = self.checker.check(&Check::of_job(&job)).await?;
        let decided = self.store.apply_verdict(submission_id, decision).await?;
        self.verifiers.enqueue(decided.l2_jobs.iter().copied());
        Ok(decided)
    }
}
