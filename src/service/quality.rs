//! How wrong a session's delivered rows may be: its random audits read as a
//! bound (the mathematics are [`crate::domain::quality`]'s).

use super::*;
use crate::domain::quality::{Quality, Rows};
use crate::domain::work::ReviewerId;

/// The most post-hoc audits one request draws.
pub const MAX_AUDITS_DRAWN: u32 = 10_000;
/// The most pending audits one listing gives.
const MAX_AUDITS_LISTED: u32 = 500;

impl Service {
    /// A session's quality figures: the error bound from its decided audits,
    /// with every count it rests on.
    pub async fn get_session_quality(&self, id: SessionId) -> Result<Quality, ServiceError> {
        let session = self.session(id).await?;
        let c = self.store.quality_counts(id).await?;
        // An audit approved where it would become PASS is a PASS row a person
        // decided, and one the bound covers.
        let approved = c.approved_at_pass;
        let rows = Rows {
            pending_audits: c.pending_audits,
            covered: c.pass.saturating_sub(c.pass_by_person) + approved,
            unaudited: c.unaudited,
            decided_by_person: c.pass_by_person.saturating_sub(approved),
            known_errors: c.known_errors,
        };
        let mut quality = Quality::of(session.config.audit_rate(), &c.audits, rows);
        if session.config.reviewers() > 1 {
            let decided = self.store.decided_reviews(id).await?;
            let (_, pairs) = crate::domain::agreement::figures(&decided);
            quality.reviewer_disagreement = crate::domain::agreement::disagreement(&pairs);
        }
        Ok(quality)
    }

    /// Draws up to `count` of the session's unaudited machine-decided PASS
    /// quests, uniformly, for post-hoc audits: label-only reviews whose
    /// labels join the bound's pool. Their ids.
    pub async fn draw_audits(
        &self,
        id: SessionId,
        count: u32,
    ) -> Result<Vec<QuestId>, ServiceError> {
        if !(1..=MAX_AUDITS_DRAWN).contains(&count) {
            return Err(invalid(
                "invalid_count",
                format!("draw from 1 to {MAX_AUDITS_DRAWN} audits at once"),
            ));
        }
        self.session(id).await?;
        Ok(self.store.draw_audits(id, count).await?)
    }

    /// The session's post-hoc audits waiting for a label, oldest first.
    pub async fn pending_audits(&self, id: SessionId) -> Result<Vec<api::Quest>, ServiceError> {
        self.session(id).await?;
        let mut out = Vec::new();
        for quest in (self.store)
            .pending_audits(Some(id), MAX_AUDITS_LISTED)
            .await?
        {
            out.push(self.with_history(quest).await?);
        }
        Ok(out)
    }

    /// A reviewer's label on a post-hoc audit: approve (the row is right) or
    /// reject it with a note (wrong). The quest stays PASS either way.
    pub async fn decide_audit(
        &self,
        reviewer: &ReviewerId,
        quest: QuestId,
        decision: Decision,
        note: &str,
    ) -> Result<(), ServiceError> {
        super::review::check_note(decision, note)?;
        Ok(self
            .store
            .decide_audit(quest, reviewer, decision, note)
            .await?)
    }
}
