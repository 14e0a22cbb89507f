//! The reads SQLite writes in its own dialect (JSON arrays through
//! `json_each`), and the counts, which the writer keeps in memory from what
//! it commits ([`Known`]).

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::{SqliteConnection, SqlitePool};

use super::codec::*;
use super::writer::Counters;
use crate::domain::ids::SessionId;
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
