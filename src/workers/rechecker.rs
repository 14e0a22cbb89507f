//! The re-checker: a queue of the PASS quests a re-check run marked. Each is
//! re-checked by the [`Checker`] on its accepted result (through the run's
//! own page cache), and what the world says now is recorded. It never
//! changes a quest's state: [`recheck::judge`] turns the verdict into a mark
//! and the store writes only that (its triggers refuse anything else).
//!
//! Durable and resumable: a run marks its quests in the store, each record
//! clears its quest's marker, so after a restart exactly the quests not yet
//! recorded are re-checked, once (the store keeps one record per run and
//! quest). Each quest is claimed ([`Job::Recheck`]) so that of several
//! replicas one runs it. The checks wait for the replica's gate workers in
//! the fair [`Scheduler`] shared with the gate runner, as a class of their
//! own (at most half the workers while submissions' checks wait),
//! round-robin over runs. The same loop starts the runs of sessions whose
//! `recheck.every` is due.

use crate::domain::work::Refusal;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::domain::Fact;
use crate::domain::fair::Owner;
use crate::domain::ids::{QuestId, RecheckRunId};
use crate::domain::recheck::{self, Every};
use crate::gates::checker::{cleaned, refused};
use crate::gates::{Check, Checker};
use crate::store::{Job, JobClaim, NewRecheck, RecheckRecorded, Store, StoreError};
use crate::workers::claims::{self, Held};
use crate::workers::retry::{Retry, Slot, Stop};
use crate::workers::scheduler::Scheduler;

/// Who starts the runs of a session's schedule.
pub const SCHEDULE: &str = "schedule";

/// How many due quests one scan hands out.
const SCAN: u32 = 256;

/// Re-checks PASS quests of unfinished runs.
#[derive(Clone)]
pub struct Rechecker {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    checker: Arc<Checker>,
    scheduler: Scheduler,
    /// The quests this process is re-checking now.
    running: Mutex<HashSet<(RecheckRunId, QuestId)>>,
    wake: Notify,
}

impl Rechecker {
    /// Starts the loop: it scans for due quests and schedules every `every`,
    /// at once when [`Rechecker::wake`] is called, until `shutdown` fires.
    /// Its checks are `checker`'s, run on the workers of `scheduler` (the
    /// gate runner's).
    pub fn start(
        store: Arc<dyn Store>,
        checker: Arc<Checker>,
        scheduler: Scheduler,
        every: Duration,
        shutdown: CancellationToken,
    ) -> Rechecker {
        let rechecker = Rechecker {
            inner: Arc::new(Inner {
                store,
                checker,
                scheduler,
                running: Mutex::new(HashSet::new()),
                wake: Notify::new(),
            }),
        };
        tokio::spawn(rechecker.clone().run(every, shutdown));
        rechecker
    }

    /// Scans now (a run was just started).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    async fn run(self, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            if let Err(e) = self.start_scheduled().await {
                tracing::warn!(error = %e, "scheduled re-checks could not be started");
            }
            match self.run_once(&shutdown).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(quests = n, "re-checks handed out"),
                Err(e) => tracing::warn!(error = %e, "re-check scan failed"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                _ = self.inner.wake.notified() => {}
            }
        }
    }

    /// Starts a run of every session whose `recheck.every` is due.
    pub async fn start_scheduled(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let now = store.now();
        let mut started = 0;
        for session in store.list_sessions().await? {
            let Some(every) = session.config.recheck.as_ref().and_then(|r| r.every()) else {
                continue;
            };
            let last = store.recheck_summary(session.id).await?.last_run;
            let last_started = last.as_ref().map(|r| r.started_at);
            if !recheck::is_due(every, session.created_at, last_started, now) {
                continue;
            }
            let since =
                now - chrono::Duration::from_std(Every::duration(every)).unwrap_or_default();
            match store.start_recheck(session.id, SCHEDULE, Some(since)).await {
                Ok(Some(run)) => {
                    tracing::info!(session = %session.id, quests = run.total, "scheduled re-check started");
                    started += 1;
                }
                Ok(None) => {}
                // Nothing passed yet, or the last run still runs: the next tick looks again.
                Err(StoreError::Refused(Refusal::NothingToRecheck | Refusal::RecheckRunning)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(started)
    }

    /// One scan: queues every due quest not running here on the scheduler;
    /// the number queued.
    pub async fn run_once(&self, shutdown: &CancellationToken) -> Result<usize, StoreError> {
        let due = self.inner.store.due_rechecks(SCAN).await?;
        let mut handed = 0;
        for key in due {
            if !self
                .inner
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key)
            {
                continue;
            }
            let (inner, shutdown) = (self.inner.clone(), shutdown.clone());
            let owner = Owner::Recheck { run: key.0 };
            let queued = self.inner.scheduler.queue(owner, move |permit| {
                tokio::spawn(async move {
                    let permits = inner.scheduler.permits(owner);
                    let slot = Slot::holding(&permits, permit);
                    let recorded = tokio::select! {
                        // A stop leaves the quest marked: the next start re-checks it.
                        _ = shutdown.cancelled() => false,
                        outcome = inner.recheck(key.0, key.1, slot, &shutdown) => match outcome {
                            Ok(recorded) => recorded.is_some(),
                            Err(e) => {
                                tracing::warn!(quest = %key.1, error = %e, "re-check failed; it is tried again at the next scan");
                                false
                            }
                        },
                    };
                    // The last of a scan's re-checks recorded: scan again at
                    // once. Not after a failure, nor when another replica
                    // holds the claim: those wait for the next tick.
                    if inner.forget(key) && recorded {
                        inner.wake.notify_one();
                    }
                });
            });
            if !queued {
                // Closed (the server stops): the quest stays marked.
                let _ = self.inner.forget(key);
                break;
            }
            handed += 1;
        }
        Ok(handed)
    }

    /// Re-checks one quest of one run now, in the caller's task (tests drive it).
    pub async fn recheck(
        &self,
        run: RecheckRunId,
        quest: QuestId,
    ) -> Result<Option<RecheckRecorded>, StoreError> {
        let never = CancellationToken::new();
        self.inner
            .recheck(run, quest, Slot::unpooled(), &never)
            .await
    }
}

impl Inner {
    /// The re-check of `key` no longer runs here: whether none does now.
    fn forget(&self, key: (RecheckRunId, QuestId)) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.remove(&key);
        running.is_empty()
    }

    /// Claims the re-check (of several replicas one runs it), runs it while
    /// renewing the claim, and records it only while the claim still lives,
    /// under the workers' [`retry`] policy: a transient store failure is
    /// waited out with the worker given back; a permanent one is returned,
    /// and the quest, still marked, is tried again at the next scan.
    async fn recheck(
        &self,
        run: RecheckRunId,
        quest_id: QuestId,
        mut slot: Slot<'_>,
        shutdown: &CancellationToken,
    ) -> Result<Option<RecheckRecorded>, StoreError> {
        let name = format!("re-check {quest_id}");
        let retry = Retry::new(&name, shutdown);
        let job = Job::Recheck(run, quest_id);
        let claimed = retry
            .until_stored(&mut slot, || {
                self.store.claim_job(job, claims::CLAIM_SECONDS)
            })
            .await;
        let Some(claim) = stopped(claimed)?.flatten() else {
            // Another replica re-checks it, or the server stops.
            return Ok(None);
        };
        let recorded = match claims::hold(
            self.store.as_ref(),
            &claim,
            self.run(run, quest_id, &claim, &retry, &mut slot),
        )
        .await
        {
            Held::Done(recorded) => recorded?,
            Held::Lost => None,
        };
        if let Err(e) = self.store.release_job(&claim).await {
            // It lapses by itself within moments.
            tracing::warn!(quest = %quest_id, error = %e, "the claim on a finished re-check was not released");
        }
        Ok(recorded)
    }

    async fn run(
        &self,
        run: RecheckRunId,
        quest_id: QuestId,
        claim: &JobClaim,
        retry: &Retry<'_>,
        slot: &mut Slot<'_>,
    ) -> Result<Option<RecheckRecorded>, StoreError> {
        let found = retry
            .until_stored(slot, || self.store.recheck_job(quest_id))
            .await;
        let Some(job) = stopped(found)?.flatten() else {
            return Ok(None);
        };
        if job.run_id != run {
            return Ok(None);
        }
        let quest = &job.quest;
        let Some(result) = &quest.result else {
            return Err(StoreError::Corrupt(format!(
                "the PASS quest {quest_id} has no accepted result"
            )));
        };
        let check = Check {
            session_id: quest.session_id,
            quest_id,
            key: &quest.key,
            input: &quest.input,
            result,
            config: &job.config,
            // Re-checks run over a session's own PASS quests, never gold.
            gold: false,
        };
        let mut decision = self.checker.recheck(run, &check).await?;
        // A person approved the quest: the facts it carried then are what they accepted.
        let approved: Option<&[Fact]> = quest
            .decided_by
            .as_deref()
            .filter(|by| crate::domain::DecidedBy::names_people(by))
            .map(|_| quest.last_facts.as_slice());
        let mut attempt = 0;
        loop {
            let outcome = recheck::judge(decision.verdict, &decision.facts, approved);
            let new = NewRecheck {
                run_id: run,
                quest_id,
                verdict: decision.verdict,
                outcome,
                facts: decision.facts.clone(),
                evidence: decision.evidence.clone(),
                gate: decision.gate.clone(),
                gate_version: decision.gate_version.clone(),
                passed_gate_version: job.passed_gate_version.clone(),
                digest: decision.receipt.clone(),
            };
            let recorded = retry
                .until_stored(slot, || {
                    let record = self.store.record_recheck(new.clone());
                    claims::record_if_held(self.store.as_ref(), claim, record)
                })
                .await;
            // The same answer as a gate runner's verdict the database refuses:
            // once cleaned, then a REVIEW (here: unconfirmed) naming the cause.
            decision = match recorded {
                Err(Stop::Permanent(e, cause)) if cause.about_the_data() && attempt < 2 => {
                    tracing::error!(quest = %quest_id, error = %e, attempt, "the database refused the re-check");
                    if attempt == 0 {
                        cleaned(&check, decision)
                    } else {
                        refused(&check, decision, &cause)
                    }
                }
                other => {
                    if let Ok(Some(recorded)) = &other {
                        metrics::counter!("quest_rechecks_total", "outcome" => recorded.recheck.outcome.as_str()).increment(1);
                    }
                    return stopped(other).map(Option::flatten);
                }
            };
            attempt += 1;
        }
    }
}

/// A retried call's value, `None` on shutdown, or the permanent error.
fn stopped<T>(outcome: Result<T, Stop>) -> Result<Option<T>, StoreError> {
    match outcome {
        Ok(value) => Ok(Some(value)),
        Err(Stop::Shutdown) => Ok(None),
        Err(Stop::Permanent(e, _)) => Err(e),
    }
}
