//! The human review: claims, first looks, adjudication and the decision
//! that decides. The rules are [`crate::domain::review`]'s; this file reads
//! what they need under the quest's lock and records what they say. A quest
//! that several reviewers look at keeps their claims in `review_claims`; a
//! quest with a single decider (one look, or the adjudication) keeps it in
//! its own claim columns.

use chrono::{DateTime, TimeDelta, Utc};

use super::Tx;
use super::codec::*;
use super::leases::save;
use super::verify::lock_quest;
use crate::domain::ids::QuestId;
use crate::domain::review::{self, FirstLook, Look, Outcome, Stage};
use crate::domain::work::{self, Refusal, ReviewerId};
use crate::domain::{Decision, EventKind, Role, State};
use crate::store::columns::RowId;
use crate::store::common::{REVOKED, set_status, status_of};
use crate::store::{QuestRow, StoreError};

/// The reviewer's token's role and whether it adjudicates, refusing one that
/// was revoked after its request was let in (or is unknown): a console bulk
/// decision stops deciding at the revocation. Where replicas write, the token
/// row is shared-locked until commit, so a revocation racing this write waits
/// for it and then gives up what it claimed.
pub(super) async fn live_token(tx: &mut Tx, reviewer: &ReviewerId) -> Result<bool, StoreError> {
    let row = tx
        .row(
            sqlx::query(concat!(
                "SELECT role, adjudicate FROM tokens WHERE id = $1 AND revoked_at IS NULL",
                for_share!()
            ))
            .bind(reviewer.token),
        )
        .await?
        .ok_or(StoreError::Unauthorized(REVOKED))?;
    let role: Role = row.parsed("role")?;
    Ok(review::adjudicates(role, row.flag("adjudicate")?))
}

/// The first looks a quest got, oldest first.
async fn first_looks(tx: &mut Tx, quest: QuestId) -> Result<Vec<FirstLook>, StoreError> {
    tx.rows(
        sqlx::query(
            "SELECT reviewer_token, reviewer, decision FROM review_decisions
             WHERE quest_id = $1 AND look = 'first' ORDER BY created_at, id",
        )
        .bind(quest),
    )
    .await?
    .iter()
    .map(|r| {
        Ok(FirstLook {
            token: r.opt_id("reviewer_token")?,
            name: r.text("reviewer")?,
            decision: r.parsed("decision")?,
        })
    })
    .collect()
}

/// Where a locked quest stands with its reviewers, refusing what `reviewer`
/// may not do on it now: a quest out of REVIEW, a second look, an adjudication
/// by a reviewer who may not, or a quest whose claims are all others'.
pub(super) async fn standing(
    tx: &mut Tx,
    quest: &QuestRow,
    reviewer: &ReviewerId,
) -> Result<(Stage, Vec<FirstLook>, bool), StoreError> {
    let adjudicator = live_token(tx, reviewer).await?;
    if quest.state != State::Review {
        return Err(Refusal::NotInReview(quest.state).into());
    }
    let looks = first_looks(tx, quest.id).await?;
    let stage = Stage::of(quest.reviews_required, &looks);
    review::check_may_review(stage, &looks, reviewer, adjudicator)?;
    if stage.shared() {
        let others = tx
            .rows(
                sqlx::query(
                    "SELECT reviewer, expires_at FROM review_claims
                     WHERE quest_id = $1 AND reviewer_token <> $2 AND expires_at > $3
                     ORDER BY expires_at, reviewer",
                )
                .bind(quest.id)
                .bind(reviewer.token)
                .bind(at(tx.now)),
            )
            .await?
            .iter()
            .map(|r| Ok((r.text("reviewer")?, r.at("expires_at")?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        review::check_claimable(stage, &others, reviewer)?;
    } else {
        work::check_reviewable(
            quest.state,
            quest.review_claimed_by.as_ref(),
            quest.review_claim_expires_at,
            reviewer,
            tx.now,
        )?;
    }
    Ok((stage, looks, adjudicator))
}

/// Whether the quest's own claim is `reviewer`'s.
fn holds(quest: &QuestRow, reviewer: &ReviewerId) -> bool {
    quest
        .review_claimed_by
        .as_ref()
        .is_some_and(|by| by.same_token(reviewer))
}

/// Gives a reviewer a claim on a quest in REVIEW until `seconds` from now;
/// when it ends.
pub async fn claim_review(
    tx: &mut Tx,
    quest_id: QuestId,
    reviewer: ReviewerId,
    seconds: u32,
) -> Result<DateTime<Utc>, StoreError> {
    let mut quest = lock_quest(tx, quest_id).await?;
    let (stage, _, _) = standing(tx, &quest, &reviewer).await?;
    let until = tx.now + TimeDelta::seconds(i64::from(seconds));
    claim(tx, &mut quest, stage, &reviewer, until).await?;
    Ok(until)
}

/// Records `reviewer`'s claim on a quest until `until`, where its stage keeps it.
pub(super) async fn claim(
    tx: &mut Tx,
    quest: &mut QuestRow,
    stage: Stage,
    reviewer: &ReviewerId,
    until: DateTime<Utc>,
) -> Result<(), StoreError> {
    if stage.shared() {
        tx.exec(
            sqlx::query(
                "INSERT INTO review_claims (quest_id, reviewer_token, reviewer, expires_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (quest_id, reviewer_token)
                 DO UPDATE SET reviewer = excluded.reviewer, expires_at = excluded.expires_at",
            )
            .bind(quest.id)
            .bind(reviewer.token)
            .bind(reviewer.name.clone())
            .bind(at(until)),
        )
        .await?;
        return Ok(());
    }
    quest.review_claimed_by = Some(reviewer.clone());
    quest.review_claim_expires_at = Some(until);
    save(tx, quest).await
}

/// When `reviewer`'s live claim on a locked quest ends, if it holds one.
pub(super) async fn claim_of(
    tx: &mut Tx,
    quest: &QuestRow,
    reviewer: &ReviewerId,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    if holds(quest, reviewer) {
        return Ok(quest
            .review_claim_expires_at
            .filter(|until| *until > tx.now));
    }
    let row = tx
        .row(
            sqlx::query(
                "SELECT expires_at FROM review_claims
                 WHERE quest_id = $1 AND reviewer_token = $2 AND expires_at > $3",
            )
            .bind(quest.id)
            .bind(reviewer.token)
            .bind(at(tx.now)),
        )
        .await?;
    row.map(|r| r.at("expires_at")).transpose()
}

/// Gives a reviewer's claim back.
pub async fn release_review(
    tx: &mut Tx,
    quest_id: QuestId,
    reviewer: ReviewerId,
) -> Result<(), StoreError> {
    let mut quest = lock_quest(tx, quest_id).await?;
    if quest.state != State::Review {
        return Err(Refusal::NotInReview(quest.state).into());
    }
    drop_claim(tx, quest_id, &reviewer).await?;
    if holds(&quest, &reviewer) {
        quest.review_claimed_by = None;
        quest.review_claim_expires_at = None;
        save(tx, &quest).await?;
    } else {
        work::check_reviewable(
            quest.state,
            quest.review_claimed_by.as_ref(),
            quest.review_claim_expires_at,
            &reviewer,
            tx.now,
        )?;
    }
    Ok(())
}

async fn drop_claim(tx: &mut Tx, quest: QuestId, reviewer: &ReviewerId) -> Result<(), StoreError> {
    tx.exec(
        sqlx::query("DELETE FROM review_claims WHERE quest_id = $1 AND reviewer_token = $2")
            .bind(quest)
            .bind(reviewer.token),
    )
    .await?;
    Ok(())
}

/// How a decision comes: one by one, in a bulk run (one look, never an
/// adjudication, no label), or held and now due (it must still be the look
/// it was when held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Single,
    Bulk,
    Held(Look),
}

/// A reviewer's decision on a quest in REVIEW: a first look, or an
/// adjudication. The decision row goes first: the database moves a quest
/// out of REVIEW only with its required agreeing looks or an adjudication.
/// The one decision that decides the quest, when not `bulk`, is a label of
/// the quest's AI verifiers and judges them again; a look that leaves the
/// quest waiting gives the reviewer's claim back.
pub async fn decide_review(
    tx: &mut Tx,
    quest_id: QuestId,
    reviewer: ReviewerId,
    decision: Decision,
    note: String,
    kind: Kind,
) -> Result<QuestRow, StoreError> {
    let bulk = kind == Kind::Bulk;
    let mut quest = lock_quest(tx, quest_id).await?;
    let (_, looks, adjudicator) = standing(tx, &quest, &reviewer).await?;
    let (look, outcome) = review::judge(
        quest.reviews_required,
        &looks,
        &reviewer,
        adjudicator,
        decision,
    )?;
    match kind {
        // An adjudication reads the looks: a bulk run reads none.
        Kind::Bulk if look == Look::Adjudication => {
            return Err(Refusal::AdjudicationNeeded { gave_look: false }.into());
        }
        Kind::Held(held) if held != look => return Err(Refusal::ReviewChanged.into()),
        _ => {}
    }
    let decides = matches!(outcome, Outcome::Decided(_));
    let decision_id = RowId::new();
    tx.exec(
        sqlx::query(
            "INSERT INTO review_decisions
               (id, quest_id, reviewer, reviewer_token, decision, note, created_at, bulk, look, decides)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(decision_id)
        .bind(quest_id)
        .bind(reviewer.name.clone())
        .bind(reviewer.token)
        .bind(decision.as_str())
        .bind(note)
        .bind(at(tx.now))
        .bind(bulk)
        .bind(look.as_str())
        .bind(decides),
    )
    .await?;
    let Outcome::Decided(decided_by) = outcome else {
        // Waiting for more looks, or for an adjudicator: this look is given.
        if outcome == Outcome::ToAdjudication {
            tx.exec(sqlx::query("DELETE FROM review_claims WHERE quest_id = $1").bind(quest_id))
                .await?;
        } else {
            drop_claim(tx, quest_id, &reviewer).await?;
        }
        if holds(&quest, &reviewer) {
            quest.review_claimed_by = None;
            quest.review_claim_expires_at = None;
            save(tx, &quest).await?;
        }
        return Ok(quest);
    };
    if !bulk {
        super::calibration::recalibrate(tx, quest.session_id, decision_id).await?;
    }
    let before = status_of(&quest);
    let (next, keeps_receipt) = work::on_review(before, decision)?;
    let receipt = match (keeps_receipt, quest.submission_id) {
        (true, Some(sub)) => tx
            .row(sqlx::query("SELECT receipt FROM submissions WHERE id = $1").bind(sub))
            .await?
            .map(|r| r.opt_text("receipt"))
            .transpose()?
            .flatten(),
        _ => None,
    };
    tx.exec(sqlx::query("DELETE FROM review_claims WHERE quest_id = $1").bind(quest_id))
        .await?;
    set_status(&mut quest, next);
    quest.receipt = receipt;
    quest.decided_by = Some(decided_by.to_string());
    quest.review_claimed_by = None;
    quest.review_claim_expires_at = None;
    quest.updated_at = tx.now;
    save(tx, &quest).await?;
    tx.moved_from(EventKind::Reviewed, &quest, before, None);
    Ok(quest)
}
