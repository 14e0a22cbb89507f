//! The AI verifiers' calibration against the review queue.

use super::*;
use crate::api::{VerifierCalibration, Verifiers};

/// At most this many disagreements one answer lists.
const DISAGREEMENTS: u32 = 100;

impl Service {
    /// The verifiers' calibration: of one session (404 when unknown), or of the whole server.
    pub async fn list_verifiers(
        &self,
        session: Option<SessionId>,
    ) -> Result<Verifiers, ServiceError> {
        self.verifiers_listing(session, DISAGREEMENTS).await
    }

    /// A session's calibration rows, for its status (no disagreements read).
    pub(super) async fn session_calibration(
        &self,
        id: SessionId,
    ) -> Result<Vec<VerifierCalibration>, ServiceError> {
        Ok(self.verifiers_listing(Some(id), 0).await?.calibration)
    }

    async fn verifiers_listing(
        &self,
        session: Option<SessionId>,
        disagreements: u32,
    ) -> Result<Verifiers, ServiceError> {
        let mut calibration = self.store.calibration(session, disagreements).await?;
        Ok(match session {
            Some(id) => {
                let row = self.session(id).await?;
                let verify = row.config.verify.as_ref();
                let gold = match row.config.gold {
                    Some(_) => self.verifiers_on_gold(id).await?,
                    None => Vec::new(),
                };
                if let Some(verify) = verify.filter(|v| v.gold_labels) {
                    with_gold_labels(&mut calibration.confusion, verify, &gold);
                }
                let mut listing = Verifiers::new(Some((id, verify)), &calibration);
                listing.gold = gold;
                listing
            }
            None => {
                let mut listing = Verifiers::new(None, &calibration);
                // A gold quest's disagreement names the session it belongs to.
                for d in &mut listing.disagreements {
                    d.session_id = self.outer_session(d.session_id).await?;
                }
                listing
            }
        })
    }
}

/// Counts the verifiers' answers about gold answers among their labelled
/// ones (`verify.gold_labels`): a flag on a wrong answer is upheld, on a
/// right one overruled; a clear answer on a wrong one missed, on a right one
/// cleared.
fn with_gold_labels(
    confusion: &mut Vec<crate::store::ConfusionRow>,
    verify: &VerifyConfig,
    gold: &[api::VerifierGold],
) {
    for g in gold {
        let at = confusion
            .iter()
            .position(|c| c.verifier == g.verifier && c.question_index == Some(g.question_index));
        let row = match at {
            Some(at) => &mut confusion[at],
            None => {
                let Some(question) = verify.questions.get(g.question_index as usize) else {
                    continue;
                };
                confusion.push(crate::store::ConfusionRow {
                    verifier: g.verifier.clone(),
                    question_index: Some(g.question_index),
                    question: question.text.clone(),
                    confusion: Default::default(),
                });
                confusion.last_mut().expect("just pushed")
            }
        };
        row.confusion.upheld += g.caught;
        row.confusion.overruled += g.false_alarms;
        row.confusion.missed += g.missed;
        row.confusion.cleared += g.cleared;
    }
    confusion.sort_by(|a, b| (&a.verifier, a.question_index).cmp(&(&b.verifier, b.question_index)));
}

impl Service {
    /// Sets the server-wide calibration gauges, per verifier and question
    /// (the question's text, cut to 80 characters), before `/metrics` renders.
    /// A failed read leaves the gauges as they were.
    pub async fn refresh_calibration_metrics(&self) {
        let calibration = match self.store.calibration(None, 0).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "the calibration gauges could not be read");
                return;
            }
        };
        for row in &calibration.confusion {
            let labels = [
                ("verifier", row.verifier.clone()),
                (
                    "question",
                    crate::domain::verify::cut(row.question.trim(), 80),
                ),
            ];
            let c = row.confusion;
            for (name, value) in [
                ("quest_l2_calibration_labels", c.labels()),
                ("quest_l2_calibration_upheld", c.upheld),
                ("quest_l2_calibration_overruled", c.overruled),
                ("quest_l2_calibration_missed", c.missed),
                ("quest_l2_calibration_cleared", c.cleared),
            ] {
                metrics::gauge!(name, &labels).set(value as f64);
            }
            if let Ok(kappa) = c.kappa() {
                metrics::gauge!("quest_l2_calibration_kappa", &labels).set(kappa);
            }
        }
    }
}
