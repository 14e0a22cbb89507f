//! Reads about one agent, for clients that must look without touching:
//! `quest guard` asks whether an agent still holds its lease, and asking must
//! not renew, sweep or claim anything. Free functions over the read pool, so
//! that `impl Store for SqliteStore` calls each in one line.

use crate::domain::ids::SessionId;
use chrono::{DateTime, Utc};
use sqlx::{Row, SqlitePool};

use super::codec::{parse_ts, text, ts, uuid};
use crate::domain::work::AgentId;
use crate::store::{AgentLeaseRow, StoreError};

/// The unexpired lease `agent` holds in a session, with its quest's key and phase.
///
/// A lease is live while it has not ended, has not expired, and the quest still
/// carries it: the same three conditions the write path fences on.
pub async fn agent_lease(
    pool: &SqlitePool,
    session_id: SessionId,
    agent: &AgentId,
    now: DateTime<Utc>,
) -> Result<Option<AgentLeaseRow>, StoreError> {
    let row = sqlx::query(
        "SELECT l.id, l.quest_id, q.key, q.phase, l.expires_at
         FROM leases l JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id
         WHERE l.session_id = ? AND l.agent = ? AND l.ended_at IS NULL AND l.expires_at > ?
         LIMIT 1",
    )
    .bind(session_id.to_string())
    .bind(agent.to_string())
    // The stored form of a time (RFC 3339, microseconds, `Z`) sorts as text.
    .bind(ts(now))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let phase: Option<String> = row.try_get("phase")?;
    Ok(Some(AgentLeaseRow {
        lease_id: uuid(&row.try_get::<String, _>("id")?)?,
        quest_id: uuid(&row.try_get::<String, _>("quest_id")?)?,
        key: row.try_get("key")?,
        phase: text(phase.as_deref().unwrap_or_default())?,
        expires_at: parse_ts(&row.try_get::<String, _>("expires_at")?)?,
    }))
}
