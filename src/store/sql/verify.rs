//! The AI verifiers' answers and the decision of the last one (the human
//! review is [`super::review`]'s). Each locks its quest first where replicas
//! write, so the answers of one submission recorded on different replicas
//! take turns and exactly one of them is the last; on SQLite each runs alone
//! on the writer.

use std::sync::Arc;

use super::Tx;
use super::codec::*;
use super::leases::save;
use crate::domain::ids::{L2JobId, QuestId, SubmissionId};
use crate::domain::verify::{self, L2JobStatus, Question};
use crate::domain::{EventKind, Phase};
use crate::domain::{quality, work};
use crate::store::common::{set_status, status_of};
use crate::store::{L2AnswerRow, L2Job, L2Recorded, NewL2Answer, QuestRow, StoreError};

pub(super) async fn lock_quest(tx: &mut Tx, id: QuestId) -> Result<QuestRow, StoreError> {
    let row = tx
        .row(sqlx::query(concat!("SELECT * FROM quests WHERE id = $1", for_update!())).bind(id))
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_l2_job(tx: &mut Tx, id: L2JobId) -> Result<L2Job, StoreError> {
    let row = tx
        .row(sqlx::query("SELECT * FROM l2_jobs WHERE id = $1").bind(id))
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

async fn fetch_l2_answer(tx: &mut Tx, job_id: L2JobId) -> Result<L2AnswerRow, StoreError> {
    let row = tx
        .row(sqlx::query("SELECT * FROM l2_answers WHERE job_id = $1").bind(job_id))
        .await?
        .ok_or(StoreError::NotFound("L2 answer"))?;
    l2_answer_row(&row)
}

/// Records a verifier's outcome; the last answer of a submission applies the decision.
pub async fn record_l2_answer(
    tx: &mut Tx,
    new: Arc<NewL2Answer>,
) -> Result<L2Recorded, StoreError> {
    let job = fetch_l2_job(tx, new.job_id).await?;
    let quest = lock_quest(tx, job.quest_id).await?;
    // Read again under the quest's lock: another replica may have answered it.
    let job = fetch_l2_job(tx, job.id).await?;
    if job.status == L2JobStatus::Answered {
        return Ok(L2Recorded {
            answer: fetch_l2_answer(tx, job.id).await?,
            compared: Vec::new(),
            verified: None,
            replayed: true,
        });
    }
    if quest.phase != Some(Phase::Verifying) || quest.submission_id != Some(job.submission_id) {
        return Err(work::Refusal::NotVerifying.into());
    }
    let mut compared = Vec::new();
    if let Some(mine) = new.answer {
        let others = tx
            .rows(
                sqlx::query(
                    "SELECT verifier, answer FROM l2_answers
                     WHERE submission_id = $1 AND question_index = $2 AND verifier <> $3
                       AND answer IS NOT NULL",
                )
                .bind(job.submission_id)
                .bind(job.question_index as i32)
                .bind(job.verifier.clone()),
            )
            .await?;
        for row in others {
            let other = row.text("verifier")?;
            let agreed = row.text("answer")? == mine.as_str();
            let (a, b) = if other < job.verifier {
                (other, job.verifier.clone())
            } else {
                (job.verifier.clone(), other)
            };
            compared.push((a, b, agreed));
        }
    }
    let flagged = new.answer.is_some_and(|a| a.flags(job.flag_on));
    tx.exec(
        sqlx::query(
            "INSERT INTO l2_answers (job_id, submission_id, quest_id, session_id, verifier, model,
               question_index, question, flag_on, raw_reply, answer, detail, flagged, attempts,
               latency_ms, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
        )
        .bind(job.id)
        .bind(job.submission_id)
        .bind(job.quest_id)
        .bind(job.session_id)
        .bind(job.verifier.clone())
        .bind(new.model.clone())
        .bind(job.question_index as i32)
        .bind(job.question.clone())
        .bind(job.flag_on.as_str())
        .bind(new.raw_reply.clone())
        .bind(new.answer.map(|a| a.as_str()))
        .bind(new.detail.clone())
        .bind(flagged)
        .bind(new.attempts as i32)
        .bind(new.latency_ms.min(i64::MAX as u64) as i64)
        .bind(at(tx.now)),
    )
    .await?;
    tx.exec(
        sqlx::query("UPDATE l2_jobs SET status = $2, answered_at = $3 WHERE id = $1")
            .bind(job.id)
            .bind(L2JobStatus::Answered.as_str())
            .bind(at(tx.now)),
    )
    .await?;
    let queued = tx
        .row(
            sqlx::query(
                "SELECT COUNT(*) AS n FROM l2_jobs WHERE submission_id = $1 AND status = $2",
            )
            .bind(job.submission_id)
            .bind(L2JobStatus::Queued.as_str()),
        )
        .await?
        .map_or(Ok(0), |r| r.count("n"))?;
    let verified = if queued == 0 {
        Some(finish_verification(tx, quest, job.submission_id).await?)
    } else {
        None
    };
    Ok(L2Recorded {
        answer: fetch_l2_answer(tx, job.id).await?,
        compared,
        verified,
        replayed: false,
    })
}

/// Every verifier has answered (or given up): apply the decision. L2 may only
/// pass the quest on or send it to REVIEW; tries and the result stay as they are.
async fn finish_verification(
    tx: &mut Tx,
    mut quest: QuestRow,
    submission_id: SubmissionId,
) -> Result<QuestRow, StoreError> {
    let session = tx.session(quest.session_id).await?;
    let config =
        session.config.verify.as_ref().ok_or_else(|| {
            StoreError::Corrupt(format!("session {} has no verifiers", session.id))
        })?;
    // The questions as they were asked, from the jobs themselves (every
    // verifier's job of one index asks the same question).
    let asked = tx
        .rows(
            sqlx::query(
                "SELECT question_index, MIN(question) AS question, MIN(flag_on) AS flag_on
                 FROM l2_jobs WHERE submission_id = $1
                 GROUP BY question_index ORDER BY question_index",
            )
            .bind(submission_id),
        )
        .await?;
    let mut questions = Vec::with_capacity(asked.len());
    for row in &asked {
        if row.small("question_index")? as usize != questions.len() {
            return Err(StoreError::Corrupt(format!(
                "the L2 questions of submission {submission_id} have a gap"
            )));
        }
        questions.push(Question {
            text: row.text("question")?,
            flag_on: row.parsed("flag_on")?,
        });
    }
    let outcomes = tx
        .rows(
            sqlx::query(
                "SELECT * FROM l2_answers WHERE submission_id = $1 ORDER BY question_index, verifier",
            )
            .bind(submission_id),
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
        Some(_) => super::calibration::advisory(tx, quest.session_id).await?,
        None => Vec::new(),
    };
    // The audit draw, made where the quest would become PASS: the session's
    // key is derived from the server's secret, read in this transaction.
    let audit = match session.config.audit_draw(session.gold_of.is_some()) {
        Some((rate, shown)) => {
            let secret = super::secrets::server_secret(
                tx,
                quality::AUDIT_SECRET.to_owned(),
                quality::new_server_secret(),
            )
            .await?;
            let key = quality::session_key(&secret, session.id);
            quality::drawn(&key, quest.id, rate).then_some(shown)
        }
        None => None,
    };
    let decision = verify::decide_with(&questions, &outcomes, &config.tally(audit, &advisory));
    let before = status_of(&quest);
    let (next, decided_by) = work::on_verified(before, decision.flagged)?;
    let submission = tx
        .row(sqlx::query("SELECT * FROM submissions WHERE id = $1").bind(submission_id))
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    let submission = submission_row(&submission)?;
    tx.exec(
        sqlx::query(
            "INSERT INTO l2_decisions (submission_id, quest_id, session_id, state_after, facts, decided_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(submission_id)
        .bind(quest.id)
        .bind(quest.session_id)
        .bind(next.state.as_str())
        .bind(doc(&decision.facts))
        .bind(at(tx.now)),
    )
    .await?;
    let mut facts = submission.facts.clone();
    facts.extend(decision.facts);
    set_status(&mut quest, next);
    quest.last_facts = facts;
    quest.receipt = decided_by.as_ref().and(submission.receipt.clone());
    quest.decided_by = decided_by.map(|b| b.to_string());
    quest.updated_at = tx.now;
    save(tx, &quest).await?;
    tx.moved_from(EventKind::Verified, &quest, before, Some(&submission));
    Ok(quest)
}
