//! The reads SQLite writes in its own dialect (JSON arrays through
//! `json_each`), and the counts, which the writer keeps in memory from what
//! it commits ([`Known`]).

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::{SqliteConnection, SqlitePool};

use super::codec::*;
use super::writer::Counters;
use crate::domain::ids::SessionId;
use crate::domain::work::CheckFilter;
use crate::store::*;

/// What the store knows of the counts without reading them: all of them.
pub type Known = Arc<Counters>;

/// A read transaction: its statements see one snapshot of the database.
pub async fn snapshot(
    pool: &SqlitePool,
) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
    Ok(pool.begin().await?)
}

/// A session's counts, from memory.
pub async fn counts(
    _conn: &mut SqliteConnection,
    session: &SessionRow,
    known: &Known,
) -> Result<Counts, StoreError> {
    Ok(known
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&session.id)
        .copied()
        .unwrap_or_default())
}

/// The counts of every session, as the triggers keep them in `session_counts`:
/// read once at start; the writer keeps them from then on.
pub async fn all_counts(pool: &SqlitePool) -> Result<HashMap<SessionId, Counts>, StoreError> {
    let mut all: HashMap<SessionId, Counts> = HashMap::new();
    for row in sqlx::query("SELECT id, total FROM sessions")
        .fetch_all(pool)
        .await?
    {
        all.entry(row.id("id")?).or_default().total = row.count("total")?;
    }
    for row in sqlx::query("SELECT session_id, bucket, n FROM session_counts")
        .fetch_all(pool)
        .await?
    {
        let c = all.entry(row.id("session_id")?).or_default();
        crate::store::common::set_bucket(c, &row.text("bucket")?, row.count("n")?)?;
    }
    Ok(all)
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
