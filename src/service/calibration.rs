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
        let calibration = self.store.calibration(session, disagreements).await?;
        Ok(match session {
            Some(id) => {
                let row = self.session(id).await?;
                let mut listing =
                    Verifiers::new(Some((id, row.config.verify.as_ref())), &calibration);
                if row.config.gold.is_some() {
                    listing.gold = self.verifiers_on_gold(id).await?;
                }
                listing
            }
            None => Verifiers::new(None, &calibration),
        })
    }
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
