//! The human review queue's use cases: list, claim, skip, decide, and which
//! quest a reviewer's page opens next ([`pick_next`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::*;
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::quality::AUDIT_PASS_CHECK;
use crate::domain::review::{self, FirstLook, Look, Stage, Viewer};
use crate::domain::work::Refusal;
use crate::domain::work::ReviewerId;
use crate::store::{HeldDecisionRow, QueuedQuest};

/// Who holds a quest of the queue, as a reviewer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    Nobody,
    Me,
    /// Others hold every claim it has room for: their names.
    Others(String),
}

/// Who holds `q` for `me` now: its own claim, or, while several reviewers
/// look at once, the looks' claims when they fill every look it still needs.
fn holder(q: &QueuedQuest, me: &ReviewerId, now: DateTime<Utc>) -> Holder {
    if !q.stage.shared() {
        return match (&q.quest.review_claimed_by, q.quest.review_claim_expires_at) {
            (Some(by), Some(until)) if until > now && by.same_token(me) => Holder::Me,
            (Some(by), Some(until)) if until > now => Holder::Others(by.name.clone()),
            _ => Holder::Nobody,
        };
    }
    let live = || q.look_claims.iter().filter(|(_, until)| *until > now);
    if live().any(|(by, _)| by.same_token(me)) {
        return Holder::Me;
    }
    let others: Vec<_> = live()
        .map(|(by, until)| (by.name.clone(), *until))
        .collect();
    match review::check_claimable(q.stage, &others, me) {
        Err(Refusal::ReviewClaimed { by, .. }) => Holder::Others(by),
        _ => Holder::Nobody,
    }
}

/// The names of the reviewers holding `q` so that `me` may not take it now
/// (other tokens, whatever their names).
pub fn held_by_other(q: &QueuedQuest, me: &ReviewerId, now: DateTime<Utc>) -> Option<String> {
    match holder(q, me, now) {
        Holder::Others(by) => Some(by),
        _ => None,
    }
}

/// The quests a console browser session skipped, with when.
pub type Skips = HashMap<QuestId, DateTime<Utc>>;

/// The quest a reviewer's page opens, as a position in `queue` (oldest
/// first): the one `asked` for; else an unskipped quest the reviewer holds a
/// live claim on; else the oldest unskipped one nobody else holds; else the
/// one skipped longest ago; else the first (held by another, shown as such).
pub fn pick_next(
    queue: &[QueuedQuest],
    asked: Option<QuestId>,
    me: &ReviewerId,
    skips: &Skips,
    now: DateTime<Utc>,
) -> Option<usize> {
    let held = |q: &QueuedQuest, by: Holder| holder(q, me, now) == by;
    let unskipped = |q: &QueuedQuest| !skips.contains_key(&q.quest.id);
    asked
        .and_then(|id| queue.iter().position(|q| q.quest.id == id))
        .or_else(|| {
            queue
                .iter()
                .position(|q| unskipped(q) && held(q, Holder::Me))
        })
        .or_else(|| {
            queue
                .iter()
                .position(|q| unskipped(q) && held(q, Holder::Nobody))
        })
        .or_else(|| {
            (0..queue.len())
                .filter_map(|i| skips.get(&queue[i].quest.id).map(|when| (when, i)))
                .min()
                .map(|(_, i)| i)
        })
        .or_else(|| (!queue.is_empty()).then_some(0))
}

impl Service {
    /// Quests in REVIEW, oldest first, with their history and L2 answers,
    /// optionally only those a given check raised a doubt about.
    pub async fn list_review_queue(
        &self,
        viewer: &Viewer,
        session: Option<SessionId>,
        check: Option<&str>,
        limit: u32,
    ) -> Result<Vec<api::Quest>, ServiceError> {
        let check = check_filter(check)?;
        // A session's gold quests in review are its own, in its companion.
        let mut sessions = Vec::new();
        if let Some(id) = session {
            self.public_session(id).await?;
            sessions.push(id);
            sessions.extend(self.store.companion(id).await?);
        }
        let mut out = Vec::new();
        if check == Some(CheckFilter::Exact(AUDIT_PASS_CHECK.to_owned())) {
            // Label-only audits: PASS quests, decided with `POST /v1/audits/{id}`.
            for quest in (self.store)
                .pending_audits(session, limit.clamp(1, 500))
                .await?
            {
                out.push(self.with_history(quest).await?);
            }
            return Ok(out);
        }
        for queued in self
            .store
            .review_queue(
                session.map(|_| sessions.as_slice()),
                check.as_ref(),
                limit.clamp(1, 500),
                viewer,
            )
            .await?
        {
            let mut quest = self.with_history(queued.quest).await?;
            hide_looks(&mut quest, viewer);
            out.push(quest);
        }
        Ok(out)
    }

    /// A quest as `viewer` may see it: while it is in REVIEW, other
    /// reviewers' first looks are left out ([`hide_looks`]).
    pub async fn get_quest_for(
        &self,
        viewer: &Viewer,
        quest_id: QuestId,
    ) -> Result<api::Quest, ServiceError> {
        let mut quest = self.get_quest(quest_id).await?;
        hide_looks(&mut quest, viewer);
        Ok(quest)
    }

    /// Gives a reviewer a claim on a REVIEW quest.
    pub async fn claim_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
    ) -> Result<api::ReviewClaim, ServiceError> {
        let expires_at = self
            .store
            .claim_review(quest_id, reviewer, REVIEW_CLAIM_SECONDS)
            .await?;
        Ok(api::ReviewClaim {
            quest_id,
            claimed_by: reviewer.name.clone(),
            expires_at,
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

    /// Skips a quest for one console browser session: the reviewer's claim
    /// goes back (when it is still theirs) and the page offers every other
    /// quest before this one again.
    pub async fn skip_review(
        &self,
        reviewer: &ReviewerId,
        browser_session: &str,
        quest_id: QuestId,
    ) -> Result<(), ServiceError> {
        self.give_back_review(reviewer, quest_id).await?;
        Ok(self.store.skip_review(browser_session, quest_id).await?)
    }

    /// Gives a reviewer's claim back when it is still theirs: a quest held by
    /// another, decided or gone meanwhile has no claim of theirs to give back.
    pub async fn give_back_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
    ) -> Result<(), ServiceError> {
        match self.store.release_review(quest_id, reviewer).await {
            Ok(()) | Err(StoreError::Refused(_) | StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The quests a console browser session skipped.
    pub async fn review_skips(&self, browser_session: &str) -> Result<Skips, ServiceError> {
        Ok(self
            .store
            .review_skips(browser_session)
            .await?
            .into_iter()
            .collect())
    }

    /// Approves or rejects a REVIEW quest; the answer is the quest as the
    /// reviewer may see it (a look that leaves it waiting shows no other's).
    pub async fn decide_review(
        &self,
        viewer: &Viewer,
        reviewer: &ReviewerId,
        quest_id: QuestId,
        decision: Decision,
        note: &str,
    ) -> Result<api::Quest, ServiceError> {
        check_note(decision, note)?;
        self.store
            .decide_review(quest_id, reviewer, decision, note)
            .await?;
        self.get_quest_for(viewer, quest_id).await
    }
}

impl Service {
    /// How much a session's reviewers agree, over its decided quests.
    pub async fn get_session_reviewers(
        &self,
        id: SessionId,
    ) -> Result<api::Reviewers, ServiceError> {
        let session = self.session(id).await?;
        let decided = self.store.decided_reviews(id).await?;
        let (reviewers, pairs) = crate::domain::agreement::figures(&decided);
        Ok(api::Reviewers {
            session_id: id,
            reviewers_per_quest: session.config.reviewers(),
            reviewers: reviewers.into_iter().map(Into::into).collect(),
            pairs: pairs.into_iter().map(Into::into).collect(),
            gold: self.reviewers_on_gold(id).await?,
        })
    }

    /// Each reviewer's decisions on the session's gold quests: approving a
    /// right answer and rejecting a wrong one are correct; a canary's
    /// approval is counted apart.
    async fn reviewers_on_gold(
        &self,
        id: SessionId,
    ) -> Result<Vec<api::ReviewerGold>, ServiceError> {
        use crate::domain::gold::{self, GoldKind, Score};
        let mut by: Vec<api::ReviewerGold> = Vec::new();
        for r in self.store.gold_reviews(id).await? {
            let at = match by
                .iter()
                .position(|g| g.reviewer_token_id == r.reviewer_token && g.reviewer == r.reviewer)
            {
                Some(at) => at,
                None => {
                    by.push(api::ReviewerGold {
                        reviewer: r.reviewer.clone(),
                        reviewer_token_id: r.reviewer_token,
                        decided: 0,
                        correct: 0,
                        accuracy_lower_bound: None,
                        canaries_approved: 0,
                    });
                    by.len() - 1
                }
            };
            let figures = &mut by[at];
            match (r.kind, &r.expected) {
                (GoldKind::Canary, _) => {
                    figures.canaries_approved += u64::from(r.decision == Decision::Approve);
                }
                (GoldKind::Gold, Some(expected)) => {
                    let right = r.answer.as_ref().is_some_and(|answer| {
                        gold::compare(expected, &r.compare, answer).is_empty()
                    });
                    figures.decided += 1;
                    figures.correct += u64::from(right == (r.decision == Decision::Approve));
                }
                (GoldKind::Gold, None) => {}
            }
        }
        for g in &mut by {
            g.accuracy_lower_bound = Score::of(g.decided, g.correct).accuracy_lower_bound;
        }
        by.sort_by_key(|g| std::cmp::Reverse(g.decided));
        Ok(by)
    }
}

/// A decision made with the review page's keys: held, or recorded at once.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    /// Held until then; `z` may undo it meanwhile.
    Until(DateTime<Utc>),
    /// The session's undo window is 0: recorded at once.
    Recorded,
}

impl Service {
    /// Holds a decision made with the review page's keys for the session's
    /// `review.undo_seconds` (the reviewer keeps the claim meanwhile), then
    /// the held-decision worker records it through the ordinary decide; a
    /// window of 0 decides at once.
    pub async fn hold_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
        decision: Decision,
        note: &str,
    ) -> Result<Held, ServiceError> {
        check_note(decision, note)?;
        let quest = self.store.get_quest(quest_id).await?;
        let seconds = self.session(quest.session_id).await?.config.undo_seconds();
        if seconds == 0 {
            self.store
                .decide_review(quest_id, reviewer, decision, note)
                .await?;
            return Ok(Held::Recorded);
        }
        let held = self
            .store
            .hold_review(quest_id, reviewer, decision, note, seconds)
            .await?;
        self.held_posted.notify_one();
        Ok(Held::Until(held.effective_at))
    }

    /// Undoes a reviewer's held decision on a quest before it is due:
    /// whether there was one (`false`: it was recorded, or never held).
    pub async fn undo_review(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
    ) -> Result<bool, ServiceError> {
        Ok(self.store.undo_review(quest_id, reviewer.token).await?)
    }

    /// A reviewer's held decisions, newest first, and those that could not
    /// be recorded when due (said once: they are forgotten as they are read).
    pub async fn held_reviews(
        &self,
        reviewer: &ReviewerId,
    ) -> Result<Vec<HeldDecisionRow>, ServiceError> {
        let held = self.store.held_reviews(reviewer.token).await?;
        if held.iter().any(|h| h.outcome.is_some()) {
            self.store.forget_held_outcomes(reviewer.token).await?;
        }
        Ok(held)
    }

    /// Fires when a decision is held, for the worker that records them.
    pub fn held_posted(&self) -> Arc<tokio::sync::Notify> {
        self.held_posted.clone()
    }
}

/// Leaves out of a quest in REVIEW the decisions `viewer` may not see yet
/// (see [`review::may_see`]): a reviewer judges without the others' looks.
pub fn hide_looks(quest: &mut api::Quest, viewer: &Viewer) {
    if let Some((stage, looks)) = standing(quest) {
        let state = quest.state;
        quest
            .reviews
            .retain(|r| review::may_see(viewer, state, Some(stage), r.reviewer_token_id, &looks));
    }
    // How closely a quest will be looked at is no agent's to know.
    if viewer.role == crate::domain::Role::Agent {
        quest.reviews_required = None;
    }
}

/// Where a quest in REVIEW stands with its reviewers, from the first looks
/// of its history; `None` for a quest out of REVIEW.
pub fn standing(quest: &api::Quest) -> Option<(Stage, Vec<FirstLook>)> {
    if quest.state != crate::domain::State::Review {
        return None;
    }
    let looks: Vec<FirstLook> = quest
        .reviews
        .iter()
        .filter(|r| r.look == Look::First)
        .map(|r| FirstLook {
            token: r.reviewer_token_id,
            name: r.reviewer.clone(),
            decision: r.decision,
        })
        .collect();
    Some((
        Stage::of(quest.reviews_required.unwrap_or(1), &looks),
        looks,
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::TokenId;
    use crate::domain::review::Stage;
    use chrono::Duration;

    fn reviewer(name: &str) -> ReviewerId {
        ReviewerId::new(TokenId::new(), name.to_owned())
    }

    /// A quest in REVIEW needing one look, nobody's.
    fn queued() -> QueuedQuest {
        let quest = QuestRow::example(QuestId::new(), crate::domain::State::Review);
        QueuedQuest {
            quest,
            stage: Stage::new(1, 0, false),
            look_claims: Vec::new(),
        }
    }

    fn claim(q: &mut QueuedQuest, by: &ReviewerId, until: DateTime<Utc>) {
        q.quest.review_claimed_by = Some(by.clone());
        q.quest.review_claim_expires_at = Some(until);
    }

    #[test]
    fn a_skip_means_skip_until_every_other_quest_was_offered() {
        let now = Utc::now();
        let (me, other) = (reviewer("ana"), reviewer("ben"));
        let queue: Vec<QueuedQuest> = (0..4).map(|_| queued()).collect();
        let id = |i: usize| queue[i].quest.id;
        let mut skips = Skips::new();
        assert_eq!(
            pick_next(&queue, None, &me, &skips, now),
            Some(0),
            "the oldest"
        );
        // s, s: the two oldest are skipped, the third comes next.
        skips.insert(id(0), now - Duration::seconds(2));
        skips.insert(id(1), now - Duration::seconds(1));
        assert_eq!(pick_next(&queue, None, &me, &skips, now), Some(2));
        // Held by another: passed over; then only skipped ones are left.
        let mut held = queue.clone();
        claim(&mut held[2], &other, now + Duration::seconds(60));
        claim(&mut held[3], &other, now + Duration::seconds(60));
        assert_eq!(
            pick_next(&held, None, &me, &skips, now),
            Some(0),
            "the one skipped longest ago, not the one held"
        );
        // A live claim of mine on an unskipped quest comes before the oldest.
        let mut mine = queue.clone();
        claim(&mut mine[3], &me, now + Duration::seconds(60));
        assert_eq!(pick_next(&mine, None, &me, &skips, now), Some(3));
        // ... but not on a skipped one, and an expired claim is nobody's.
        claim(&mut mine[3], &me, now - Duration::seconds(1));
        assert_eq!(pick_next(&mine, None, &me, &skips, now), Some(2));
        // The quest asked for wins, skipped or not.
        assert_eq!(pick_next(&queue, Some(id(1)), &me, &skips, now), Some(1));
        assert_eq!(pick_next(&[], None, &me, &skips, now), None);
    }

    #[test]
    fn a_quest_that_several_look_at_is_held_only_when_its_looks_are_all_taken() {
        let now = Utc::now();
        let (me, ben, cara) = (reviewer("ana"), reviewer("ben"), reviewer("cara"));
        let soon = now + Duration::seconds(60);
        let mut two = queued();
        two.stage = Stage::new(2, 0, false);
        two.look_claims.push((ben.clone(), soon));
        assert_eq!(
            held_by_other(&two, &me, now),
            None,
            "one look is still free"
        );
        two.look_claims.push((cara.clone(), soon));
        assert_eq!(
            held_by_other(&two, &me, now).as_deref(),
            Some("ben and cara")
        );
        let mut free = queued();
        assert_eq!(
            pick_next(&[two.clone(), free.clone()], None, &me, &Skips::new(), now),
            Some(1),
            "the picker passes over a quest whose looks are all taken"
        );
        // One look given: the one it still needs is ben's.
        let mut one_left = queued();
        one_left.stage = Stage::new(2, 1, false);
        one_left.look_claims.push((ben.clone(), soon));
        assert_eq!(held_by_other(&one_left, &me, now).as_deref(), Some("ben"));
        // An ended claim holds nothing; my own look's claim is mine.
        one_left.look_claims[0].1 = now - Duration::seconds(1);
        assert_eq!(held_by_other(&one_left, &me, now), None);
        two.look_claims.push((me.clone(), soon));
        assert_eq!(holder(&two, &me, now), Holder::Me);
        claim(&mut free, &cara, soon);
        assert_eq!(
            pick_next(&[free, two], None, &me, &Skips::new(), now),
            Some(1),
            "my look's claim comes first"
        );
    }
}
