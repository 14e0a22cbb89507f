//! How wrong a session's delivered rows may be: its random audits read as a
//! bound (the mathematics are [`crate::domain::quality`]'s).

use super::*;
use crate::domain::quality::Quality;

impl Service {
    /// A session's quality figures: the error bound from its decided audits,
    /// with every count it rests on.
    pub async fn get_session_quality(&self, id: SessionId) -> Result<Quality, ServiceError> {
        let session = self.session(id).await?;
        let c = self.store.quality_counts(id).await?;
        // An approved audit is a PASS a person decided, and one the bound covers.
        let approved: u64 = c.audits.iter().map(|a| a.approved).sum();
        Ok(Quality::of(
            session.config.audit_rate(),
            &c.audits,
            c.pending_audits,
            c.pass.saturating_sub(c.pass_by_person) + approved,
            c.pass_by_person.saturating_sub(approved),
        ))
    }
}
