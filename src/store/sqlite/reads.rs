//! Reads, on the pool of read-only connections: each sees one committed
//! snapshot and never waits for the writer.

use crate::domain::ids::{L2JobId, QuestId, SessionId, SubmissionId};
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::{SqliteConnection, SqlitePool};

use super::codec::*;
use crate::domain::State;
use crate::domain::work::CheckFilter;
use crate::store::*;

async fn fetch_quest(conn: &mut SqliteConnection, id: QuestId) -> Result<QuestRow, StoreError> {
    let row = sqlx::query("SELECT * FROM quests WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_submission(
    conn: &mut SqliteConnection,
    id: SubmissionId,
) -> Result<SubmissionRow, StoreError> {
    let row = sqlx::query("SELECT * FROM submissions WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    submission_row(&row)
}

async fn fetch_session(
    conn: &mut SqliteConnection,
    id: SessionId,
) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    session_row(&row)
}

/// The counts of every session, as the triggers keep them in `session_counts`:
/// read once at start; the writer keeps them from then on.
pub async fn all_counts(pool: &SqlitePool) -> Result<HashMap<SessionId, Counts>, StoreError> {
    let mut all: HashMap<SessionId, Counts> = HashMap::new();
    for row in sqlx::query("SELECT id, total FROM sessions")
        .fetch_all(pool)
        .await?
    {
        all.entry(uuid(&row.str("id")?)?).or_default().total = row.int("total")? as u64;
    }
    for row in sqlx::query("SELECT session_id, bucket, n FROM session_counts")
        .fetch_all(pool)
        .await?
    {
        let c = all.entry(uuid(&row.str("session_id")?)?).or_default();
        crate::store::common::set_bucket(c, &row.str("bucket")?, row.int("n")? as u64)?;
    }
    Ok(all)
}

pub async fn list_sessions(pool: &SqlitePool) -> Result<Vec<SessionRow>, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC, id DESC");
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await?;
    rows.iter().map(session_row).collect()
}

/// A read transaction: its statements see one snapshot of the database.
pub async fn snapshot(
    pool: &SqlitePool,
) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
    Ok(pool.begin().await?)
}

pub async fn get_session(pool: &SqlitePool, id: SessionId) -> Result<SessionRow, StoreError> {
    fetch_session(&mut *pool.acquire().await?, id).await
}

/// A session's progress; `counts` come from memory, the rest from one snapshot.
pub async fn session_status(
    pool: &SqlitePool,
    id: SessionId,
    counts: Counts,
    now: DateTime<Utc>,
) -> Result<SessionStatus, StoreError> {
    let mut tx = pool.begin().await?;
    fetch_session(&mut tx, id).await?;
    let agents_active: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT agent) FROM leases WHERE session_id = ? AND ended_at IS NULL AND expires_at > ?",
    )
    .bind(id.to_string())
    .bind(ts(now))
    .fetch_one(&mut *tx)
    .await?;
    let window_minutes = 5;
    // Quests finished by their gate, plus those the AI verifiers finished.
    let finished: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM submissions WHERE session_id = ?1 AND decided_at > ?2 AND state_after <> 'TODO')
              + (SELECT COUNT(*) FROM l2_decisions WHERE session_id = ?1 AND decided_at > ?2)",
    )
    .bind(id.to_string())
    .bind(ts(now - chrono::Duration::minutes(window_minutes)))
    .fetch_one(&mut *tx)
    .await?;
    let verifiers =
        sqlx::query("SELECT * FROM l2_verifier_stats WHERE session_id = ? ORDER BY verifier")
            .bind(id.to_string())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(VerifierStats {
                    verifier: r.str("verifier")?,
                    model: r.str("model")?,
                    answers: r.int("answers")? as u64,
                    yes: r.int("yes")? as u64,
                    no: r.int("no")? as u64,
                    flags: r.int("flags")? as u64,
                    no_answers: r.int("no_answers")? as u64,
                    latency_ms_sum: r.int("latency_ms_sum")? as u64,
                    latency_ms_max: r.int("latency_ms_max")? as u64,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    let agreement = sqlx::query(
        "SELECT * FROM l2_pair_stats WHERE session_id = ? ORDER BY verifier_a, verifier_b",
    )
    .bind(id.to_string())
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(PairStats {
            a: r.str("verifier_a")?,
            b: r.str("verifier_b")?,
            compared: r.int("compared")? as u64,
            agreed: r.int("agreed")? as u64,
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    tx.commit().await?;
    Ok(SessionStatus {
        counts,
        agents_active: agents_active as u64,
        rate_per_minute: finished as f64 / window_minutes as f64,
        verifiers,
        agreement,
    })
}

pub async fn pending_submissions(pool: &SqlitePool) -> Result<Vec<SubmissionId>, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM submissions WHERE verdict = 'PENDING' ORDER BY created_at",
    )
    .fetch_all(pool)
    .await?;
    ids.iter().map(|s| uuid(s)).collect()
}

pub async fn gate_job(
    pool: &SqlitePool,
    submission_id: SubmissionId,
) -> Result<GateJob, StoreError> {
    let mut conn = pool.acquire().await?;
    let submission = fetch_submission(&mut conn, submission_id).await?;
    let quest = fetch_quest(&mut conn, submission.quest_id).await?;
    let session = fetch_session(&mut conn, quest.session_id).await?;
    Ok(GateJob {
        submission,
        key: quest.key,
        input: quest.input,
        config: session.config,
    })
}

pub async fn result_holders(
    pool: &SqlitePool,
    session_id: SessionId,
    except: QuestId,
    field: &str,
    value: &str,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    if !super::is_plain_field(field) {
        return Err(StoreError::Corrupt(format!(
            "`{field}` is not a plain result field name"
        )));
    }
    // The path is written out (not bound) so that the expression matches
    // an index on it, such as quests_result_email.
    let held = format!("lower(json_extract(result, '$.{field}'))");
    // `field` was checked above to be a plain name: safe to write into SQL.
    let keys: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT key FROM (
             SELECT row_index, key FROM quests
             WHERE session_id = ?1 AND id <> ?2 AND {held} = lower(?3)
               AND (state IN ('PASS', 'REVIEW') OR phase = 'verifying')
             UNION
             SELECT q.row_index, q.key FROM submissions s JOIN quests q ON q.id = s.quest_id
             WHERE s.verdict = 'PENDING' AND s.session_id = ?1 AND s.quest_id <> ?2
               AND lower(json_extract(s.result, '$.{field}')) = lower(?3)
         ) ORDER BY row_index LIMIT ?4"
    )))
    .bind(session_id.to_string())
    .bind(except.to_string())
    .bind(value)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(keys)
}

pub async fn get_submission(
    pool: &SqlitePool,
    id: SubmissionId,
) -> Result<SubmissionRow, StoreError> {
    fetch_submission(&mut *pool.acquire().await?, id).await
}

/// A submission and what its submitter needs next; `remaining` of its session.
pub async fn submission_view(
    pool: &SqlitePool,
    id: SubmissionId,
    remaining: impl Fn(SessionId) -> u64,
) -> Result<SubmissionView, StoreError> {
    let mut tx = pool.begin().await?;
    let submission = fetch_submission(&mut tx, id).await?;
    let quest = fetch_quest(&mut tx, submission.quest_id).await?;
    let max_tries: i64 = sqlx::query_scalar("SELECT max_tries FROM sessions WHERE id = ?")
        .bind(quest.session_id.to_string())
        .fetch_one(&mut *tx)
        .await?;
    let remaining = remaining(quest.session_id);
    let lease = match quest.lease_id {
        Some(lease_id) => {
            sqlx::query("SELECT id, quest_id, agent, expires_at FROM leases WHERE id = ?")
                .bind(lease_id.to_string())
                .fetch_optional(&mut *tx)
                .await?
                .as_ref()
                .map(lease_row)
                .transpose()?
        }
        None => None,
    };
    tx.commit().await?;
    Ok(SubmissionView {
        submission,
        quest,
        max_tries: max_tries as u32,
        remaining,
        lease,
    })
}

pub async fn pending_l2_jobs(pool: &SqlitePool) -> Result<Vec<L2JobId>, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM l2_jobs WHERE status = 'queued' ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await?;
    ids.iter().map(|s| uuid(s)).collect()
}

pub async fn l2_job(pool: &SqlitePool, id: L2JobId) -> Result<L2Job, StoreError> {
    let row = sqlx::query("SELECT * FROM l2_jobs WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(pool)
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

pub async fn l2_answers(
    pool: &SqlitePool,
    quest_id: QuestId,
) -> Result<Vec<L2AnswerRow>, StoreError> {
    sqlx::query(
        "SELECT * FROM l2_answers WHERE quest_id = ? ORDER BY created_at, question_index, verifier",
    )
    .bind(quest_id.to_string())
    .fetch_all(pool)
    .await?
    .iter()
    .map(l2_answer_row)
    .collect()
}

pub async fn get_quest(pool: &SqlitePool, id: QuestId) -> Result<QuestRow, StoreError> {
    fetch_quest(&mut *pool.acquire().await?, id).await
}

pub async fn quest_history(
    pool: &SqlitePool,
    id: QuestId,
) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
    let mut tx = pool.begin().await?;
    fetch_quest(&mut tx, id).await?;
    let submissions =
        sqlx::query("SELECT * FROM submissions WHERE quest_id = ? ORDER BY created_at, id")
            .bind(id.to_string())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(submission_row)
            .collect::<Result<Vec<_>, _>>()?;
    let decisions =
        sqlx::query("SELECT * FROM review_decisions WHERE quest_id = ? ORDER BY created_at")
            .bind(id.to_string())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(ReviewDecisionRow {
                    reviewer: r.str("reviewer")?,
                    reviewer_token: opt(r.opt_str("reviewer_token")?, uuid)?,
                    decision: text(&r.str("decision")?)?,
                    note: r.str("note")?,
                    created_at: parse_ts(&r.str("created_at")?)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    tx.commit().await?;
    Ok((submissions, decisions))
}

pub async fn review_queue(
    pool: &SqlitePool,
    sessions: Option<&[SessionId]>,
    check: Option<&CheckFilter>,
    limit: u32,
) -> Result<Vec<QuestRow>, StoreError> {
    let (exact, prefix) = match check {
        Some(CheckFilter::Exact(c)) => (Some(c.as_str()), None),
        Some(CheckFilter::Prefix(p)) => (None, Some(p.as_str())),
        None => (None, None),
    };
    // Every L2 answer is a fact of check `l2:<verifier>`, a clear one too; such
    // a fact matches only when that verifier raised a doubt (a flag or no
    // answer) about the quest's submission, as its recorded answers say.
    let rows = sqlx::query(
        "SELECT * FROM quests q WHERE state = 'REVIEW'
           AND (?1 IS NULL OR session_id IN (SELECT value FROM json_each(?1)))
         AND ((?3 IS NULL AND ?4 IS NULL) OR EXISTS (
             SELECT 1 FROM json_each(q.last_facts) f
             WHERE (json_extract(f.value, '$.check') = ?3
                    OR substr(json_extract(f.value, '$.check'), 1, length(?4)) = ?4)
               AND (substr(json_extract(f.value, '$.check'), 1, 3) <> 'l2:' OR EXISTS (
                   SELECT 1 FROM l2_answers a
                   WHERE a.submission_id = q.submission_id
                     AND 'l2:' || a.verifier = json_extract(f.value, '$.check')
                     AND (a.flagged = 1 OR a.answer IS NULL)))))
         ORDER BY updated_at, row_index LIMIT ?2",
    )
    // The ids as one JSON array of their text, as the rows keep them.
    .bind(sessions.map(|ids| serde_json::json!(ids).to_string()))
    .bind(limit as i64)
    .bind(exact)
    .bind(prefix)
    .fetch_all(pool)
    .await?;
    rows.iter().map(quest_row).collect()
}

pub async fn result_fields(
    pool: &SqlitePool,
    session_id: SessionId,
) -> Result<Vec<String>, StoreError> {
    // json_each walks each object's keys in their stored order; the first
    // row and key position at which a field appears fixes its column.
    let fields: Vec<String> = sqlx::query_scalar(
        "SELECT j.key FROM quests q, json_each(q.result) j
         WHERE q.session_id = ? AND q.state IN ('PASS', 'REVIEW') AND q.result IS NOT NULL
         GROUP BY j.key ORDER BY MIN(q.row_index * 1000000 + j.id)",
    )
    .bind(session_id.to_string())
    .fetch_all(pool)
    .await?;
    Ok(fields)
}

pub async fn export_page(
    pool: &SqlitePool,
    session_id: SessionId,
    after_row: Option<u64>,
    limit: u32,
) -> Result<Vec<ExportRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT q.row_index, q.input, q.state, q.decided_by, q.tries, q.result, q.last_facts, q.receipt,
                q.recheck_mark, q.rechecked_at, q.recheck_facts, s.evidence
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id
         WHERE q.session_id = ? AND q.row_index > ? ORDER BY q.row_index LIMIT ?",
    )
    .bind(session_id.to_string())
    .bind(after_row.map_or(-1, |r| r as i64))
    .bind(limit as i64)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let state: State = text(&r.str("state")?)?;
            let result: Option<Map<String, Value>> = match state {
                State::Pass | State::Review => opt(r.opt_str("result")?, from_json)?,
                _ => None,
            };
            Ok(ExportRow {
                row_index: r.int("row_index")? as u64,
                input: from_json(&r.str("input")?)?,
                state,
                decided_by: r.opt_str("decided_by")?,
                tries: r.int("tries")? as u32,
                result,
                last_facts: from_json(&r.str("last_facts")?)?,
                last_evidence: opt(r.opt_str("evidence")?, from_json)?.unwrap_or_default(),
                receipt: r.opt_str("receipt")?,
                recheck_mark: opt(r.opt_str("recheck_mark")?, text)?,
                rechecked_at: opt(r.opt_str("rechecked_at")?, parse_ts)?,
                recheck_facts: from_json(&r.str("recheck_facts")?)?,
            })
        })
        .collect()
}

pub async fn list_tokens(pool: &SqlitePool) -> Result<Vec<TokenRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
        .fetch_all(pool)
        .await?;
    rows.iter().map(token_row).collect()
}

pub async fn find_token(pool: &SqlitePool, hash: &str) -> Result<Option<TokenRow>, StoreError> {
    // Look up by a short prefix of the digest, then compare whole digests in
    // constant time, so no comparison of secret material exits early.
    let prefix: String = hash.chars().take(8).collect();
    let rows = sqlx::query(
        "SELECT * FROM tokens WHERE hash >= ?1 AND hash < ?1 || 'g' AND revoked_at IS NULL",
    )
    .bind(&prefix)
    .fetch_all(pool)
    .await?;
    let mut found = None;
    for row in &rows {
        let token = token_row(row)?;
        if crate::store::common::same_digest(&token.hash, hash) {
            found = Some(token);
        }
    }
    Ok(found)
}
