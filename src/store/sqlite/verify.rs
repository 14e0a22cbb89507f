//! The AI verifiers' answers and the decision of the last one, and the human
//! review queue's claims and decisions. Rare writes next to the agents' loop:
//! each runs alone (see [`super::writer::Single`]).

use crate::domain::ids::{L2JobId, QuestId, SubmissionId};

use super::codec::*;
use super::leases::save_quests;
use super::writer::{GroupError, WriteCtx};
use crate::domain::verify::{self, L2JobStatus, Question};
use crate::domain::work::{self, ReviewerId};
use crate::domain::{Decision, EventKind, Phase};
use crate::store::columns::RowId;
use crate::store::common::REVOKED;
use crate::store::{L2AnswerRow, L2Job, L2Recorded, NewL2Answer, QuestRow, StoreError};

async fn fetch_quest(ctx: &mut WriteCtx, id: QuestId) -> Result<QuestRow, StoreError> {
    let row = ctx
        .row(sqlx::query("SELECT * FROM quests WHERE id = ?").bind(id.to_string()))
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_l2_job(ctx: &mut WriteCtx, id: L2JobId) -> Result<L2Job, StoreError> {
    let row = ctx
        .row(sqlx::query("SELECT * FROM l2_jobs WHERE id = ?").bind(id.to_string()))
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

async fn fetch_l2_answer(ctx: &mut WriteCtx, job_id: L2JobId) -> Result<L2AnswerRow, StoreError> {
    let row = ctx
        .row(sqlx::query("SELECT * FROM l2_answers WHERE job_id = ?").bind(job_id.to_string()))
        .await?
        .ok_or(StoreError::NotFound("L2 answer"))?;
    l2_answer_row(&row)
}

/// Saves one quest through the shared statement, as a store error.
async fn save(ctx: &mut WriteCtx, quest: QuestRow) -> Result<(), StoreError> {
    save_quests(ctx, &[quest]).await.map_err(|e| match e {
        GroupError::Refused(e) => e,
        // The writer fails the batch on Unavailable, as on any failure of the database.
        GroupError::Fatal(e) => {
            tracing::error!(error = %e, "the database failed");
            StoreError::Unavailable
        }
    })
}

/// Records a verifier's outcome; the last answer of a submission applies the decision.
pub async fn record_l2_answer(
    ctx: &mut WriteCtx,
    new: NewL2Answer,
) -> Result<L2Recorded, StoreError> {
    let job = fetch_l2_job(ctx, new.job_id).await?;
    if job.status == L2JobStatus::Answered {
        return Ok(L2Recorded {
            answer: fetch_l2_answer(ctx, job.id).await?,
            compared: Vec::new(),
            verified: None,
            replayed: true,
        });
    }
    let quest = fetch_quest(ctx, job.quest_id).await?;
    if quest.phase != Some(Phase::Verifying) || quest.submission_id != Some(job.submission_id) {
        return Err(work::Refusal::NotVerifying.into());
    }
    let mut compared = Vec::new();
    if let Some(mine) = new.answer {
        let others = ctx
            .rows(
                sqlx::query(
                    "SELECT verifier, answer FROM l2_answers
                     WHERE submission_id = ? AND question_index = ? AND verifier <> ? AND answer IS NOT NULL",
                )
                .bind(job.submission_id.to_string())
                .bind(job.question_index as i64)
                .bind(job.verifier.clone()),
            )
            .await?;
        for row in others {
            let other = row.str("verifier")?;
            let agreed = row.str("answer")? == mine.as_str();
            let (a, b) = if other < job.verifier {
                (other, job.verifier.clone())
            } else {
                (job.verifier.clone(), other)
            };
            compared.push((a, b, agreed));
        }
    }
    let flagged = new.answer.is_some_and(|a| a.flags(job.flag_on));
    ctx.exec(
        sqlx::query(
            "INSERT INTO l2_answers (job_id, submission_id, quest_id, session_id, verifier, model, question_index,
             question, flag_on, raw_reply, answer, detail, flagged, attempts, latency_ms, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(job.id.to_string())
        .bind(job.submission_id.to_string())
        .bind(job.quest_id.to_string())
        .bind(job.session_id.to_string())
        .bind(job.verifier.clone())
        .bind(new.model.clone())
        .bind(job.question_index as i64)
        .bind(job.question.clone())
        .bind(job.flag_on.as_str())
        .bind(new.raw_reply.clone())
        .bind(new.answer.map(|a| a.as_str()))
        .bind(new.detail.clone())
        .bind(flagged as i64)
        .bind(new.attempts as i64)
        .bind(new.latency_ms.min(i64::MAX as u64) as i64)
        .bind(ts(ctx.now)),
    )
    .await?;
    ctx.exec(
        sqlx::query("UPDATE l2_jobs SET status = ?, answered_at = ? WHERE id = ?")
            .bind(L2JobStatus::Answered.as_str())
            .bind(ts(ctx.now))
            .bind(job.id.to_string()),
    )
    .await?;
    let queued = ctx
        .row(
            sqlx::query("SELECT COUNT(*) AS n FROM l2_jobs WHERE submission_id = ? AND status = ?")
                .bind(job.submission_id.to_string())
                .bind(L2JobStatus::Queued.as_str()),
        )
        .await?
        .map_or(Ok(0), |r| r.int("n"))?;
    let verified = if queued == 0 {
        Some(finish_verification(ctx, quest, job.submission_id).await?)
    } else {
        None
    };
    Ok(L2Recorded {
        answer: fetch_l2_answer(ctx, job.id).await?,
        compared,
        verified,
        replayed: false,
    })
}

/// Every verifier has answered (or given up): apply the decision. L2 may only
/// pass the quest on or send it to REVIEW; tries and the result stay as they are.
async fn finish_verification(
    ctx: &mut WriteCtx,
    mut quest: QuestRow,
    submission_id: SubmissionId,
) -> Result<QuestRow, StoreError> {
    let session = ctx.session(quest.session_id).await?;
    let config =
        session.config.verify.as_ref().ok_or_else(|| {
            StoreError::Corrupt(format!("session {} has no verifiers", session.id))
        })?;
    // The questions as they were asked, from the jobs themselves.
    let asked = ctx
        .rows(
            sqlx::query(
                "SELECT question_index, question, flag_on FROM l2_jobs WHERE submission_id = ?
                 GROUP BY question_index ORDER BY question_index",
            )
            .bind(submission_id.to_string()),
        )
        .await?;
    let mut questions = Vec::with_capacity(asked.len());
    for row in &asked {
        if row.int("question_index")? as usize != questions.len() {
            return Err(StoreError::Corrupt(format!(
                "the L2 questions of submission {submission_id} have a gap"
            )));
        }
        questions.push(Question {
            text: row.str("question")?,
            flag_on: text(&row.str("flag_on")?)?,
        });
    }
    let outcomes = ctx
        .rows(
            sqlx::query(
                "SELECT * FROM l2_answers WHERE submission_id = ? ORDER BY question_index, verifier",
            )
            .bind(submission_id.to_string()),
        )
        .await?
        .iter()
        .map(|r| {
            let a = l2_answer_row(r)?;
            Ok(verify::Outcome {
                verifier: a.verifier,
                question_index: a.question_index as usize,
                answer: a.answer,
                reason: a.detail,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let advisory = match config.floor() {
        Some(_) => super::calibration::advisory(ctx, quest.session_id).await?,
        None => Vec::new(),
    };
    let decision = verify::decide_with(&questions, &outcomes, &config.tally(quest.id, &advisory));
    let before = status_of(&quest);
    let (next, decided_by) = work::on_verified(before, decision.flagged)?;
    let submission = ctx
        .row(sqlx::query("SELECT * FROM submissions WHERE id = ?").bind(submission_id.to_string()))
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    let submission = submission_row(&submission)?;
    ctx.exec(
        sqlx::query(
            "INSERT INTO l2_decisions (submission_id, quest_id, session_id, state_after, facts, decided_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(submission_id.to_string())
        .bind(quest.id.to_string())
        .bind(quest.session_id.to_string())
        .bind(next.state.as_str())
        .bind(json(&decision.facts))
        .bind(ts(ctx.now)),
    )
    .await?;
    let mut facts = submission.facts.clone();
    facts.extend(decision.facts);
    set_status(&mut quest, next);
    quest.last_facts = facts;
    quest.receipt = decided_by.as_ref().and(submission.receipt.clone());
    quest.decided_by = decided_by.map(|b| b.to_string());
    quest.updated_at = ctx.now;
    ctx.moved(EventKind::Verified, &quest, before, Some(&submission));
    save(ctx, quest.clone()).await?;
    Ok(quest)
}

/// Gives a reviewer a time-limited claim on a quest in REVIEW.
pub async fn claim_review(
    ctx: &mut WriteCtx,
    quest_id: QuestId,
    reviewer: ReviewerId,
    seconds: u32,
) -> Result<QuestRow, StoreError> {
    live_token(ctx, &reviewer).await?;
    let mut quest = fetch_quest(ctx, quest_id).await?;
    reviewable(ctx, &quest, &reviewer)?;
    quest.review_claimed_by = Some(reviewer);
    quest.review_claim_expires_at = Some(ctx.now + chrono::Duration::seconds(seconds as i64));
    save(ctx, quest.clone()).await?;
    Ok(quest)
}

/// Gives a reviewer's claim back.
pub async fn release_review(
    ctx: &mut WriteCtx,
    quest_id: QuestId,
    reviewer: ReviewerId,
) -> Result<(), StoreError> {
    let mut quest = fetch_quest(ctx, quest_id).await?;
    reviewable(ctx, &quest, &reviewer)?;
    if quest
        .review_claimed_by
        .as_ref()
        .is_some_and(|by| by.same_token(&reviewer))
    {
        quest.review_claimed_by = None;
        quest.review_claim_expires_at = None;
        save(ctx, quest).await?;
    }
    Ok(())
}

/// Refuses a reviewer whose token was revoked after its request was let in
/// (or is unknown): a console bulk decision stops deciding at the revocation.
async fn live_token(ctx: &mut WriteCtx, reviewer: &ReviewerId) -> Result<(), StoreError> {
    ctx.row(
        sqlx::query("SELECT 1 FROM tokens WHERE id = ? AND revoked_at IS NULL")
            .bind(reviewer.token.to_string()),
    )
    .await?
    .map(drop)
    .ok_or(StoreError::Unauthorized(REVOKED))
}

fn reviewable(ctx: &WriteCtx, quest: &QuestRow, reviewer: &ReviewerId) -> Result<(), StoreError> {
    Ok(work::check_reviewable(
        quest.state,
        quest.review_claimed_by.as_ref(),
        quest.review_claim_expires_at,
        reviewer,
        ctx.now,
    )?)
}

/// Approves (PASS) or rejects (DONE) a quest in REVIEW. The decision row goes
/// first: the database accepts the move out of REVIEW only with it. A
/// decision that is not `bulk` is a label of the quest's AI verifiers, and
/// judges them again.
pub async fn decide_review(
    ctx: &mut WriteCtx,
    quest_id: QuestId,
    reviewer: ReviewerId,
    decision: Decision,
    note: String,
    bulk: bool,
) -> Result<QuestRow, StoreError> {
    live_token(ctx, &reviewer).await?;
    let mut quest = fetch_quest(ctx, quest_id).await?;
    reviewable(ctx, &quest, &reviewer)?;
    let before = status_of(&quest);
    let (next, keeps_receipt, decided_by) = work::on_review(before, decision, &reviewer)?;
    let receipt = match (keeps_receipt, quest.submission_id) {
        (true, Some(sub)) => ctx
            .row(sqlx::query("SELECT receipt FROM submissions WHERE id = ?").bind(sub.to_string()))
            .await?
            .map(|r| r.opt_str("receipt"))
            .transpose()?
            .flatten(),
        _ => None,
    };
    let decision_id = RowId::new();
    ctx.exec(
        sqlx::query(
            "INSERT INTO review_decisions (id, quest_id, reviewer, reviewer_token, decision, note, created_at, bulk)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(decision_id)
        .bind(quest_id.to_string())
        .bind(reviewer.name.clone())
        .bind(reviewer.token.to_string())
        .bind(decision.as_str())
        .bind(note)
        .bind(ts(ctx.now))
        .bind(bulk as i64),
    )
    .await?;
    if !bulk {
        super::calibration::recalibrate(ctx, quest.session_id, decision_id).await?;
    }
    set_status(&mut quest, next);
    quest.receipt = receipt;
    quest.decided_by = Some(decided_by.to_string());
    quest.review_claimed_by = None;
    quest.review_claim_expires_at = None;
    quest.updated_at = ctx.now;
    ctx.moved(EventKind::Reviewed, &quest, before, None);
    save(ctx, quest.clone()).await?;
    Ok(quest)
}
