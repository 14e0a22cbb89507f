//! The reads PostgreSQL writes in its own dialect (arrays, `json`
//! functions), the counts the triggers keep in `session_counts`, and the
//! reads only this engine's store makes.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::codec::*;
use crate::domain::ids::SessionId;
use crate::domain::work::{AgentId, CheckFilter};
use crate::store::common::set_bucket;
use crate::store::*;

/// What the store knows of the counts without reading them: nothing, every
/// replica reads them from the database.
pub type Known = ();

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
pub async fn counts(
    conn: &mut PgConnection,
    session: &SessionRow,
    _known: &Known,
) -> Result<Counts, StoreError> {
    let (id, total) = (session.id, session.total);
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
        set_bucket(&mut c, &row.text("bucket")?, row.count("n")?)?;
    }
    Ok(c)
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
        name: row.text("source_name")?,
        media_type: row.text("source_type")?,
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
        lease_id: row.id("id")?,
        quest_id: row.id("quest_id")?,
        key: row.text("key")?,
        phase: row.parsed("phase")?,
        expires_at: row.at("expires_at")?,
    }))
}
