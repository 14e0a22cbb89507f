//! Wire types of known answers: the gold items an operator adds to a
//! session, and what the answers to them say of each token.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub use crate::domain::gold::CanaryPass;
use crate::domain::gold::{GoldConfig, GoldKind};
use crate::domain::ids::{GoldItemId, TokenId};

/// One known-answer item: an input shaped like the session's rows, the
/// result an honest agent gives for it, and how each field is compared; or
/// a canary (`"kind": "canary"`), an input no honest result can pass, with
/// no `expected`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GoldItem {
    /// `gold` (the default) or `canary`.
    #[serde(default)]
    pub kind: GoldKind,
    /// The row the agent is shown, by the session's column names (a name
    /// the session does not have is refused: the row must look like its own).
    #[schema(value_type = Object)]
    pub input: Map<String, Value>,
    /// The right result (a gold item's; a canary has none).
    #[schema(value_type = Object)]
    #[serde(default)]
    pub expected: Map<String, Value>,
    /// Per field of `expected`, its rule: `exact` (the default: strings are
    /// trimmed and their white space runs made one space), `casefold`,
    /// `number`, `{"number": tolerance}` or `set`.
    #[schema(value_type = Object)]
    #[serde(default)]
    pub compare: Map<String, Value>,
}

/// Gold items to add to a session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddGold {
    /// 1 to 1000 items per request.
    pub items: Vec<GoldItem>,
}

/// What an addition of gold left.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GoldAdded {
    pub added: usize,
    /// The items the session holds now.
    pub items: u64,
}

/// A gold item as stored, with how often it was handed out.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GoldItemView {
    pub id: GoldItemId,
    pub kind: GoldKind,
    #[schema(value_type = Object)]
    pub input: Map<String, Value>,
    /// The right result; null for a canary.
    #[schema(value_type = Option<Object>)]
    pub expected: Option<Map<String, Value>>,
    #[schema(value_type = Object)]
    pub compare: Map<String, Value>,
    pub handed_out: u64,
    pub created_at: DateTime<Utc>,
}

/// What one token's answers to gold say. Agent names are shown, not
/// counted apart: an agent chooses its name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenGold {
    pub token_id: TokenId,
    /// The token's name, when it still exists.
    pub token: Option<String>,
    /// The agent names that answered under it.
    pub agents: Vec<String>,
    /// Its gold answers (decided gold quests).
    pub answered: u64,
    pub correct: u64,
    /// The one-sided 95% Wilson lower bound on its accuracy; null before any answer.
    pub accuracy_lower_bound: Option<f64>,
}

/// A session's known answers: its settings, items and every token's score.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionGold {
    pub config: GoldConfig,
    pub items: Vec<GoldItemView>,
    /// Gold quests handed out, in all.
    pub handed_out: u64,
    /// Per token that answered gold, most answers first.
    pub tokens: Vec<TokenGold>,
    /// The canaries that ended PASS, oldest first: each paused its token
    /// in every session.
    pub canary_passes: Vec<CanaryPass>,
}

/// One AI verifier's answers to one question about the answers to gold:
/// whether it flagged the wrong ones and cleared the right ones. Reported
/// apart from the calibration against reviewers (a per-field comparison may
/// call a right but differently written answer wrong).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifierGold {
    pub verifier: String,
    pub question_index: u32,
    /// Its clean answers about gold answers.
    pub answered: u64,
    /// It flagged a wrong answer.
    pub caught: u64,
    /// It cleared a wrong answer.
    pub missed: u64,
    /// It flagged a right answer.
    pub false_alarms: u64,
    /// It cleared a right answer.
    pub cleared: u64,
}
