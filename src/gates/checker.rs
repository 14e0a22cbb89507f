//! The check of one result, the one use case behind every gate verdict. The
//! [`Checker`] finds the session's gate (built by the [`GateRegistry`] once
//! per session and kept, a bounded number), tells it which other quests
//! of the session hold the values of its unique fields ([`SessionView`]),
//! runs it under its timeout with a panic caught, and seals what it said as
//! a [`GateDecision`]: the outcome cleaned and cut ([`GateOutcome::bounded`]),
//! its receipt, and what the AI verifiers may see. It records nothing.
//!
//! Three callers, one check: the service, for a gate that decides at once in
//! the submit request ([`Checker::decide_at_once`]); the gate runner, for a
//! queued PENDING submission ([`Checker::check`]); the re-checker, for an
//! accepted result, against no other quest and through the re-check run's
//! own page cache ([`Checker::recheck`]).
//!
//! Concurrency: a check runs in its caller's task, as many at once as the
//! callers allow (the gate runner and the re-checker under the replica's fair
//! scheduler). The built gates and the runs' page caches are each behind a
//! lock held only to look up or insert, never across an await.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;

use crate::domain::ids::{QuestId, RecheckRunId, SessionId};
use crate::domain::receipt::ReceiptParts;
use crate::domain::session::{GateConfig, SessionConfig};
use crate::domain::verify::{Artifact, Contract, VerifierRequest};
use crate::domain::{Fact, Verdict};
use crate::domain::{prompt, quality};
use crate::gates::fetch::PageCache;
use crate::gates::recent_gates::{KEPT_GATES, RecentGates};
use crate::gates::{Gate, GateOutcome, GateRegistry, HOLDERS_SHOWN, SessionView};
use crate::store::{GateDecision, GateJob, Store, StoreError, is_plain_field};

/// One result to check for one quest.
pub struct Check<'a> {
    pub session_id: SessionId,
    pub quest_id: QuestId,
    pub key: &'a str,
    pub input: &'a serde_json::Value,
    pub result: &'a serde_json::Value,
    pub config: &'a SessionConfig,
    /// The quest is gold (its session is a gold companion).
    pub gold: bool,
}

impl<'a> Check<'a> {
    /// The check of a queued submission.
    pub fn of_job(job: &'a GateJob) -> Check<'a> {
        Check {
            session_id: job.submission.session_id,
            quest_id: job.submission.quest_id,
            key: &job.key,
            input: &job.input,
            result: &job.submission.result,
            config: &job.config,
            gold: job.gold,
        }
    }
}

/// Runs a session's gate on a result and seals its decision.
pub struct Checker {
    /// Read for the holders of unique fields only.
    store: Arc<dyn Store>,
    registry: Arc<GateRegistry>,
    /// The longest a check may take, unless its gate declares its own.
    timeout: Duration,
    /// Built gates of the sessions used most recently: a session's gate config
    /// never changes, so a gate dropped here is simply built again.
    gates: Mutex<RecentGates>,
    /// The page caches of the runs re-checked most recently, one per run
    /// and fresh for it: a page cited by many quests of a run is fetched
    /// once in that run, and never read from a submission's check or an
    /// earlier run.
    run_pages: Mutex<RunPages>,
    /// The server's secret the audit keys derive from, read once.
    audit_secret: tokio::sync::OnceCell<String>,
}

/// Whose results a check compares the result's unique fields with.
#[derive(Debug, Clone, Copy)]
enum Others {
    /// The session's other quests that hold or await a result: a submission's check.
    Session,
    /// None: a re-check of an accepted result.
    Nobody,
}

impl Checker {
    /// A checker whose gates come from `registry` and take at most `timeout`
    /// unless they declare their own; `store` tells who holds a unique value.
    pub fn new(store: Arc<dyn Store>, registry: Arc<GateRegistry>, timeout: Duration) -> Checker {
        Checker {
            store,
            registry,
            timeout,
            gates: Mutex::new(RecentGates::new(KEPT_GATES)),
            run_pages: Mutex::new(RunPages::default()),
            audit_secret: tokio::sync::OnceCell::new(),
        }
    }

    /// The registry the gates are built from (a scan checks a session's
    /// gate config with it).
    pub fn registry(&self) -> &GateRegistry {
        &self.registry
    }

    /// The gate of a session, built once and kept.
    pub fn gate(
        &self,
        session_id: SessionId,
        config: &GateConfig,
    ) -> Result<Arc<dyn Gate>, String> {
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = gates.get(session_id) {
            return Ok(gate);
        }
        let gate = self.registry.build(config).map_err(|e| e.to_string())?;
        gates.insert(session_id, gate.clone());
        Ok(gate)
    }

    /// A submission's check: runs the session's gate on its result, against
    /// what the session's other quests hold. Only that look-up fails, before
    /// the gate runs: retrying a failed check runs no gate twice.
    pub async fn check(&self, check: &Check<'_>) -> Result<GateDecision, StoreError> {
        let gate = self.gate(check.session_id, &check.config.gate);
        self.decide(check, gate, Others::Session).await
    }

    /// [`Checker::check`] when the session's gate decides at once (see
    /// [`Gate::decides_at_once`]), in the caller's task; `None` when it must
    /// run on the gate runner after a PENDING record.
    pub async fn decide_at_once(
        &self,
        check: &Check<'_>,
    ) -> Result<Option<GateDecision>, StoreError> {
        match self.gate(check.session_id, &check.config.gate) {
            Ok(gate) if gate.decides_at_once() => {
                Ok(Some(self.decide(check, Ok(gate), Others::Session).await?))
            }
            _ => Ok(None),
        }
    }

    /// Runs the session's gate on an accepted result of re-check run `run`:
    /// a re-check. The same gate, timeout and outside world (per-host limits,
    /// the SSRF guard) as a submission's check, but no other quest of the
    /// session: a re-check asks whether the world still confirms the result,
    /// and what the session's other quests hold now is no part of that world
    /// (another quest under review with the same address would otherwise
    /// leave this one `unconfirmed`).
    ///
    /// The gate reads pages through the run's own cache, never the
    /// submissions' one: a page read by a submission's check a minute ago
    /// says nothing about the world now. It is built for the re-check
    /// (re-checks are rare; the kept gates hold the submissions' cache).
    pub async fn recheck(
        &self,
        run: RecheckRunId,
        check: &Check<'_>,
    ) -> Result<GateDecision, StoreError> {
        let pages = self
            .run_pages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .of(run, || self.registry.fresh_pages());
        let gate = self
            .registry
            .build_with(&check.config.gate, &pages)
            .map_err(|e| e.to_string());
        self.decide(check, gate, Others::Nobody).await
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
        let mut outcome = outcome.bounded();
        // The audit's check is the server's: a gate (an operator's program,
        // or an agent's code it runs) naming a fact so would pass off any
        // REVIEW as a random audit, a label of the error bound.
        for fact in &mut outcome.facts {
            if fact.check == quality::AUDIT_CHECK {
                fact.check = format!("gate:{}", quality::AUDIT_CHECK);
            }
        }
        let outcome = match others {
            Others::Session => self.audited(job, outcome).await?,
            Others::Nobody => outcome,
        };
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

    /// The random audit of a session without AI verifiers: a PASS drawn
    /// for it goes to a person first, with the fact that says why. (With
    /// verifiers the quest would become PASS only after their answers, and
    /// the draw is made then, where the store finishes the verification.)
    async fn audited(
        &self,
        job: &Check<'_>,
        mut outcome: GateOutcome,
    ) -> Result<GateOutcome, StoreError> {
        let Some((rate, shown)) = job.config.audit_draw(job.gold) else {
            return Ok(outcome);
        };
        if outcome.verdict != Verdict::Pass || job.config.verify.is_some() {
            return Ok(outcome);
        }
        let secret = self
            .audit_secret
            .get_or_try_init(|| async {
                let candidate = quality::new_server_secret();
                self.store
                    .server_secret(quality::AUDIT_SECRET, &candidate)
                    .await
            })
            .await?;
        if quality::drawn(
            &quality::session_key(secret, job.session_id),
            job.quest_id,
            rate,
        ) {
            outcome.verdict = Verdict::Review;
            outcome.facts.push(quality::audit_fact(shown, false));
        }
        Ok(outcome)
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
}

/// How many runs' page caches are kept; a run whose cache went starts a new one.
const KEPT_RUN_PAGES: usize = 2;

/// The page caches of the latest re-check runs, oldest first.
#[derive(Default)]
struct RunPages(Vec<(RecheckRunId, Arc<PageCache>)>);

impl RunPages {
    /// The cache of `run`, made by `fresh` on its first re-check.
    fn of(&mut self, run: RecheckRunId, fresh: impl FnOnce() -> Arc<PageCache>) -> Arc<PageCache> {
        if let Some(i) = self.0.iter().position(|(r, _)| *r == run) {
            let entry = self.0.remove(i);
            let pages = entry.1.clone();
            self.0.push(entry);
            return pages;
        }
        if self.0.len() >= KEPT_RUN_PAGES {
            self.0.remove(0);
        }
        let pages = fresh();
        self.0.push((run, pages.clone()));
        pages
    }
}

/// `decision` with every text cleaned again, its receipt sealed anew: what
/// is recorded once the database refused a decision.
pub fn cleaned(job: &Check<'_>, decision: GateDecision) -> GateDecision {
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

/// A REVIEW in place of a decision the database refused twice, for `cause`:
/// the gate's facts and evidence are what it refused, so only the cause is kept.
pub fn refused(
    job: &Check<'_>,
    decision: GateDecision,
    cause: &impl std::fmt::Display,
) -> GateDecision {
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
