//! Held decisions of the review page: a keyboard decision waits its undo
//! window, then is recorded by the ordinary decide ([`verify::decide_review`])
//! in the transaction that deletes it, so that it is recorded once or not at
//! all, on any replica.

use chrono::{DateTime, TimeDelta, Utc};

use super::Tx;
use super::codec::*;
use super::review;
use super::verify::lock_quest;
use crate::domain::Decision;
use crate::domain::ids::{QuestId, TokenId};
use crate::domain::review::Look;
use crate::domain::work::{Refusal, ReviewerId};
use crate::store::{HeldDecisionRow, QuestRow, StoreError};

/// How long a worker that took a due decision has to record it before
/// another may take it (it died meanwhile).
const TAKEN_SECONDS: i64 = 30;

fn held_row(r: &impl Columns) -> Result<HeldDecisionRow, StoreError> {
    Ok(HeldDecisionRow {
        quest_id: r.id("quest_id")?,
        reviewer: ReviewerId::new(r.id("reviewer_token")?, r.text("reviewer")?),
        decision: r.parsed("decision")?,
        note: r.text("note")?,
        held_at: r.at("held_at")?,
        effective_at: r.at("effective_at")?,
        outcome: r.opt_text("outcome")?,
    })
}

/// Holds a reviewer's decision for `seconds`: the quest must be one they may
/// decide now, and their claim on it lasts at least until the decision is
/// due. A decision they held on it before is replaced.
pub async fn hold_review(
    tx: &mut Tx,
    quest_id: QuestId,
    reviewer: ReviewerId,
    decision: Decision,
    note: String,
    seconds: u32,
) -> Result<HeldDecisionRow, StoreError> {
    let mut quest = lock_quest(tx, quest_id).await?;
    let (stage, looks, adjudicator) = review::standing(tx, &quest, &reviewer).await?;
    // What it would be now: refused now if it would be refused, and kept, so
    // that it is not recorded as something else when due.
    let (look, _) = crate::domain::review::judge(
        quest.reviews_required,
        &looks,
        &reviewer,
        adjudicator,
        decision,
    )?;
    let effective_at = tx.now + TimeDelta::seconds(i64::from(seconds));
    // Kept past the due time, for the worker's turn to come.
    let due = effective_at + TimeDelta::seconds(TAKEN_SECONDS);
    let until = review::claim_of(tx, &quest, &reviewer)
        .await?
        .map_or(due, |until| until.max(due));
    review::claim(tx, &mut quest, stage, &reviewer, until).await?;
    tx.exec(
        sqlx::query("DELETE FROM held_decisions WHERE quest_id = $1 AND reviewer_token = $2")
            .bind(quest_id)
            .bind(reviewer.token),
    )
    .await?;
    let row = tx
        .row(
            sqlx::query(
                "INSERT INTO held_decisions
                   (quest_id, reviewer, reviewer_token, decision, note, held_at, effective_at, look)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *",
            )
            .bind(quest_id)
            .bind(reviewer.name.clone())
            .bind(reviewer.token)
            .bind(decision.as_str())
            .bind(note)
            .bind(at(tx.now))
            .bind(at(effective_at))
            .bind(look.as_str()),
        )
        .await?
        .ok_or(StoreError::NotFound("held decision"))?;
    held_row(&row)
}

/// Deletes a reviewer's held decision on a quest while it is not yet due
/// (nor taken by a worker): whether there was one to undo.
pub async fn undo_review(
    tx: &mut Tx,
    quest_id: QuestId,
    token: TokenId,
) -> Result<bool, StoreError> {
    let deleted = tx
        .exec(
            sqlx::query(
                "DELETE FROM held_decisions
                 WHERE quest_id = $1 AND reviewer_token = $2 AND effective_at > $3
                   AND taken_until IS NULL AND outcome IS NULL",
            )
            .bind(quest_id)
            .bind(token)
            .bind(at(tx.now)),
        )
        .await?;
    Ok(deleted > 0)
}

/// Takes up to `limit` due decisions for this worker: no other takes them
/// for [`TAKEN_SECONDS`]. The conditions are repeated outside the sub-select
/// so that, where replicas race, the loser's update finds the row taken.
pub async fn take_due_reviews(tx: &mut Tx, limit: u32) -> Result<Vec<HeldDecisionRow>, StoreError> {
    let rows = tx
        .rows(
            sqlx::query(
                "UPDATE held_decisions SET taken_until = $2
                 WHERE effective_at <= $1 AND outcome IS NULL
                   AND (taken_until IS NULL OR taken_until <= $1)
                   AND (quest_id, reviewer_token) IN (
                     SELECT quest_id, reviewer_token FROM held_decisions
                     WHERE effective_at <= $1 AND outcome IS NULL
                       AND (taken_until IS NULL OR taken_until <= $1)
                     ORDER BY effective_at LIMIT $3)
                 RETURNING *",
            )
            .bind(at(tx.now))
            .bind(at(tx.now + TimeDelta::seconds(TAKEN_SECONDS)))
            .bind(i64::from(limit)),
        )
        .await?;
    rows.iter().map(held_row).collect()
}

/// Records a reviewer's taken, due decision through the ordinary decide and
/// deletes it, in one transaction: a refusal changes nothing (see
/// [`drop_held_review`]). The quest is locked first, as every review write
/// locks it, so that holding and recording take turns.
pub async fn record_held_review(
    tx: &mut Tx,
    quest_id: QuestId,
    token: TokenId,
) -> Result<QuestRow, StoreError> {
    lock_quest(tx, quest_id).await?;
    let held = tx
        .row(
            sqlx::query(concat!(
                "SELECT * FROM held_decisions
                 WHERE quest_id = $1 AND reviewer_token = $2 AND outcome IS NULL AND effective_at <= $3",
                for_update!()
            ))
            .bind(quest_id)
            .bind(token)
            .bind(at(tx.now)),
        )
        .await?
        .ok_or(StoreError::NotFound("held decision"))?;
    let look: Look = held.parsed("look")?;
    let held = held_row(&held)?;
    // A token revoked since is a refusal here, not a fault to retry.
    match review::live_token(tx, &held.reviewer).await {
        Err(StoreError::Unauthorized(_)) => return Err(Refusal::TokenRevoked.into()),
        other => drop(other?),
    }
    let quest = review::decide_review(
        tx,
        quest_id,
        held.reviewer,
        held.decision,
        held.note,
        review::Kind::Held(look),
    )
    .await?;
    tx.exec(
        sqlx::query("DELETE FROM held_decisions WHERE quest_id = $1 AND reviewer_token = $2")
            .bind(quest_id)
            .bind(token),
    )
    .await?;
    Ok(quest)
}

/// Keeps why a reviewer's held decision could not be recorded, for their page.
pub async fn drop_held_review(
    tx: &mut Tx,
    quest_id: QuestId,
    token: TokenId,
    outcome: String,
) -> Result<(), StoreError> {
    tx.exec(
        sqlx::query(
            "UPDATE held_decisions SET outcome = $3 WHERE quest_id = $1 AND reviewer_token = $2",
        )
        .bind(quest_id)
        .bind(token)
        .bind(outcome),
    )
    .await?;
    Ok(())
}

/// A reviewer's held decisions, newest first, with those that could not be
/// recorded (see [`forget_held_outcomes`]).
pub async fn held_reviews(pool: &Pool, token: TokenId) -> Result<Vec<HeldDecisionRow>, StoreError> {
    sqlx::query(
        "SELECT * FROM held_decisions WHERE reviewer_token = $1 ORDER BY held_at DESC, quest_id",
    )
    .bind(token)
    .fetch_all(pool)
    .await?
    .iter()
    .map(held_row)
    .collect()
}

/// Forgets a reviewer's decisions that could not be recorded, once said.
pub async fn forget_held_outcomes(tx: &mut Tx, token: TokenId) -> Result<(), StoreError> {
    tx.exec(
        sqlx::query("DELETE FROM held_decisions WHERE reviewer_token = $1 AND outcome IS NOT NULL")
            .bind(token),
    )
    .await?;
    Ok(())
}

/// When the next held decision falls due (or a taken one may be taken again).
pub async fn next_held_review(pool: &Pool) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row = sqlx::query(
        "SELECT effective_at, taken_until FROM held_decisions WHERE outcome IS NULL
         ORDER BY effective_at LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        let due = r.at("effective_at")?;
        Ok(r.opt_at("taken_until")?.map_or(due, |t| t.max(due)))
    })
    .transpose()
}
