//! The rare writes: scans (a session with its uploaded file and quests).

use std::sync::Arc;

use crate::domain::ids::{QuestId, SessionId};

use super::codec::*;
use super::tx::Tx;
use crate::store::common::session_event;
use crate::store::{NewSession, StoreError};

/// Quests per insert of a scan: one statement over arrays, a few MB of binds.
const ROWS_PER_INSERT: usize = 5000;

/// Stores a session, its uploaded file and one quest per row, all or nothing.
pub async fn create_session(tx: &mut Tx, s: Arc<NewSession>) -> Result<SessionId, StoreError> {
    sqlx::query(
        "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name, source_type,
         total, max_tries, max_lapses, lease_seconds, created_by, created_at)
         VALUES ($1, $2, $3, $4, $5::json, $6::json, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(s.id)
    .bind(&s.name)
    .bind(&s.key_column)
    .bind(&s.config.gate.kind)
    .bind(json(&s.config))
    .bind(json(&s.columns))
    .bind(&s.source_name)
    .bind(&s.source_type)
    .bind(s.rows.len() as i64)
    .bind(s.config.max_tries as i32)
    .bind(s.config.max_lapses as i32)
    .bind(s.config.lease_seconds as i32)
    .bind(&s.created_by)
    .bind(tx.now)
    .execute(tx.db())
    .await?;
    // The file lives apart from the session row, which every lease and submit reads.
    super::inputs::insert_source(tx, s.id, &s.source).await?;
    for (c, chunk) in s.rows.chunks(ROWS_PER_INSERT).enumerate() {
        let ids: Vec<QuestId> = chunk.iter().map(|_| s.quest_id()).collect();
        let looks: Vec<i32> = ids.iter().map(|id| s.looks_required(*id) as i32).collect();
        let indexes: Vec<i64> = (0..chunk.len())
            .map(|i| (c * ROWS_PER_INSERT + i) as i64)
            .collect();
        let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let inputs: Vec<&str> = chunk.iter().map(|(_, input)| input.as_str()).collect();
        sqlx::query(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, max_tries,
                                 reviews_required, updated_at)
             SELECT u.id, $1, u.row_index, u.key, u.input::json, 'TODO', 'open', $7, u.looks, $2
             FROM UNNEST($3::uuid[], $4::bigint[], $5::text[], $6::text[], $8::int[])
                  AS u (id, row_index, key, input, looks)",
        )
        .bind(s.id)
        .bind(tx.now)
        .bind(&ids)
        .bind(&indexes)
        .bind(&keys)
        .bind(&inputs)
        .bind(s.config.max_tries as i32)
        .bind(&looks)
        .execute(tx.db())
        .await?;
    }
    tx.events.push(session_event(s.id, tx.now));
    Ok(s.id)
}
