//! Wire types of a session's agents: each token's agent names with their
//! figures, and the token's score on the session's gold.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::ids::{SessionId, TokenId};

/// What one agent name did in a session (its gold quests are not counted).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentLine {
    pub name: String,
    pub leased: u64,
    pub submissions: u64,
    pub pass: u64,
    /// PASS verdicts on its first submission to the quest.
    pub pass_first: u64,
    pub fail: u64,
    pub review: u64,
    /// FAILs that used the quest's last try.
    pub done: u64,
    /// Its leases that expired.
    pub lapses: u64,
    pub last_seen: DateTime<Utc>,
}

/// A token's answers to gold: decided gold quests, the correct ones, and
/// the one-sided 95% Wilson lower bound on its accuracy (null before any).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GoldScore {
    pub answered: u64,
    pub correct: u64,
    pub accuracy_lower_bound: Option<f64>,
}

/// One token's agents in a session. Agents are counted per token: an agent
/// chooses its name, so its names are listed, not scored apart.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenAgents {
    pub token_id: TokenId,
    /// The token's name, when it still exists.
    pub token: Option<String>,
    pub agents: Vec<AgentLine>,
    /// Its score on the session's gold; null in a session without gold.
    pub gold: Option<GoldScore>,
}

/// A session's agents, by token.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionAgents {
    pub session_id: SessionId,
    pub tokens: Vec<TokenAgents>,
}

impl From<crate::domain::gold::Score> for GoldScore {
    fn from(s: crate::domain::gold::Score) -> GoldScore {
        GoldScore {
            answered: s.answered,
            correct: s.correct,
            accuracy_lower_bound: s.accuracy_lower_bound,
        }
    }
}
