//! Wire types of the AI verifiers' calibration against the review queue
//! (`GET /v1/verifiers`, and `calibration` in a session's status).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::VerifierAgreement;
use crate::domain::Decision;
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::verify::calibration::{Floor, Standing};
use crate::domain::verify::{Answer, VerifyConfig};
use crate::store::{Calibration, ConfusionRow, DisagreementRow, SwitchRow};

/// The query of `GET /v1/verifiers`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct VerifiersQuery {
    /// Only this session (its verifiers by question index, with their
    /// standing); without it, the whole server (by question text).
    pub session: Option<SessionId>,
}

/// How far the AI verifiers agree with the people who review their work.
/// A label is a verifier's valid answer on a quest a reviewer then decided one
/// by one (bulk decisions are no labels): a rejection says the work was bad,
/// an approval that it was good; a flag says the verifier thought it bad.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Verifiers {
    /// The session, or null for the whole server.
    pub session_id: Option<SessionId>,
    /// The session's floor (`verify.min_kappa`, `verify.min_labels`); null when unset or server-wide.
    pub floor: Option<KappaFloor>,
    /// The session's `verify.audit_rate`; null when unset or server-wide.
    pub audit_rate: Option<f64>,
    /// Per verifier and question.
    pub calibration: Vec<VerifierCalibration>,
    /// How often each pair of verifiers gave the same answer to the same question.
    pub agreement: Vec<VerifierAgreement>,
    /// Every switch between voting and advisory, oldest first, with the figures that caused it.
    pub switches: Vec<VerifierSwitch>,
    /// The latest labelled answers where verifier and reviewer disagreed, newest first (at most 100).
    pub disagreements: Vec<Disagreement>,
    /// In a session with gold, each verifier's answers about the answers to
    /// gold, per question: apart from the calibration against reviewers.
    #[serde(default)]
    pub gold: Vec<super::VerifierGold>,
}

/// A session's `verify.min_kappa` and `verify.min_labels`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KappaFloor {
    pub min_kappa: f64,
    pub min_labels: u32,
}

/// One verifier's answers on one question against the reviewers' decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifierCalibration {
    pub verifier: String,
    /// The question's index in the session; null server-wide (grouped by text).
    pub question_index: Option<u32>,
    pub question: String,
    /// Labelled answers: `upheld + overruled + missed + cleared`.
    pub labels: u64,
    /// Flags the reviewers upheld (it flagged, they rejected).
    pub upheld: u64,
    /// Flags the reviewers overruled (it flagged, they approved).
    pub overruled: u64,
    /// Rejections it did not flag.
    pub missed: u64,
    /// Approvals it did not flag.
    pub cleared: u64,
    /// `(upheld + overruled) / labels`; null without labels.
    pub flagged_share: Option<f64>,
    /// Cohen's kappa between its flags and the rejections, over `labels`; null
    /// below 10 labels or when undefined, with `kappa_reason` saying which.
    pub kappa: Option<f64>,
    pub kappa_reason: Option<String>,
    /// In a session: whether its flags on this question count towards
    /// `flag_threshold` (`voting`) or not (`advisory`). Null server-wide.
    pub standing: Option<Standing>,
    /// In a session with a floor: why the floor does not judge it yet (too
    /// few or too one-sided labels); null once judged, or without a floor.
    pub not_judged: Option<String>,
}

/// A session's verifier losing or winning back its veto on a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifierSwitch {
    pub session_id: SessionId,
    pub verifier: String,
    pub question_index: u32,
    /// The standing it switched to.
    pub standing: Standing,
    /// The labels that caused it, and their table.
    pub labels: u64,
    pub upheld: u64,
    pub overruled: u64,
    pub missed: u64,
    pub cleared: u64,
    pub flagged_share: f64,
    pub kappa: f64,
    pub min_kappa: f64,
    pub min_labels: u32,
    pub at: DateTime<Utc>,
}

/// A labelled answer where verifier and reviewer disagreed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Disagreement {
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub key: String,
    pub verifier: String,
    pub question_index: u32,
    pub answer: Answer,
    /// True: it flagged a quest the reviewer approved; false: it did not flag one the reviewer rejected.
    pub flagged: bool,
    pub decision: Decision,
    pub reviewer: String,
    pub note: String,
    pub decided_at: DateTime<Utc>,
}

impl VerifierCalibration {
    /// The wire row; `standing` and `floor` only in a session.
    pub fn new(
        row: &ConfusionRow,
        standing: Option<Standing>,
        floor: Option<Floor>,
    ) -> VerifierCalibration {
        let c = row.confusion;
        let kappa = c.kappa();
        VerifierCalibration {
            verifier: row.verifier.clone(),
            question_index: row.question_index,
            question: row.question.clone(),
            labels: c.labels(),
            upheld: c.upheld,
            overruled: c.overruled,
            missed: c.missed,
            cleared: c.cleared,
            flagged_share: c.flagged_share(),
            kappa: kappa.ok(),
            kappa_reason: kappa.err().map(|e| e.to_string()),
            standing,
            not_judged: floor.and_then(|f| f.judge(&c).err().map(|e| e.to_string())),
        }
    }
}

impl From<&SwitchRow> for VerifierSwitch {
    fn from(s: &SwitchRow) -> Self {
        let c = s.confusion;
        VerifierSwitch {
            session_id: s.session_id,
            verifier: s.verifier.clone(),
            question_index: s.question_index,
            standing: s.standing,
            labels: c.labels(),
            upheld: c.upheld,
            overruled: c.overruled,
            missed: c.missed,
            cleared: c.cleared,
            flagged_share: c.flagged_share().unwrap_or_default(),
            kappa: s.kappa,
            min_kappa: s.min_kappa,
            min_labels: s.min_labels,
            at: s.created_at,
        }
    }
}

impl From<&DisagreementRow> for Disagreement {
    fn from(d: &DisagreementRow) -> Self {
        Disagreement {
            quest_id: d.quest_id,
            session_id: d.session_id,
            key: d.key.clone(),
            verifier: d.verifier.clone(),
            question_index: d.question_index,
            answer: d.answer,
            flagged: d.flagged,
            decision: d.decision,
            reviewer: d.reviewer.clone(),
            note: d.note.clone(),
            decided_at: d.decided_at,
        }
    }
}

impl Verifiers {
    /// The wire calibration of a session (with its verify config) or of the server.
    pub fn new(session: Option<(SessionId, Option<&VerifyConfig>)>, c: &Calibration) -> Verifiers {
        let config = session.and_then(|(_, v)| v);
        let floor = config.and_then(VerifyConfig::floor);
        let in_session = session.is_some();
        let standing = |row: &ConfusionRow| {
            in_session.then(|| {
                c.switches
                    .iter()
                    .rev()
                    .find(|s| {
                        s.verifier == row.verifier && Some(s.question_index) == row.question_index
                    })
                    .map_or(Standing::Voting, |s| s.standing)
            })
        };
        Verifiers {
            session_id: session.map(|(id, _)| id),
            floor: floor.map(|f| KappaFloor {
                min_kappa: f.min_kappa,
                min_labels: f.min_labels,
            }),
            audit_rate: config.and_then(|v| v.audit_rate),
            calibration: c
                .confusion
                .iter()
                .map(|row| VerifierCalibration::new(row, standing(row), floor))
                .collect(),
            agreement: c.agreement.iter().map(VerifierAgreement::from).collect(),
            switches: c.switches.iter().map(VerifierSwitch::from).collect(),
            disagreements: c.disagreements.iter().map(Disagreement::from).collect(),
            gold: Vec::new(),
        }
    }
}
