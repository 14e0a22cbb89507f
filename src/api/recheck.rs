//! Wire types of re-checks: a run over a session's PASS quests, and one
//! quest's re-check as the quest view lists it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::ids::{RecheckRunId, SessionId, SubmissionId};
use crate::domain::recheck::{Mark, Outcome};
use crate::domain::{Fact, Verdict};
use crate::store::{RecheckRow, RecheckRunRow};

/// One re-check run over a session's PASS quests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RecheckRun {
    pub id: RecheckRunId,
    pub session_id: SessionId,
    /// The token name that started it, or `schedule`.
    pub started_by: String,
    pub started_at: DateTime<Utc>,
    /// The PASS quests it re-checks.
    pub total: u64,
    /// Those re-checked so far.
    pub done: u64,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<RecheckRunRow> for RecheckRun {
    fn from(r: RecheckRunRow) -> Self {
        RecheckRun {
            id: r.id,
            session_id: r.session_id,
            started_by: r.started_by,
            started_at: r.started_at,
            total: r.total,
            done: r.done,
            finished_at: r.finished_at,
        }
    }
}

/// One re-check of a PASS quest: its gate run again on the accepted result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Recheck {
    pub run_id: RecheckRunId,
    /// The accepted submission that was re-checked.
    pub submission_id: Option<SubmissionId>,
    pub verdict: Verdict,
    pub outcome: Outcome,
    /// What it left on the quest: `stale`, `unconfirmed`, or null (confirmed).
    pub mark: Option<Mark>,
    pub facts: Vec<Fact>,
    #[schema(value_type = Vec<Object>)]
    pub evidence: Vec<Value>,
    pub gate: String,
    pub gate_version: String,
    /// The gate version that passed the quest.
    pub passed_gate_version: Option<String>,
    /// Whether the gate's version differs from the one that passed the quest.
    pub gate_changed: bool,
    /// SHA-256 over input, result, facts, evidence and gate: the re-check's own receipt.
    pub digest: String,
    pub created_at: DateTime<Utc>,
}

impl From<RecheckRow> for Recheck {
    fn from(r: RecheckRow) -> Self {
        Recheck {
            gate_changed: r
                .passed_gate_version
                .as_deref()
                .is_some_and(|v| v != r.gate_version),
            run_id: r.run_id,
            submission_id: r.submission_id,
            verdict: r.verdict,
            outcome: r.outcome,
            mark: r.mark,
            facts: r.facts,
            evidence: r.evidence,
            gate: r.gate,
            gate_version: r.gate_version,
            passed_gate_version: r.passed_gate_version,
            digest: r.digest,
            created_at: r.created_at,
        }
    }
}
