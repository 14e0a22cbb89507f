//! SQLite reads about one agent, for clients that must look without touching:
//! `quest guard` asks whether an agent still holds its lease, and asking must
//! not renew, sweep or claim anything. Free functions over the read pool, so
//! that `impl Store for SqliteStore` calls each in one line.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::{AgentLeaseRow, StoreError};

/// The unexpired lease `agent` holds in a session, with its quest's key and phase.
///
/// A lease is live while it has not ended, has not expired, and the quest still
/// carries it: the same three conditions the write path fences on.
pub async fn agent_lease(
    pool: &SqlitePool,
    session_id: Uuid,
    agent: &str,
    now: DateTime<Utc>,
) -> Result<Option<AgentLeaseRow>, StoreError> {
    let row = sqlx::query(
        "SELECT l.id, l.quest_id, q.key, q.phase, l.expires_at
         FROM leases l JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id
         WHERE l.session_id = ? AND l.agent = ? AND l.ended_at IS NULL AND l.expires_at > ?
         LIMIT 1",
    )
    .bind(session_id.to_string())
    .bind(agent)
    // The stored form of a time (RFC 3339, microseconds, `Z`) sorts as text.
    .bind(now.to_rfc3339_opts(SecondsFormat::Micros, true))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt(format!("{what}: {e}"));
    let id = |column: &str| -> Result<Uuid, StoreError> {
        let text: String = row.try_get(column)?;
        Uuid::parse_str(&text).map_err(|e| corrupt(column, &e))
    };
    let phase: Option<String> = row.try_get("phase")?;
    let expires_at: String = row.try_get("expires_at")?;
    Ok(Some(AgentLeaseRow {
        lease_id: id("id")?,
        quest_id: id("quest_id")?,
        key: row.try_get("key")?,
        phase: phase
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|e| corrupt("phase", &e))?,
        expires_at: DateTime::parse_from_rfc3339(&expires_at)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| corrupt("expires_at", &e))?,
    }))
}
