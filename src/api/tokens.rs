//! The wire types of API tokens: a token's request, its public part, and
//! the secret shown once at creation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::Role;
use crate::domain::ids::{SessionId, TokenId};
use crate::store::TokenRow;

/// The body of token creation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    pub name: String,
    pub role: Role,
    /// The most leases the token may hold at once, over all sessions (1 to
    /// 1000000). Left out: 64 for an agent token, no cap for an admin token;
    /// reviewer and viewer tokens lease nothing and take none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000000)]
    pub max_leases: Option<u32>,
    /// The sessions the token is limited to (1 to 1000 existing ids; not
    /// for an admin token). Left out: every session. A limited token is
    /// refused (403 `out_of_scope`) on any other session or its quests, and
    /// lists only its own sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<SessionId>>,
    /// A reviewer token that may adjudicate: decide a quest whose reviewers
    /// disagree (with `review.reviewers` above 1), unless it gave that quest
    /// a look. Admin tokens adjudicate without it; other roles may not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adjudicate: bool,
}

/// A token's public part.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    pub id: TokenId,
    pub name: String,
    pub role: Role,
    /// The most leases it may hold at once; `null`: no cap. Past it, `next`
    /// is refused with 409 `lease_cap`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    pub max_leases: Option<u32>,
    /// The sessions it is limited to; `null`: every session.
    #[serde(default)]
    pub sessions: Option<Vec<SessionId>>,
    /// Whether it adjudicates reviewers who disagree (admins always do).
    #[serde(default)]
    pub adjudicate: bool,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for Token {
    fn from(t: TokenRow) -> Self {
        Token {
            id: t.id,
            name: t.name,
            role: t.role,
            max_leases: t.max_leases,
            sessions: t.sessions,
            adjudicate: t.adjudicate,
            created_at: t.created_at,
            revoked_at: t.revoked_at,
        }
    }
}

/// A new token, with its secret shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: Token,
    /// The bearer secret. It is stored only as a hash and cannot be shown again.
    pub secret: String,
}
