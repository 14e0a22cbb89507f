//! The rows of the checks that come after a verdict: re-check runs and
//! their results, and the AI verifiers' calibration against the reviewers.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::ids::{QuestId, RecheckRunId, SessionId, SubmissionId};
use crate::domain::recheck::{Mark, Outcome};
use crate::domain::session::SessionConfig;
use crate::domain::verify::Answer;
use crate::domain::verify::calibration::{Confusion, Standing};
use crate::domain::{Decision, Fact, Verdict};
use crate::store::{PairStats, QuestRow};

/// One re-check run over a session's PASS quests.
#[derive(Debug, Clone, PartialEq)]
pub struct RecheckRunRow {
    pub id: RecheckRunId,
    pub session_id: SessionId,
    /// The token name that started it, or `schedule`.
    pub started_by: String,
    pub started_at: DateTime<Utc>,
    /// The PASS quests it re-checks.
    pub total: u64,
    /// The quests re-checked so far.
    pub done: u64,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A PASS quest awaiting its re-check, with everything its gate needs.
#[derive(Debug, Clone)]
pub struct RecheckJob {
    pub run_id: RecheckRunId,
    pub quest: QuestRow,
    pub config: SessionConfig,
    /// The gate version of the submission that passed the quest.
    pub passed_gate_version: Option<String>,
}

/// A re-check's finding, ready to be recorded.
#[derive(Debug, Clone)]
pub struct NewRecheck {
    pub run_id: RecheckRunId,
    pub quest_id: QuestId,
    pub verdict: Verdict,
    pub outcome: Outcome,
    pub facts: Vec<Fact>,
    pub evidence: Vec<Value>,
    pub gate: String,
    pub gate_version: String,
    pub passed_gate_version: Option<String>,
    /// The re-check's own receipt digest.
    pub digest: String,
}

/// One recorded re-check.
#[derive(Debug, Clone, PartialEq)]
pub struct RecheckRow {
    pub run_id: RecheckRunId,
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub submission_id: Option<SubmissionId>,
    pub verdict: Verdict,
    pub outcome: Outcome,
    pub mark: Option<Mark>,
    pub facts: Vec<Fact>,
    pub evidence: Vec<Value>,
    pub gate: String,
    pub gate_version: String,
    pub passed_gate_version: Option<String>,
    pub digest: String,
    pub created_at: DateTime<Utc>,
}

/// What recording a re-check did.
#[derive(Debug, Clone, PartialEq)]
pub struct RecheckRecorded {
    pub recheck: RecheckRow,
    /// The quest had been re-checked in this run before: nothing was written now.
    pub replayed: bool,
}

/// A session's re-check figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecheckSummary {
    pub stale: u64,
    pub unconfirmed: u64,
    /// The latest run, finished or not.
    pub last_run: Option<RecheckRunRow>,
}

/// Per agent: its PASS quests, and how many of them later went stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStalenessRow {
    pub agent: String,
    pub pass: u64,
    pub stale: u64,
}

/// One verifier's answers on one question against the non-bulk review
/// decisions of the quests it answered: of a session (by question index), or
/// of the whole server (by question text).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfusionRow {
    pub verifier: String,
    /// The question's index in its session; `None` server-wide.
    pub question_index: Option<u32>,
    pub question: String,
    pub confusion: Confusion,
}

/// A session's verifier losing or winning back its veto on a question.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchRow {
    pub session_id: SessionId,
    pub verifier: String,
    pub question_index: u32,
    /// The standing it switched to.
    pub standing: Standing,
    /// The labels that caused the switch.
    pub confusion: Confusion,
    pub kappa: f64,
    pub min_kappa: f64,
    pub min_labels: u32,
    pub created_at: DateTime<Utc>,
}

/// A labelled answer where the verifier and the reviewer disagreed.
#[derive(Debug, Clone, PartialEq)]
pub struct DisagreementRow {
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub key: String,
    pub verifier: String,
    pub question_index: u32,
    pub answer: Answer,
    /// True: it flagged a quest the reviewer approved; false: it cleared one the reviewer rejected.
    pub flagged: bool,
    pub decision: Decision,
    pub reviewer: String,
    pub note: String,
    pub decided_at: DateTime<Utc>,
}

/// The verifiers' calibration, of one session or of the whole server.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calibration {
    pub confusion: Vec<ConfusionRow>,
    /// Oldest first.
    pub switches: Vec<SwitchRow>,
    /// Newest first, at most the number asked for.
    pub disagreements: Vec<DisagreementRow>,
    /// Pairwise agreement, summed over the sessions in scope.
    pub agreement: Vec<PairStats>,
}
