//! Wire types of the HTTP/JSON API (v1), shared by the server, clients and the
//! OpenAPI document. Conversions from store rows live here too, so handlers stay thin.

use crate::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId, TokenId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::domain::recheck::Mark;
use crate::domain::review::Look;
mod calibration;
pub use calibration::*;
mod verifiers;
pub use verifiers::{VerifierAgreement, VerifierStatus};

use crate::domain::session::SessionConfig;
use crate::domain::verify::{Answer, FlagOn};
use crate::domain::{Decision, Fact, Phase, State, SubmissionVerdict};
use crate::store::{
    Counts, L2AnswerRow, QuestRow, RecheckRow, RecheckSummary, ReviewDecisionRow, SessionRow,
    SessionStatus, SubmissionRow,
};

mod agents;
mod gold;
mod pauses;
mod recheck;
mod reviewers;
mod tokens;
pub use agents::{AgentLine, GoldScore, SessionAgents, TokenAgents};
pub use gold::{
    AddGold, CanaryPass, GoldAdded, GoldItem, GoldItemView, SessionGold, TokenGold, VerifierGold,
};
pub use pauses::{NextPaused, Pause};
pub use recheck::{Recheck, RecheckRun};
pub use reviewers::{ReviewerGold, ReviewerPair, ReviewerStats, Reviewers};
pub use tokens::{CreateTokenRequest, CreatedToken, Token};

/// The body of every refusal.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong and what to do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case code, e.g. `lease_lost`.
    pub code: String,
    /// What happened and what to do about it.
    pub message: String,
    /// The particulars of some refusals, for a program: `duplicate_keys`
    /// gives `{"pairs": [[first, repeat], ...], "more": n}` (1-based data rows,
    /// at most 20 pairs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// A scan sent as JSON: the session config and the rows.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    pub config: SessionConfig,
    /// One object per row; columns are the keys in first-seen order.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Map<String, Value>>,
}

/// A session with its progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Session {
    pub id: SessionId,
    pub name: String,
    pub key_column: String,
    /// The original column names, in order.
    pub columns: Vec<String>,
    pub source_name: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub config: SessionConfig,
    pub status: Status,
}

/// Counts and progress of one session. `pass + review + done + remaining = total`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Status {
    pub session_id: SessionId,
    pub total: u64,
    /// Quests still TODO, in any phase. Never rises.
    pub remaining: u64,
    /// Every quest left TODO (`remaining` is 0): no agent has work here.
    #[serde(default)]
    pub finished: bool,
    pub open: u64,
    pub leased: u64,
    pub checking: u64,
    pub verifying: u64,
    pub pass: u64,
    pub review: u64,
    pub done: u64,
    pub submissions: u64,
    /// Agents holding a live lease.
    pub agents_active: u64,
    /// Quests finished per minute over the last five minutes.
    pub rate_per_minute: f64,
    /// Time for the agents to finish at the current rate; null when nothing finished lately.
    pub eta_seconds: Option<u64>,
    /// Review decisions per hour, at the reviewers' pace over the last fifteen minutes.
    #[serde(default)]
    pub review_rate_per_hour: f64,
    /// Time for the reviewers to decide the quests in REVIEW at that pace;
    /// null when none wait or nobody decided lately.
    #[serde(default)]
    pub review_eta_seconds: Option<u64>,
    /// Figures of each AI verifier (L2) that answered in this session, by name.
    #[serde(default)]
    pub verifiers: Vec<VerifierStatus>,
    /// How often each pair of AI verifiers gave the same answer to the same question.
    #[serde(default)]
    pub agreement: Vec<VerifierAgreement>,
    /// PASS quests whose latest re-check found the world contradicting them
    /// (they stay PASS and count in `pass`).
    #[serde(default)]
    pub stale: u64,
    /// PASS quests whose latest re-check found no answer from the world.
    #[serde(default)]
    pub unconfirmed: u64,
    /// PASS quests marked suspect by the gold floor (they stay PASS and count in `pass`).
    #[serde(default)]
    pub suspect: u64,
    /// PASS quests an audit found wrong (they stay PASS and count in `pass`).
    #[serde(default)]
    pub audit_rejected: u64,
    /// When the latest re-check run finished; null while it runs, or before the first.
    #[serde(default)]
    pub rechecked_at: Option<DateTime<Utc>>,
    /// The latest re-check run, finished or not.
    #[serde(default)]
    pub recheck: Option<RecheckRun>,
    /// Each AI verifier's agreement with the reviewers, per question (as in
    /// `GET /v1/verifiers?session=`).
    #[serde(default)]
    pub calibration: Vec<VerifierCalibration>,
    /// How wrong the PASS rows may be (`GET /v1/sessions/{id}/quality`):
    /// given by `GET …/status` only (`measured: false` before any audit is
    /// decided), not in the session list or the event streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::domain::quality::Quality>,
}

impl Status {
    /// Builds the wire status from a store snapshot.
    pub fn new(session_id: SessionId, s: &SessionStatus) -> Status {
        let Counts {
            total,
            open,
            leased,
            checking,
            verifying,
            pass,
            review,
            done,
            submissions,
        } = s.counts;
        let remaining = s.counts.remaining();
        let eta_seconds = (s.rate_per_minute > 0.0)
            .then(|| (remaining as f64 / s.rate_per_minute * 60.0).ceil() as u64);
        let review_eta_seconds = (s.reviews_per_hour > 0.0 && review > 0)
            .then(|| (review as f64 / s.reviews_per_hour * 3600.0).ceil() as u64);
        Status {
            session_id,
            total,
            remaining,
            finished: remaining == 0,
            open,
            leased,
            checking,
            verifying,
            pass,
            review,
            done,
            submissions,
            agents_active: s.agents_active,
            rate_per_minute: s.rate_per_minute,
            eta_seconds,
            review_rate_per_hour: s.reviews_per_hour,
            review_eta_seconds,
            verifiers: s.verifiers.iter().map(VerifierStatus::from).collect(),
            agreement: s.agreement.iter().map(VerifierAgreement::from).collect(),
            stale: 0,
            unconfirmed: 0,
            suspect: 0,
            audit_rejected: 0,
            rechecked_at: None,
            recheck: None,
            calibration: Vec::new(),
            quality: None,
        }
    }

    /// Adds a session's re-check figures.
    pub fn with_recheck(mut self, r: RecheckSummary) -> Status {
        self.stale = r.stale;
        self.unconfirmed = r.unconfirmed;
        self.rechecked_at = r.last_run.as_ref().and_then(|run| run.finished_at);
        self.recheck = r.last_run.map(RecheckRun::from);
        self
    }
}

impl Session {
    /// Builds the wire session from its row and status.
    pub fn new(row: SessionRow, status: &SessionStatus) -> Session {
        Session {
            status: Status::new(row.id, status),
            id: row.id,
            name: row.name,
            key_column: row.key_column,
            columns: row.columns,
            source_name: row.source_name,
            created_by: row.created_by,
            created_at: row.created_at,
            config: row.config,
        }
    }
}

/// The body of `next`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NextRequest {
    /// A name for this agent, so that many agents may share one token.
    #[serde(default)]
    pub agent: Option<String>,
}

/// The answer to `next`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "status", rename_all = "lowercase")]
#[expect(
    clippy::large_enum_variant,
    reason = "one answer per request, serialised at once: a box would only add an allocation"
)]
pub enum NextResponse {
    /// A quest is leased to you: do it and submit.
    Assigned {
        quest: LeasedQuest,
        lease: Lease,
        /// The full text for the agent.
        prompt: String,
        submit: SubmitHint,
    },
    /// Nothing is open now, but quests are in flight: ask again later.
    Wait { retry_after_seconds: u32 },
    /// No quest remains.
    Finished,
}

/// The quest part of an assignment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeasedQuest {
    pub id: QuestId,
    pub session_id: SessionId,
    pub key: String,
    #[schema(value_type = Object)]
    pub input: Value,
    pub tries: u32,
    pub max_tries: u32,
    /// The facts of the last FAIL, with hints.
    pub last_facts: Vec<Fact>,
}

/// A lease: the id that fences every later write, and when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Lease {
    pub id: LeaseId,
    pub expires_at: DateTime<Utc>,
}

/// Where and what to submit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubmitHint {
    pub url: String,
    #[schema(value_type = Object)]
    pub result_example: Value,
}

/// The body of `submit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub lease_id: LeaseId,
    /// The result: a JSON object.
    #[schema(value_type = Object)]
    pub result: Map<String, Value>,
}

/// The query of `submit`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SubmitQuery {
    /// Seconds to wait for the gate before answering 202 PENDING (0 to 300; default 30).
    pub wait: Option<u32>,
}

/// The answer to `submit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubmitResponse {
    pub submission_id: SubmissionId,
    pub verdict: SubmissionVerdict,
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub max_tries: u32,
    pub facts: Vec<Fact>,
    pub remaining: u64,
    pub receipt: Option<String>,
    /// After a FAIL that leaves the quest TODO: the same lease, renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// True when this was the identical retry of the latest submission: its
    /// recorded verdict, not a new check. A FAIL stays a FAIL until the result changes.
    #[serde(default)]
    pub replayed: bool,
}

/// The body of heartbeat and release.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub lease_id: LeaseId,
}

/// One submission and its verdict.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Submission {
    pub id: SubmissionId,
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub agent: String,
    #[schema(value_type = Object)]
    pub result: Value,
    pub verdict: SubmissionVerdict,
    pub facts: Vec<Fact>,
    #[schema(value_type = Vec<Object>)]
    pub evidence: Vec<Value>,
    pub gate: Option<String>,
    pub gate_version: Option<String>,
    pub receipt: Option<String>,
    /// The quest's state right after this verdict.
    pub state_after: Option<State>,
    pub tries_after: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl From<SubmissionRow> for Submission {
    fn from(s: SubmissionRow) -> Self {
        Submission {
            id: s.id,
            quest_id: s.quest_id,
            session_id: s.session_id,
            agent: s.agent.to_string(),
            result: s.result,
            verdict: s.verdict,
            facts: s.facts,
            evidence: s.evidence,
            gate: s.gate,
            gate_version: s.gate_version,
            receipt: s.receipt,
            state_after: s.state_after,
            tries_after: s.tries_after,
            created_at: s.created_at,
            decided_at: s.decided_at,
        }
    }
}

/// A submission with the quest's state after it: what a client polling after a
/// 202 needs, shaped like the answer of `submit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubmissionDetail {
    #[serde(flatten)]
    pub submission: Submission,
    /// The quest's state now.
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub max_tries: u32,
    pub remaining: u64,
    /// The same lease, renewed, while the quest stays with its agent after a FAIL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// A reviewer's recorded decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReviewDecision {
    /// The name of the reviewer's token when it decided.
    pub reviewer: String,
    /// The token that decided (`null` for decisions recorded before tokens were kept).
    #[serde(default)]
    pub reviewer_token_id: Option<TokenId>,
    pub decision: Decision,
    pub note: String,
    /// `first`: one of the looks the quest needs (with one reviewer, the
    /// only one); `adjudication`: the decision on looks that disagreed.
    pub look: Look,
    /// Whether this decision decided the quest (the others were looks that
    /// left it waiting, or that disagreed).
    pub decides: bool,
    pub created_at: DateTime<Utc>,
}

impl From<ReviewDecisionRow> for ReviewDecision {
    fn from(r: ReviewDecisionRow) -> Self {
        ReviewDecision {
            reviewer: r.reviewer,
            reviewer_token_id: r.reviewer_token,
            decision: r.decision,
            note: r.note,
            look: r.look,
            decides: r.decides,
            created_at: r.created_at,
        }
    }
}

/// A quest with its full history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Quest {
    pub id: QuestId,
    pub session_id: SessionId,
    /// 0-based position of the row in the upload.
    pub row: u64,
    pub key: String,
    #[schema(value_type = Object)]
    pub input: Value,
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub lapses: u32,
    /// Every lease the quest was granted; only its last leases are kept.
    #[serde(default)]
    pub leases: u32,
    pub last_facts: Vec<Fact>,
    /// The result under review or accepted.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    pub receipt: Option<String>,
    /// `gate`, `reviewer:<name>` or `limit`.
    pub decided_by: Option<String>,
    /// The name of the reviewer holding the review claim.
    pub review_claimed_by: Option<String>,
    /// The token holding the review claim: claims belong to tokens, not names.
    #[serde(default)]
    pub review_claimed_by_token: Option<TokenId>,
    pub review_claim_expires_at: Option<DateTime<Utc>>,
    /// How many reviewers' agreeing first looks decide it in REVIEW (the
    /// session's `review.reviewers`, or what its `overlap_rate` drew); `null`
    /// until the quest enters REVIEW, and always for agent tokens, so that no
    /// agent knows how closely its work will be looked at.
    pub reviews_required: Option<u32>,
    pub updated_at: DateTime<Utc>,
    pub submissions: Vec<Submission>,
    /// Its review decisions. While it is in REVIEW, the first looks of other
    /// reviewers are left out (a reviewer judges alone), but for admin
    /// tokens and for an adjudicator of looks that disagree.
    pub reviews: Vec<ReviewDecision>,
    /// Every AI verifier answer about this quest; each is also a fact in
    /// `last_facts`, with `check` = `l2:<verifier>`.
    #[serde(default)]
    pub l2_answers: Vec<L2Answer>,
    /// What the latest re-check left on a PASS quest: `stale` (the world now
    /// contradicts the result), `unconfirmed` (it could not confirm it), or
    /// null. The quest stays PASS either way.
    #[serde(default)]
    pub recheck_mark: Option<Mark>,
    #[serde(default)]
    pub rechecked_at: Option<DateTime<Utc>>,
    /// The facts of the latest re-check.
    #[serde(default)]
    pub recheck_facts: Vec<Fact>,
    /// Every re-check of the quest, oldest first.
    #[serde(default)]
    pub rechecks: Vec<Recheck>,
    /// Marked suspect by the gold floor: the token that obtained this PASS
    /// from the gate alone later fell under the session's floor on gold.
    /// The quest stays PASS.
    #[serde(default)]
    pub suspect: bool,
    /// Found wrong by an audit (a post-hoc one, or one of a suspect). The
    /// quest stays PASS.
    #[serde(default)]
    pub audit_rejected: bool,
}

/// One AI verifier's answer to one question about an accepted submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct L2Answer {
    pub submission_id: SubmissionId,
    pub verifier: String,
    pub model: String,
    /// 0-based position of the question in the session's `verify.questions`.
    pub question_index: u32,
    pub question: String,
    /// The answer that raises the doubt.
    pub flag_on: FlagOn,
    /// The reply as received; null when none came.
    pub raw_reply: Option<String>,
    /// The clean answer; null is no answer.
    pub answer: Option<Answer>,
    /// The reason given, or why there is no answer.
    pub detail: String,
    /// Whether this answer raised the doubt.
    pub flagged: bool,
    pub attempts: u32,
    pub latency_ms: u64,
    pub created_at: DateTime<Utc>,
}

impl From<L2AnswerRow> for L2Answer {
    fn from(a: L2AnswerRow) -> Self {
        L2Answer {
            submission_id: a.submission_id,
            verifier: a.verifier,
            model: a.model,
            question_index: a.question_index,
            question: a.question,
            flag_on: a.flag_on,
            raw_reply: a.raw_reply,
            answer: a.answer,
            detail: a.detail,
            flagged: a.flagged,
            attempts: a.attempts,
            latency_ms: a.latency_ms,
            created_at: a.created_at,
        }
    }
}

impl Quest {
    /// Builds the wire quest from its row and history.
    pub fn new(
        q: QuestRow,
        submissions: Vec<SubmissionRow>,
        reviews: Vec<ReviewDecisionRow>,
        l2_answers: Vec<L2AnswerRow>,
    ) -> Quest {
        Quest {
            id: q.id,
            session_id: q.session_id,
            row: q.row_index,
            key: q.key,
            input: q.input,
            state: q.state,
            phase: q.phase,
            tries: q.tries,
            lapses: q.lapses,
            leases: q.leases,
            last_facts: q.last_facts,
            result: q.result,
            receipt: q.receipt,
            decided_by: q.decided_by,
            review_claimed_by: q.review_claimed_by.as_ref().map(|r| r.name.clone()),
            review_claimed_by_token: q.review_claimed_by.as_ref().map(|r| r.token),
            review_claim_expires_at: q.review_claim_expires_at,
            // The draw is the quest's once it enters REVIEW; before, it is nobody's to know.
            reviews_required: (q.state == crate::domain::State::Review || !reviews.is_empty())
                .then_some(q.reviews_required),
            updated_at: q.updated_at,
            submissions: submissions.into_iter().map(Submission::from).collect(),
            reviews: reviews.into_iter().map(ReviewDecision::from).collect(),
            l2_answers: l2_answers.into_iter().map(L2Answer::from).collect(),
            recheck_mark: q.recheck_mark,
            rechecked_at: q.rechecked_at,
            recheck_facts: q.recheck_facts,
            rechecks: Vec::new(),
            suspect: false,
            audit_rejected: false,
        }
    }

    /// Adds the quest's re-checks.
    pub fn with_rechecks(mut self, rechecks: Vec<RecheckRow>) -> Quest {
        self.rechecks = rechecks.into_iter().map(Recheck::from).collect();
        self
    }
}

/// The query of the review queue.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReviewQuery {
    /// Only quests of this session.
    pub session: Option<SessionId>,
    /// Only quests with a fact of this check among their last facts, i.e. the
    /// check that raised the doubt: `l2:alpha` (an AI verifier that flagged the
    /// result or gave no answer; its clear answers do not count), `l2` (no
    /// quorum or the flag threshold), or an L1 check such as `review_when`. A
    /// trailing `*` matches a prefix: `l2:*` is any AI verifier's doubt.
    pub check: Option<String>,
    /// At most this many quests (1 to 500; default 100).
    pub limit: Option<u32>,
}

/// A reviewer's decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    pub decision: Decision,
    #[serde(default)]
    pub note: String,
}

/// A review claim.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReviewClaim {
    pub quest_id: QuestId,
    pub claimed_by: String,
    pub expires_at: DateTime<Utc>,
}

/// The query of export.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// `csv` (default), `jsonl` or `xlsx`.
    #[param(pattern = "^(csv|jsonl|xlsx)$")]
    pub format: Option<String>,
}

/// Liveness and readiness answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
}

/// The query of `get_agent_lease`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AgentLeaseQuery {
    /// The agent name given to `next` (default: the token's own name).
    pub agent: Option<String>,
}

/// What one agent of the caller's token holds in a session, read without side effects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentLease {
    pub session_id: SessionId,
    /// The agent name asked about, as `next` records it.
    pub agent: String,
    /// The live lease, or null when the agent holds none.
    pub lease: Option<HeldLease>,
}

/// A live lease and the quest it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HeldLease {
    pub id: LeaseId,
    pub quest_id: QuestId,
    pub key: String,
    /// `leased`, or `checking` while the gate runs on a submission.
    pub phase: Phase,
    pub expires_at: DateTime<Utc>,
    /// The quest's FAILs so far, and how many end it in DONE.
    #[serde(default)]
    pub tries: u32,
    #[serde(default)]
    pub max_tries: u32,
    /// The facts of its last FAIL, if any.
    #[serde(default)]
    pub last_facts: Vec<Fact>,
}
