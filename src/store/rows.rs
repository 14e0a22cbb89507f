//! The rows and values the [`Store`](super::Store) trait takes and returns:
//! plain data, the same for every backend.

use crate::domain::ids::{L2JobId, LeaseId, QuestId, SessionId, SubmissionId, TokenId};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::domain::recheck::Mark;
use crate::domain::replay::IdempotencyKey;
use crate::domain::review::Look;
use crate::domain::session::SessionConfig;
use crate::domain::table::Row;
use crate::domain::verify::{Answer, FlagOn, L2JobStatus, VerifierRequest};
use crate::domain::work::{AgentId, ReviewerId};
use crate::domain::{Decision, Fact, Phase, Role, State, SubmissionVerdict, Verdict};

/// A session and its counts, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub id: SessionId,
    pub name: String,
    pub key_column: String,
    pub config: SessionConfig,
    pub columns: Vec<String>,
    pub source_name: String,
    pub total: u64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// For a session's gold companion (the session that holds its gold
    /// quests, never listed nor served), the session it belongs to.
    pub gold_of: Option<SessionId>,
}

/// What a scan stores: the session, the uploaded bytes and one quest per row.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: SessionId,
    pub name: String,
    pub key_column: String,
    pub config: SessionConfig,
    pub columns: Vec<String>,
    pub source_name: String,
    pub source_type: String,
    pub source: Vec<u8>,
    pub created_by: String,
    /// `(key, input)` for every row, in upload order.
    pub rows: Vec<(String, Row)>,
    /// The server's key of the draws of `review.overlap_rate` (none: every
    /// quest needs `review.reviewers` looks).
    pub review_key: Option<String>,
}

impl NewSession {
    /// A new quest's id: random in a session with gold, so that no id tells
    /// when its quest was made (a gold quest is made when it is handed out).
    pub fn quest_id(&self) -> QuestId {
        match self.config.gold {
            Some(_) => QuestId::random(),
            None => QuestId::new(),
        }
    }

    /// How many looks the new quest `id` needs in REVIEW.
    pub fn looks_required(&self, id: QuestId) -> u32 {
        match &self.review_key {
            Some(key) => crate::domain::review::looks_required(&self.config, key, id),
            None => self.config.reviewers(),
        }
    }
}

/// One quest, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestRow {
    pub id: QuestId,
    pub session_id: SessionId,
    pub row_index: u64,
    pub key: String,
    pub input: Value,
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub lapses: u32,
    /// Every lease the quest was ever granted (old lease rows are pruned).
    pub leases: u32,
    pub lease_id: Option<LeaseId>,
    pub last_facts: Vec<Fact>,
    pub result: Option<Value>,
    pub submission_id: Option<SubmissionId>,
    pub receipt: Option<String>,
    pub decided_by: Option<String>,
    /// The reviewer (token and name) holding the review claim.
    pub review_claimed_by: Option<ReviewerId>,
    pub review_claim_expires_at: Option<DateTime<Utc>>,
    /// How many reviewers' agreeing first looks decide it in REVIEW.
    pub reviews_required: u32,
    /// The last two FAILs carried the same facts (a doom loop the prompt names).
    pub repeated_failure: bool,
    pub updated_at: DateTime<Utc>,
    /// What the latest re-check left on a PASS quest (`None`: confirmed, or never re-checked).
    pub recheck_mark: Option<Mark>,
    /// When the quest was last re-checked.
    pub rechecked_at: Option<DateTime<Utc>>,
    /// The facts of the latest re-check.
    pub recheck_facts: Vec<Fact>,
}

/// What a session's random audits found, and its PASS rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualityCounts {
    /// The decided audits, by stratum (the gate alone first).
    pub audits: Vec<crate::domain::quality::Audits>,
    /// Audits drawn and still waiting for a person.
    pub pending_audits: u64,
    pub pass: u64,
    /// PASS rows a person decided, audits included.
    pub pass_by_person: u64,
    /// Machine-decided PASS rows no audit drew.
    pub unaudited: u64,
    /// Audits drawn where the quest would become PASS that a person approved
    /// (PASS rows decided by a person, and covered by the bound).
    pub approved_at_pass: u64,
    /// Post-hoc audits a person rejected: PASS rows known to be wrong.
    pub known_errors: u64,
}

/// A quest of the review queue, with where it stands with its reviewers.
#[derive(Debug, Clone)]
pub struct QueuedQuest {
    pub quest: QuestRow,
    /// Its first looks so far (how many, whether they disagree).
    pub stage: crate::domain::review::Stage,
    /// The claims of the reviewers taking a look at once (a quest needing
    /// several looks keeps them apart from its own claim), ended ones too.
    pub look_claims: Vec<(ReviewerId, DateTime<Utc>)>,
}

#[cfg(test)]
impl QuestRow {
    /// A quest with nothing happened to it yet, in `state`, for unit tests.
    pub fn example(id: QuestId, state: State) -> QuestRow {
        QuestRow {
            id,
            session_id: SessionId::new(),
            row_index: 0,
            key: "k".into(),
            input: serde_json::json!({}),
            state,
            phase: None,
            tries: 0,
            lapses: 0,
            leases: 0,
            lease_id: None,
            last_facts: vec![],
            result: None,
            submission_id: None,
            receipt: None,
            decided_by: None,
            review_claimed_by: None,
            review_claim_expires_at: None,
            reviews_required: 1,
            repeated_failure: false,
            updated_at: chrono::Utc::now(),
            recheck_mark: None,
            rechecked_at: None,
            recheck_facts: vec![],
        }
    }
}

/// A live lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRow {
    pub id: LeaseId,
    pub quest_id: QuestId,
    pub agent: AgentId,
    pub expires_at: DateTime<Utc>,
}

/// The answer to `next`.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one outcome per lease, moved once into the answer: a box would only add an allocation"
)]
pub enum LeaseOutcome {
    /// A quest is the agent's until the lease expires.
    Assigned { quest: QuestRow, lease: LeaseRow },
    /// Nothing is open now, but quests are in flight.
    Wait { retry_after_seconds: u32 },
    /// No quest remains.
    Finished,
}

/// One submission, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionRow {
    pub id: SubmissionId,
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub lease_id: LeaseId,
    pub agent: AgentId,
    pub result: Value,
    pub verdict: SubmissionVerdict,
    pub facts: Vec<Fact>,
    pub evidence: Vec<Value>,
    pub gate: Option<String>,
    pub gate_version: Option<String>,
    pub receipt: Option<String>,
    pub state_after: Option<State>,
    pub tries_after: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    /// The FAIL whose result this one repeats unchanged on the same lease: its
    /// verdict, if a FAIL, gets the `unchanged` fact.
    pub repeats: Option<SubmissionId>,
}

/// A result an agent hands in for the quest it holds.
#[derive(Debug, Clone)]
pub struct NewSubmission {
    pub quest_id: QuestId,
    pub lease_id: LeaseId,
    /// The token of the caller; the lease's agent must belong to it.
    pub token_id: TokenId,
    pub result: Value,
    /// Digest of the canonical result (see [`crate::domain::replay`]).
    pub result_hash: String,
    /// The client's name for this logical submit, unique per token: a
    /// request with a recorded key is answered by that submission.
    pub idempotency_key: Option<IdempotencyKey>,
}

/// What `submit` did.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitOutcome {
    /// A new submission: PENDING when the gate must still run, else decided,
    /// with the L2 jobs its PASS created.
    Recorded {
        view: SubmissionView,
        l2_jobs: Vec<L2JobId>,
    },
    /// A recorded submission answers (see [`crate::domain::replay`]): its
    /// record as it stands, unchanged.
    Replayed(SubmissionView),
}

/// A gate's decision, ready to be applied.
#[derive(Debug, Clone)]
pub struct GateDecision {
    pub verdict: Verdict,
    pub facts: Vec<Fact>,
    pub evidence: Vec<Value>,
    pub gate: String,
    pub gate_version: String,
    pub receipt: String,
    /// What the session's AI verifiers may see, when it has verifiers. Needed to
    /// apply a PASS to such a session: the L2 jobs are written with the verdict.
    pub verify: Option<VerifierRequest>,
}

/// A submission the gate runner must decide.
#[derive(Debug, Clone)]
pub struct GateJob {
    pub submission: SubmissionRow,
    /// The quest's key, for the task template.
    pub key: String,
    pub input: Value,
    pub config: SessionConfig,
    /// Its session is a gold companion: the quest is gold.
    pub gold: bool,
}

/// The state after a verdict was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub submission: SubmissionRow,
    pub quest: QuestRow,
    /// L2 jobs written with an L1 PASS that awaits the AI verifiers.
    pub l2_jobs: Vec<L2JobId>,
}

/// One question for one verifier about one accepted submission.
#[derive(Debug, Clone, PartialEq)]
pub struct L2Job {
    pub id: L2JobId,
    pub submission_id: SubmissionId,
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub verifier: String,
    pub question_index: u32,
    pub question: String,
    pub flag_on: FlagOn,
    /// Exactly what the verifier sees besides the question.
    pub request: VerifierRequest,
    pub status: L2JobStatus,
}

/// A verifier's outcome on one job, ready to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewL2Answer {
    pub job_id: L2JobId,
    pub model: String,
    /// The reply as received; `None` when there was none.
    pub raw_reply: Option<String>,
    /// The clean answer; `None` is no answer.
    pub answer: Option<Answer>,
    /// The reason given, or why there is no answer.
    pub detail: String,
    pub attempts: u32,
    pub latency_ms: u64,
}

/// One recorded L2 answer.
#[derive(Debug, Clone, PartialEq)]
pub struct L2AnswerRow {
    pub job_id: L2JobId,
    pub submission_id: SubmissionId,
    pub quest_id: QuestId,
    pub verifier: String,
    pub model: String,
    pub question_index: u32,
    pub question: String,
    pub flag_on: FlagOn,
    pub raw_reply: Option<String>,
    pub answer: Option<Answer>,
    pub detail: String,
    pub flagged: bool,
    pub attempts: u32,
    pub latency_ms: u64,
    pub created_at: DateTime<Utc>,
}

/// What recording an answer did.
#[derive(Debug, Clone, PartialEq)]
pub struct L2Recorded {
    pub answer: L2AnswerRow,
    /// `(a, b, agreed)` for every other verifier (a < b) that had validly
    /// answered the same question of the same submission.
    pub compared: Vec<(String, String, bool)>,
    /// The quest, when this answer was the last one and the decision was applied.
    pub verified: Option<QuestRow>,
    /// The job had been answered before: nothing was recorded now, and
    /// `answer` is the earlier answer (so no figure may count it again).
    pub replayed: bool,
}

/// Running figures of one verifier in one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierStats {
    pub verifier: String,
    pub model: String,
    /// Valid answers.
    pub answers: u64,
    pub yes: u64,
    pub no: u64,
    pub flags: u64,
    pub no_answers: u64,
    /// Over every call, answered or not.
    pub latency_ms_sum: u64,
    pub latency_ms_max: u64,
}

/// How often two verifiers gave the same answer to the same question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairStats {
    pub a: String,
    pub b: String,
    pub compared: u64,
    pub agreed: u64,
}

/// A submission with what its submitter needs to know next, read in one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionView {
    pub submission: SubmissionRow,
    pub quest: QuestRow,
    pub max_tries: u32,
    pub remaining: u64,
    /// The quest's live lease, when it has one.
    pub lease: Option<LeaseRow>,
}

/// Counts of one session, read in one snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u64,
    pub open: u64,
    pub leased: u64,
    pub checking: u64,
    pub verifying: u64,
    pub pass: u64,
    pub review: u64,
    pub done: u64,
    pub submissions: u64,
}

impl Counts {
    /// Quests still TODO, in any phase.
    pub fn remaining(&self) -> u64 {
        self.open + self.leased + self.checking + self.verifying
    }
}

/// Progress of one session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStatus {
    pub counts: Counts,
    pub agents_active: u64,
    /// Quests that reached a terminal state per minute, over the last five minutes.
    pub rate_per_minute: f64,
    /// Review decisions per hour, over the last fifteen minutes.
    pub reviews_per_hour: f64,
    /// Per AI verifier, by name.
    pub verifiers: Vec<VerifierStats>,
    /// Per pair of AI verifiers, by names.
    pub agreement: Vec<PairStats>,
}

/// A reviewer's decision on a quest.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewDecisionRow {
    pub reviewer: String,
    /// The token that decided; `None` for decisions recorded before tokens were kept.
    pub reviewer_token: Option<TokenId>,
    pub decision: Decision,
    pub note: String,
    pub look: Look,
    /// Whether it decided the quest.
    pub decides: bool,
    pub created_at: DateTime<Utc>,
}

/// A reviewer's decision held for its undo window, or (with `outcome`, the
/// refusal's code) one that could not be recorded when it fell due.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldDecisionRow {
    pub quest_id: QuestId,
    pub reviewer: ReviewerId,
    pub decision: Decision,
    pub note: String,
    pub held_at: DateTime<Utc>,
    pub effective_at: DateTime<Utc>,
    pub outcome: Option<String>,
}

/// A token to store: its name, role and the SHA-256 of its secret, with
/// what the role allows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewToken {
    pub name: String,
    pub role: Role,
    pub hash: String,
    /// The most leases it may hold at once; `None`: no cap.
    pub max_leases: Option<u32>,
    /// The sessions it is limited to; `None`: every session.
    pub sessions: Option<Vec<SessionId>>,
    /// A reviewer token that may adjudicate reviewers who disagree.
    pub adjudicate: bool,
}

impl NewToken {
    /// A token with no cap, no scope, and no adjudication.
    pub fn new(name: &str, role: Role, hash: &str) -> NewToken {
        NewToken {
            name: name.to_owned(),
            role,
            hash: hash.to_owned(),
            max_leases: None,
            sessions: None,
            adjudicate: false,
        }
    }
}

/// An API token's public part.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: TokenId,
    pub name: String,
    pub role: Role,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    /// The most leases it may hold at once; `None`: no cap.
    pub max_leases: Option<u32>,
    /// The sessions it is limited to (sorted); `None`: every session.
    pub sessions: Option<Vec<SessionId>>,
    /// A reviewer token that may adjudicate reviewers who disagree.
    pub adjudicate: bool,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// One row of an export.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportRow {
    pub row_index: u64,
    pub input: Map<String, Value>,
    pub state: State,
    pub decided_by: Option<String>,
    pub tries: u32,
    pub result: Option<Map<String, Value>>,
    pub last_facts: Vec<Fact>,
    /// The evidence of the last decided submission (the one `last_facts` came from).
    pub last_evidence: Vec<Value>,
    pub receipt: Option<String>,
    pub recheck_mark: Option<Mark>,
    pub rechecked_at: Option<DateTime<Utc>>,
    pub recheck_facts: Vec<Fact>,
    /// Whether the gold floor marked it suspect (its token's gold answers
    /// fell under the floor after it was decided).
    pub suspect: bool,
    /// Its post-hoc audit: `pending`, `approved` or `rejected`.
    pub audit: Option<&'static str>,
    /// Every review decision of a decided quest, as JSON text, when asked for.
    pub reviews: Option<String>,
}

/// An uploaded file, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    pub name: String,
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// How many pieces of [`SOURCE_CHUNK`] bytes (the last one shorter) it is stored in.
    pub pieces: u64,
}

/// A browser session of the console, read with its live token.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserSessionRow {
    /// The token that signed in; the session lives only while it does.
    pub token: TokenRow,
    /// The per-session token every console form carries.
    pub csrf: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// One agent's running figures in one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatsRow {
    /// `<token id>/<agent name>`.
    pub agent: String,
    /// The name of the agent's token, when it is still known.
    pub token_name: Option<String>,
    pub leased: u64,
    pub submissions: u64,
    pub pass: u64,
    /// PASS verdicts on the agent's first submission to the quest.
    pub pass_first: u64,
    pub fail: u64,
    pub review: u64,
    /// FAILs that used the quest's last try.
    pub done: u64,
    /// The agent's leases that expired.
    pub lapses: u64,
    /// Over its PASSes: how many submissions it made to that quest up to the PASS.
    pub tries_to_pass: u64,
    pub last_seen: DateTime<Utc>,
}

/// Which verdicts a tally of facts counts by: the checks that fail most, or
/// the reasons quests go to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    Fails,
    Reviews,
}

impl Tally {
    /// The column of `console_fact_counts` it counts.
    pub fn column(self) -> &'static str {
        match self {
            Tally::Fails => "fails",
            Tally::Reviews => "reviews",
        }
    }
}

/// The facts of one check and field over a session's FAIL and REVIEW
/// verdicts, with the latest one as the example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingCheckRow {
    pub check: String,
    pub field: String,
    pub fails: u64,
    pub reviews: u64,
    pub example: Fact,
    pub quest_id: QuestId,
    pub quest_key: String,
    pub submission_id: SubmissionId,
}

/// Quests decided per minute, oldest minute first; the last is the current minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throughput {
    /// The start of the current (last) minute.
    pub until: DateTime<Utc>,
    pub per_minute: Vec<u64>,
}

/// Which quests of a session to list, and where the page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuestQuery {
    pub state: Option<State>,
    /// A part of the key, ASCII letter case ignored.
    pub search: Option<String>,
    /// Only quests with a FAIL or REVIEW verdict carrying a fact of this check...
    pub check: Option<String>,
    /// ... and, when given, of this field.
    pub field: Option<String>,
    /// Only PASS quests whose latest re-check left this mark.
    pub mark: Option<Mark>,
    /// The page after this row (exclusive), or before it when `backwards`.
    pub cursor: Option<u64>,
    pub backwards: bool,
    pub limit: u32,
}

/// One page of a session's quests, in upload order.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestPage {
    pub quests: Vec<QuestRow>,
    /// Whether matching quests come before the page.
    pub has_previous: bool,
    /// Whether matching quests come after it.
    pub has_next: bool,
}

/// A consistent copy of the database in a file of its own, removed when dropped.
#[derive(Debug)]
pub struct Backup {
    pub path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Backup {
    /// A backup to be written at `dir/name`; the folder goes with the value.
    pub fn new(dir: tempfile::TempDir, name: &str) -> Backup {
        Backup {
            path: dir.path().join(name),
            _dir: dir,
        }
    }
}

/// Durable state of the service.
/// A live lease with the quest it holds, as [`Store::agent_lease`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentLeaseRow {
    pub lease_id: LeaseId,
    pub quest_id: QuestId,
    pub key: String,
    pub phase: Phase,
    pub tries: u32,
    pub last_facts: Vec<Fact>,
    pub expires_at: DateTime<Utc>,
}
