//! Known answers in the store: the part of the [`super::Store`] trait that
//! keeps gold items, hands out gold quests, scores them and pauses the
//! tokens under a session's floor, and its rows. Each engine implements it
//! in its `gold` module, over the SQL both share (`store/sql/gold.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{LeaseRow, QuestRow, StoreError};
use crate::domain::gold::{CanaryPass, GoldKind};
use crate::domain::ids::{GoldItemId, QuestId, SessionId, TokenId};
use crate::domain::work::AgentId;

#[async_trait]
pub trait GoldStore {
    /// Adds gold items to a session (not a gold companion); how many it holds now.
    async fn add_gold(
        &self,
        session_id: SessionId,
        items: Vec<NewGoldItem>,
    ) -> Result<u64, StoreError>;
    /// A session's gold items, in the order they were added.
    async fn gold_items(&self, session_id: SessionId) -> Result<Vec<GoldItemRow>, StoreError>;
    /// What `next` reads to decide whether the agent's assignment is gold.
    async fn gold_standing(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<GoldStanding, StoreError>;
    /// Leases the agent a gold quest: the one it holds, its token's that
    /// went back to open, or (with `golds`, the gold quests it has had when
    /// the draw said gold) a new one; else `None`.
    async fn lease_gold(
        &self,
        session_id: SessionId,
        agent: &AgentId,
        golds: Option<u64>,
    ) -> Result<Option<(QuestRow, LeaseRow)>, StoreError>;
    /// The session's decided gold quests (or one token's), with their last answers.
    async fn gold_answers(
        &self,
        session_id: SessionId,
        token: Option<TokenId>,
    ) -> Result<Vec<GoldAnswerRow>, StoreError>;
    /// Pauses a token under the session's gold floor, marks its suspect
    /// PASSes and releases its leases; whether it paused it now.
    async fn pause_unqualified(&self, pause: UnqualifiedPause) -> Result<bool, StoreError>;
    /// How many of the session's quests carry each mark.
    async fn mark_counts(&self, session_id: SessionId) -> Result<Marks<u64>, StoreError>;
    /// The AI verifiers' clean answers about the answers to the session's gold.
    async fn gold_verifier_answers(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<GoldVerifierAnswer>, StoreError>;
    /// The marks on a quest.
    async fn quest_marks(&self, quest_id: QuestId) -> Result<Marks<bool>, StoreError>;
    /// The session's gold companion, which holds its gold quests; none
    /// before its first gold item.
    async fn companion(&self, session_id: SessionId) -> Result<Option<SessionId>, StoreError>;
    /// Every reviewer's decisions on the session's gold quests, oldest first.
    async fn gold_reviews(&self, session_id: SessionId) -> Result<Vec<GoldReviewRow>, StoreError>;
    /// The session's canaries that ended PASS, oldest first.
    async fn canary_passes(&self, session_id: SessionId) -> Result<Vec<CanaryPass>, StoreError>;
}

/// A gold item to add: its input, the expected result and how it is compared.
#[derive(Debug, Clone, PartialEq)]
pub struct NewGoldItem {
    pub kind: GoldKind,
    pub input: Map<String, Value>,
    pub expected: Map<String, Value>,
    pub compare: Map<String, Value>,
}

/// A gold item as stored, with how often it was handed out.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldItemRow {
    pub id: GoldItemId,
    pub seq: u64,
    pub kind: GoldKind,
    pub input: Map<String, Value>,
    /// None for a canary.
    pub expected: Option<Map<String, Value>>,
    pub compare: Map<String, Value>,
    pub created_at: DateTime<Utc>,
    pub handed_out: u64,
}

/// What `next` reads before it decides whether an agent's assignment is gold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GoldStanding {
    /// The session's gold companion, which holds its gold quests; none
    /// before the first item is added.
    pub companion: Option<SessionId>,
    /// The gold quest the agent holds, with its live lease.
    pub held: Option<(QuestRow, LeaseRow)>,
    /// Whether the agent holds a real quest of the session.
    pub holds_real: bool,
    /// The token's assignments in the session so far, gold ones included.
    pub assignments: u64,
    /// The gold quests handed out to the token in the session.
    pub golds: u64,
    /// Whether the token is paused in the session (it leases nothing there).
    pub paused: bool,
    /// Whether the agent's gold lease ran out and is not yet swept.
    pub lapsed: bool,
    /// Whether a gold quest of its token went back to open (released or
    /// lapsed): it is handed back before any other.
    pub reopened: bool,
}

/// One decided gold quest: whose it is and what its last submission said.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldAnswerRow {
    pub quest_id: QuestId,
    pub token: TokenId,
    pub item: GoldItemId,
    pub expected: Map<String, Value>,
    pub compare: Map<String, Value>,
    /// The result of the quest's last submission, if it has one.
    pub answer: Option<Value>,
    /// The agent name that gave it.
    pub agent: Option<String>,
    pub decided_at: DateTime<Utc>,
}

/// A pause of a token whose gold answers fell under the session's floor.
#[derive(Debug, Clone, PartialEq)]
pub struct UnqualifiedPause {
    pub session: SessionId,
    pub token: TokenId,
    /// The agent name of its latest gold answer (shown only).
    pub agent: String,
    /// What caused it: answered, correct, the bound and the floor.
    pub figures: Value,
    /// When its first wrong gold answer was decided: its PASSes from the
    /// gate alone since then are marked suspect (none without one).
    pub since: Option<DateTime<Utc>>,
    /// Whether each new suspect gets a label-only audit review.
    pub audit: bool,
}

/// The marks of the gold floor and the audits on PASS quests, which never
/// change a state: per quest (`bool`) or counted in a session (`u64`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Marks<T> {
    /// Marked suspect by the gold floor.
    pub suspect: T,
    /// Found wrong by an audit (post-hoc, or of a suspect).
    pub audit_rejected: T,
}

/// One reviewer's decision on a gold quest, with what it was asked about.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldReviewRow {
    pub reviewer: String,
    pub reviewer_token: Option<TokenId>,
    pub decision: crate::domain::Decision,
    pub kind: GoldKind,
    /// The result it decided on.
    pub answer: Option<Value>,
    /// The expected result (none for a canary).
    pub expected: Option<Map<String, Value>>,
    pub compare: Map<String, Value>,
}

/// One AI verifier's clean answer about the answer to a gold quest.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldVerifierAnswer {
    pub verifier: String,
    pub question_index: u32,
    pub flagged: bool,
    /// The result it was asked about.
    pub result: Value,
    pub expected: Map<String, Value>,
    pub compare: Map<String, Value>,
}
