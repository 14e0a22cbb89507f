//! The rows of known answers: gold items as stored, what `next` reads to
//! decide whether an assignment is gold, and the answers that score tokens.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{LeaseRow, QuestRow};
use crate::domain::ids::{GoldItemId, QuestId, SessionId, TokenId};

/// A gold item to add: its input, the expected result and how it is compared.
#[derive(Debug, Clone, PartialEq)]
pub struct NewGoldItem {
    pub input: Map<String, Value>,
    pub expected: Map<String, Value>,
    pub compare: Map<String, Value>,
}

/// A gold item as stored, with how often it was handed out.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldItemRow {
    pub id: GoldItemId,
    pub seq: u64,
    pub input: Map<String, Value>,
    pub expected: Map<String, Value>,
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
}
