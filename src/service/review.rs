//! The human review queue's use cases: list, claim, skip, decide.

use super::*;
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::work::ReviewerId;

impl Service {
    /// Quests in REVIEW, oldest first, with their history and L2 answers,
    /// optionally only those a given check raised a doubt about.
    pub async fn list_review_queue(
        &self,
        session: Option<SessionId>,
        check: Option<&str>,
        limit: u32,
    ) -> Result<Vec<api::Quest>, ServiceError> {
        let check = check_filter(check)?;
        if let Some(id) = session {
            self.session(id).await?;
        }
        let mut out = Vec::new();
        for quest in self
            .store
            .review_queue(
                session.as_ref().map(std::slice::from_ref),
                check.as_ref(),
                limit.clamp(1, 500),
            )
            .await?
        {
            out.push(self.with_history(quest).await?);
        }
        Ok(out)
    }

    /// Gives a reviewer a claim on a REVIEW quest.
    pub async fn claim_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
    ) -> Result<api::ReviewClaim, ServiceError> {
        let quest = self
            .store
            .claim_review(quest_id, reviewer, REVIEW_CLAIM_SECONDS)
            .await?;
        Ok(api::ReviewClaim {
            quest_id,
            claimed_by: quest
                .review_claimed_by
                .map(|by| by.name)
                .unwrap_or_default(),
            expires_at: quest.review_claim_expires_at.unwrap_or(quest.updated_at),
        })
    }

    /// Gives a reviewer's claim back.
    pub async fn release_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
    ) -> Result<(), ServiceError> {
        Ok(self.store.release_review(quest_id, reviewer).await?)
    }

    /// Approves or rejects a REVIEW quest.
    pub async fn decide_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
        decision: Decision,
        note: &str,
    ) -> Result<api::Quest, ServiceError> {
        check_note(decision, note)?;
        self.store
            .decide_review(quest_id, reviewer, decision, note)
            .await?;
        self.get_quest(quest_id).await
    }
}

/// A review filter `check`, parsed, or the refusal of one that names no fact check.
pub(super) fn check_filter(check: Option<&str>) -> Result<Option<CheckFilter>, ServiceError> {
    check
        .map(CheckFilter::parse)
        .transpose()
        .map_err(|e| invalid("invalid_check", e.to_string()))
}

/// Refuses a reviewer's note that is too long, holds a NUL, or is missing
/// from a rejection.
pub(super) fn check_note(decision: Decision, note: &str) -> Result<(), ServiceError> {
    if note.len() > 10_000 {
        return Err(invalid(
            "invalid_note",
            "the note is longer than 10000 bytes; shorten it",
        ));
    }
    if crate::domain::text::has_nul(note) {
        return Err(super::invalid_text("the note"));
    }
    if decision == Decision::Reject && note.trim().is_empty() {
        return Err(invalid(
            "note_required",
            "a rejection needs a note that says what is wrong, for the record and the export",
        ));
    }
    Ok(())
}
