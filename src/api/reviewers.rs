//! Wire types of `GET /v1/sessions/{id}/reviewers`: how much a session's
//! reviewers agree (see [`crate::domain::agreement`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::agreement::{PairFigures, ReviewerFigures};
use crate::domain::ids::{SessionId, TokenId};

/// A session's reviewers and how much they agree, over its decided quests
/// (a quest still in REVIEW counts once decided, so that no figure tells a
/// reviewer what another said on it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Reviewers {
    pub session_id: SessionId,
    /// The session's `review.reviewers`: the looks each quest in REVIEW needs.
    pub reviewers_per_quest: u32,
    /// Every token that decided a quest of the session, by name.
    pub reviewers: Vec<ReviewerStats>,
    /// Every pair of reviewers who looked at the same quests.
    pub pairs: Vec<ReviewerPair>,
    /// Each reviewer's decisions on gold quests sent to review
    /// (`gold.review_rate`), whose right answer is known, most first.
    pub gold: Vec<ReviewerGold>,
}

/// What one reviewer's decisions on gold quests say: approving a right
/// answer or rejecting a wrong one is correct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReviewerGold {
    pub reviewer: String,
    pub reviewer_token_id: Option<TokenId>,
    /// Its decisions on gold quests (first looks and adjudications).
    pub decided: u64,
    pub correct: u64,
    /// The one-sided 95% Wilson lower bound on its accuracy; null before any decision.
    pub accuracy_lower_bound: Option<f64>,
    /// Canaries (no honest result can pass them) it approved.
    pub canaries_approved: u64,
}

/// One reviewer's decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReviewerStats {
    pub reviewer: String,
    /// The token (`null` for decisions recorded before tokens were kept).
    pub reviewer_token_id: Option<TokenId>,
    /// Every decision: first looks and adjudications.
    pub decisions: u64,
    pub first_looks: u64,
    pub adjudications: u64,
    /// Decisions an hour between their first and their last; `null` under two.
    pub decisions_per_hour: Option<f64>,
    /// First looks an adjudicator decided the other way.
    pub overruled: u64,
}

/// Two reviewers' agreement on the quests both gave a first look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReviewerPair {
    pub a: String,
    pub b: String,
    /// Quests both looked at.
    pub shared: u64,
    /// The share of those they decided alike.
    pub agreement: Option<f64>,
    /// Cohen's kappa over the shared quests (approve or reject); `null` with
    /// `kappa_reason` under 10 shared quests, or when chance agreement is 1.
    pub kappa: Option<f64>,
    pub kappa_reason: Option<String>,
}

impl From<ReviewerFigures> for ReviewerStats {
    fn from(f: ReviewerFigures) -> Self {
        ReviewerStats {
            reviewer: f.name,
            reviewer_token_id: f.token,
            decisions: f.decisions,
            first_looks: f.first_looks,
            adjudications: f.adjudications,
            decisions_per_hour: f.per_hour,
            overruled: f.overruled,
        }
    }
}

impl From<PairFigures> for ReviewerPair {
    fn from(p: PairFigures) -> Self {
        ReviewerPair {
            a: p.a,
            b: p.b,
            shared: p.shared,
            agreement: p.agreement,
            kappa: p.kappa,
            kappa_reason: p.kappa_reason,
        }
    }
}
