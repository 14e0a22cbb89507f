//! Reads, on the pool: each statement sees what every replica had committed
//! when it began; the few that need one snapshot run in a read-only transaction.

use crate::domain::ids::{L2JobId, QuestId, SessionId, SubmissionId};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use super::codec::*;
use crate::domain::State;
use crate::domain::work::{AgentId, CheckFilter};
use crate::store::common::{same_digest, set_bucket};
use crate::store::*;

async fn fetch_quest(conn: &mut PgConnection, id: QuestId) -> Result<QuestRow, StoreError> {
    let row = sqlx::query("SELECT * FROM quests WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_submission(
    conn: &mut PgConnection,
    id: SubmissionId,
) -> Result<SubmissionRow, StoreError> {
    let row = sqlx::query("SELECT * FROM submissions WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    submission_row(&row)
}

async fn fetch_session(conn: &mut PgConnection, id: SessionId) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    session_row(&row)
}

/// A read-only transaction: one snapshot for several statements.
pub async fn snapshot(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    Ok(pool
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?)
}

/// A session's counts, as the triggers keep them in `session_counts` (the
/// slots of each bucket summed).
async fn counts(conn: &mut PgConnection, id: SessionId, total: u64) -> Result<Counts, StoreError> {
    let mut c = Counts {
        total,
        ..Counts::default()
    };
    for row in sqlx::query(
        "SELECT bucket, SUM(n)::bigint AS n FROM session_counts WHERE session_id = $1 GROUP BY bucket",
    )
        .bind(id)
        .fetch_all(conn)
        .await?
    {
        set_bucket(
            &mut c,
            &row.try_get::<String, _>("bucket")?,
            row.count("n")?,
        )?;
    }
    Ok(c)
}

pub async fn list_sessions(pool: &PgPool) -> Result<Vec<SessionRow>, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC, id DESC");
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await?;
    rows.iter().map(session_row).collect()
}

pub async fn get_session(pool: &PgPool, id: SessionId) -> Result<SessionRow, StoreError> {
    fetch_session(&mut *pool.acquire().await?, id).await
}

/// A session's progress, read in one snapshot.
pub async fn session_status(
    pool: &PgPool,
    id: SessionId,
    now: DateTime<Utc>,
) -> Result<SessionStatus, StoreError> {
    let mut tx = snapshot(pool).await?;
    let session = fetch_session(&mut tx, id).await?;
    let counts = counts(&mut tx, id, session.total).await?;
    let agents_active: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT agent) FROM leases WHERE session_id = $1 AND ended_at IS NULL AND expires_at > $2",
    )
    .bind(id)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    let window_minutes = 5;
    // Quests finished by their gate, plus those the AI verifiers finished.
    let finished: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM submissions WHERE session_id = $1 AND decided_at > $2 AND state_after <> 'TODO')
              + (SELECT COUNT(*) FROM l2_decisions WHERE session_id = $1 AND decided_at > $2)",
    )
    .bind(id)
    .bind(now - chrono::Duration::minutes(window_minutes))
    .fetch_one(&mut *tx)
    .await?;
    let verifiers =
        sqlx::query("SELECT * FROM l2_verifier_stats WHERE session_id = $1 ORDER BY verifier")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(VerifierStats {
                    verifier: r.try_get("verifier")?,
                    model: r.try_get("model")?,
                    answers: r.count("answers")?,
                    yes: r.count("yes")?,
                    no: r.count("no")?,
                    flags: r.count("flags")?,
                    no_answers: r.count("no_answers")?,
                    latency_ms_sum: r.count("latency_ms_sum")?,
                    latency_ms_max: r.count("latency_ms_max")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    let agreement = sqlx::query(
        "SELECT * FROM l2_pair_stats WHERE session_id = $1 ORDER BY verifier_a, verifier_b",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(PairStats {
            a: r.try_get("verifier_a")?,
            b: r.try_get("verifier_b")?,
            compared: r.count("compared")?,
            agreed: r.count("agreed")?,
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

pub async fn pending_submissions(pool: &PgPool) -> Result<Vec<SubmissionId>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM submissions WHERE verdict = 'PENDING' ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await?)
}

pub async fn gate_job(pool: &PgPool, submission_id: SubmissionId) -> Result<GateJob, StoreError> {
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
    pool: &PgPool,
    session_id: SessionId,
    except: QuestId,
    field: &str,
    value: &str,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    if !is_plain_field(field) {
        return Err(StoreError::Corrupt(format!(
            "`{field}` is not a plain result field name"
        )));
    }
    // The field is written out (not bound) so that the expression matches an
    // index on it, such as quests_result_email; it was checked above to be a
    // plain name, safe to write into SQL.
    let keys: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT key FROM (
             SELECT row_index, key FROM quests
             WHERE session_id = $1 AND id <> $2 AND lower(result ->> '{field}') = lower($3)
               AND (state IN ('PASS', 'REVIEW') OR phase = 'verifying')
             UNION
             SELECT q.row_index, q.key FROM submissions s JOIN quests q ON q.id = s.quest_id
             WHERE s.verdict = 'PENDING' AND s.session_id = $1 AND s.quest_id <> $2
               AND lower(s.result ->> '{field}') = lower($3)
         ) holders ORDER BY row_index LIMIT $4"
    )))
    .bind(session_id)
    .bind(except)
    .bind(value)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(keys)
}

pub async fn get_submission(pool: &PgPool, id: SubmissionId) -> Result<SubmissionRow, StoreError> {
    fetch_submission(&mut *pool.acquire().await?, id).await
}

/// A submission and what its submitter needs next, in one snapshot.
pub async fn submission_view(
    pool: &PgPool,
    id: SubmissionId,
) -> Result<SubmissionView, StoreError> {
    let mut tx = snapshot(pool).await?;
    let submission = fetch_submission(&mut tx, id).await?;
    let quest = fetch_quest(&mut tx, submission.quest_id).await?;
    let session = fetch_session(&mut tx, quest.session_id).await?;
    let remaining = counts(&mut tx, quest.session_id, session.total)
        .await?
        .remaining();
    let lease = match quest.lease_id {
        Some(lease_id) => {
            sqlx::query("SELECT id, quest_id, agent, expires_at FROM leases WHERE id = $1")
                .bind(lease_id)
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
        max_tries: session.config.max_tries,
        remaining,
        lease,
    })
}

pub async fn pending_l2_jobs(pool: &PgPool) -> Result<Vec<L2JobId>, StoreError> {
    Ok(
        sqlx::query_scalar(
            "SELECT id FROM l2_jobs WHERE status = 'queued' ORDER BY created_at, id",
        )
        .fetch_all(pool)
        .await?,
    )
}

pub async fn l2_job(pool: &PgPool, id: L2JobId) -> Result<L2Job, StoreError> {
    let row = sqlx::query("SELECT * FROM l2_jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

pub async fn l2_answers(pool: &PgPool, quest_id: QuestId) -> Result<Vec<L2AnswerRow>, StoreError> {
    sqlx::query(
        "SELECT * FROM l2_answers WHERE quest_id = $1 ORDER BY created_at, question_index, verifier",
    )
    .bind(quest_id)
    .fetch_all(pool)
    .await?
    .iter()
    .map(l2_answer_row)
    .collect()
}

pub async fn get_quest(pool: &PgPool, id: QuestId) -> Result<QuestRow, StoreError> {
    fetch_quest(&mut *pool.acquire().await?, id).await
}

pub async fn quest_history(
    pool: &PgPool,
    id: QuestId,
) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
    let mut tx = snapshot(pool).await?;
    fetch_quest(&mut tx, id).await?;
    let submissions =
        sqlx::query("SELECT * FROM submissions WHERE quest_id = $1 ORDER BY created_at, id")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(submission_row)
            .collect::<Result<Vec<_>, _>>()?;
    let decisions =
        sqlx::query("SELECT * FROM review_decisions WHERE quest_id = $1 ORDER BY created_at, id")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r: &PgRow| {
                Ok(ReviewDecisionRow {
                    reviewer: r.try_get("reviewer")?,
                    reviewer_token: r.try_get("reviewer_token")?,
                    decision: r.parsed("decision")?,
                    note: r.try_get("note")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    tx.commit().await?;
    Ok((submissions, decisions))
}

pub async fn review_queue(
    pool: &PgPool,
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
        "SELECT * FROM quests q WHERE state = 'REVIEW' AND ($1::uuid[] IS NULL OR session_id = ANY($1))
         AND (($3::text IS NULL AND $4::text IS NULL) OR EXISTS (
             SELECT 1 FROM json_array_elements(q.last_facts) f
             WHERE (f ->> 'check' = $3 OR left(f ->> 'check', length($4)) = $4)
               AND (left(f ->> 'check', 3) <> 'l2:' OR EXISTS (
                   SELECT 1 FROM l2_answers a
                   WHERE a.submission_id = q.submission_id
                     AND 'l2:' || a.verifier = f ->> 'check'
                     AND (a.flagged OR a.answer IS NULL)))))
         ORDER BY updated_at, row_index LIMIT $2",
    )
    .bind(sessions)
    .bind(i64::from(limit))
    .bind(exact)
    .bind(prefix)
    .fetch_all(pool)
    .await?;
    rows.iter().map(quest_row).collect()
}

pub async fn result_fields(
    pool: &PgPool,
    session_id: SessionId,
) -> Result<Vec<String>, StoreError> {
    // A `json` value keeps its keys in the order written; the first row and
    // key position at which a field appears fixes its column.
    Ok(sqlx::query_scalar(
        "SELECT k.key FROM quests q, json_object_keys(q.result) WITH ORDINALITY AS k (key, ord)
         WHERE q.session_id = $1 AND q.state IN ('PASS', 'REVIEW') AND json_typeof(q.result) = 'object'
         GROUP BY k.key ORDER BY MIN(q.row_index * 1000000 + k.ord)",
    )
    .bind(session_id)
    .fetch_all(pool)
    .await?)
}

pub async fn export_page(
    pool: &PgPool,
    session_id: SessionId,
    after_row: Option<u64>,
    limit: u32,
) -> Result<Vec<ExportRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT q.row_index, q.input, q.state, q.decided_by, q.tries, q.result, q.last_facts, q.receipt,
                q.recheck_mark, q.rechecked_at, q.recheck_facts, s.evidence
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id
         WHERE q.session_id = $1 AND q.row_index > $2 ORDER BY q.row_index LIMIT $3",
    )
    .bind(session_id)
    .bind(after_row.map_or(-1, |r| r as i64))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let state: State = r.parsed("state")?;
            let result: Option<Map<String, Value>> = match state {
                State::Pass | State::Review => r.opt_json("result")?,
                _ => None,
            };
            Ok(ExportRow {
                row_index: r.count("row_index")?,
                input: r.json("input")?,
                state,
                decided_by: r.try_get("decided_by")?,
                tries: r.try_get::<i32, _>("tries")? as u32,
                result,
                last_facts: r.json("last_facts")?,
                last_evidence: r.opt_json("evidence")?.unwrap_or_default(),
                receipt: r.try_get("receipt")?,
                recheck_mark: r.opt_parsed("recheck_mark")?,
                rechecked_at: r.try_get("rechecked_at")?,
                recheck_facts: r.json("recheck_facts")?,
            })
        })
        .collect()
}

pub async fn list_tokens(pool: &PgPool) -> Result<Vec<TokenRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
        .fetch_all(pool)
        .await?;
    rows.iter().map(token_row).collect()
}

pub async fn find_token(pool: &PgPool, hash: &str) -> Result<Option<TokenRow>, StoreError> {
    // Look up by a short prefix of the digest, then compare whole digests in
    // constant time, so no comparison of secret material exits early.
    let prefix: String = hash.chars().take(8).collect();
    let rows = sqlx::query("SELECT * FROM tokens WHERE left(hash, 8) = $1 AND revoked_at IS NULL")
        .bind(&prefix)
        .fetch_all(pool)
        .await?;
    let mut found = None;
    for row in &rows {
        let token = token_row(row)?;
        if same_digest(&token.hash, hash) {
            found = Some(token);
        }
    }
    Ok(found)
}

/// The uploaded file's name, media type, size and number of pieces.
pub async fn source_info(pool: &PgPool, id: SessionId) -> Result<SourceInfo, StoreError> {
    let row = sqlx::query(
        "SELECT s.source_name, s.source_type,
                (SELECT COALESCE(SUM(length(c.bytes)), 0)::bigint FROM session_source_chunks c
                 WHERE c.session_id = s.id) AS size,
                (SELECT COUNT(*) FROM session_source_chunks c WHERE c.session_id = s.id) AS pieces
         FROM sessions s WHERE s.id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("session"))?;
    Ok(SourceInfo {
        name: row.try_get("source_name")?,
        media_type: row.try_get("source_type")?,
        size: row.count("size")?,
        pieces: row.count("pieces")?,
    })
}

pub async fn source_chunk(
    pool: &PgPool,
    id: SessionId,
    seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = $1 AND seq = $2",
    )
    .bind(id)
    .bind(seq.min(i32::MAX as u64) as i32)
    .fetch_optional(pool)
    .await?)
}

pub async fn whole_source(
    pool: &PgPool,
    id: SessionId,
) -> Result<(String, String, Vec<u8>), StoreError> {
    let info = source_info(pool, id).await?;
    let pieces: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok((info.name, info.media_type, pieces.concat()))
}

/// The unexpired lease `agent` holds in a session, with its quest's key and
/// phase, read without changing anything. Live means the same three things the
/// write path fences on: not ended, not expired, and still the quest's.
pub async fn agent_lease(
    pool: &PgPool,
    session_id: SessionId,
    agent: &AgentId,
    now: DateTime<Utc>,
) -> Result<Option<AgentLeaseRow>, StoreError> {
    let row = sqlx::query(
        "SELECT l.id, l.quest_id, q.key, q.phase, l.expires_at
         FROM leases l JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id
         WHERE l.session_id = $1 AND l.agent = $2 AND l.ended_at IS NULL AND l.expires_at > $3
         LIMIT 1",
    )
    .bind(session_id)
    .bind(agent.to_string())
    .bind(now)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(AgentLeaseRow {
        lease_id: row.try_get("id")?,
        quest_id: row.try_get("quest_id")?,
        key: row.try_get("key")?,
        phase: row.parsed("phase")?,
        expires_at: row.try_get("expires_at")?,
    }))
}
