//! The AI verifiers' figures in a session's status: answers, flags and
//! latency per verifier, and how often two verifiers agree.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{PairStats, VerifierStats};

/// One AI verifier's figures in one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifierStatus {
    pub verifier: String,
    /// The model of its latest answer.
    pub model: String,
    /// Questions it was asked (answered or not).
    pub calls: u64,
    /// Clean YES or NO answers.
    pub answers: u64,
    pub yes: u64,
    pub no: u64,
    /// Answers in the flagging direction.
    pub flags: u64,
    /// Calls with no valid answer (timeout, error, or a reply that was not YES or NO).
    pub no_answers: u64,
    /// `flags / answers`; null before the first answer.
    pub flag_rate: Option<f64>,
    /// Mean time per call, retries included.
    pub mean_latency_ms: Option<f64>,
    pub max_latency_ms: u64,
}

impl From<&VerifierStats> for VerifierStatus {
    fn from(v: &VerifierStats) -> Self {
        let calls = v.answers + v.no_answers;
        VerifierStatus {
            verifier: v.verifier.clone(),
            model: v.model.clone(),
            calls,
            answers: v.answers,
            yes: v.yes,
            no: v.no,
            flags: v.flags,
            no_answers: v.no_answers,
            flag_rate: (v.answers > 0).then(|| v.flags as f64 / v.answers as f64),
            mean_latency_ms: (calls > 0).then(|| v.latency_ms_sum as f64 / calls as f64),
            max_latency_ms: v.latency_ms_max,
        }
    }
}

/// Agreement of two AI verifiers on the questions both answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifierAgreement {
    /// The two verifiers, by name order.
    pub verifiers: [String; 2],
    /// Questions both answered validly.
    pub compared: u64,
    /// Of those, the ones they answered alike.
    pub agreed: u64,
    /// `agreed / compared`; null before the first comparison.
    pub rate: Option<f64>,
}

impl From<&PairStats> for VerifierAgreement {
    fn from(p: &PairStats) -> Self {
        VerifierAgreement {
            verifiers: [p.a.clone(), p.b.clone()],
            compared: p.compared,
            agreed: p.agreed,
            rate: (p.compared > 0).then(|| p.agreed as f64 / p.compared as f64),
        }
    }
}
