//! Pauses on the wire: a token paused in a session, and `next`'s answer to it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::ErrorDetail;
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::{self, PauseReason};

/// A pause of a token in a session: while it is live (`resumed_at` null),
/// `next` of that token there is refused with 409 `agent_paused`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Pause {
    pub id: Uuid,
    pub session_id: SessionId,
    /// The paused token: agents choose their names, so the token is what is paused.
    pub token_id: TokenId,
    /// The agent name of the quest that made the pause (shown only).
    pub agent: String,
    pub reason: PauseReason,
    /// The figures that caused it, e.g. `{"consecutive_done": 5, "max_consecutive_done": 5}`.
    #[schema(value_type = Object)]
    pub figures: Value,
    pub created_at: DateTime<Utc>,
    pub resumed_at: Option<DateTime<Utc>>,
    /// The name of the token that resumed it.
    pub resumed_by: Option<String>,
    /// Who can resume it, and how.
    pub resume: String,
}

impl From<pause::Pause> for Pause {
    fn from(p: pause::Pause) -> Self {
        Pause {
            resume: format!(
                "an admin: `quest agent resume {} --session {}`, \
                 POST /v1/sessions/{}/tokens/{}/resume, or the session's page in the console",
                p.token_id, p.session_id, p.session_id, p.token_id
            ),
            id: p.id,
            session_id: p.session_id,
            token_id: p.token_id,
            agent: p.agent,
            reason: p.reason,
            figures: p.figures,
            created_at: p.created_at,
            resumed_at: p.resumed_at,
            resumed_by: p.resumed_by,
        }
    }
}

/// `next`'s answer (409) while the token is paused in the session: stop and
/// tell the operator. The `error` is `agent_paused`; `pause` says why and
/// who can resume.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NextPaused {
    pub error: ErrorDetail,
    pub pause: Pause,
}
