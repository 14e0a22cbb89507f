//! The rare writes: scans (a session with its quests). Each runs
//! alone inside the writer's batch (see [`super::writer::Single`]).

use crate::domain::ids::SessionId;

use super::codec::*;
use super::writer::WriteCtx;
use crate::store::{NewSession, StoreError};

/// Rows per multi-row insert of a scan: SQLite binds at most 32,766 values.
const ROWS_PER_INSERT: usize = 500;

/// Stores a session, its uploaded file and one quest per row, all or nothing.
pub async fn create_session(ctx: &mut WriteCtx, s: NewSession) -> Result<SessionId, StoreError> {
    ctx.exec(
        sqlx::query(
            "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name, source_type,
             total, max_tries, max_lapses, lease_seconds, created_by, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(s.id.to_string())
        .bind(s.name.clone())
        .bind(s.key_column.clone())
        .bind(s.config.gate.kind.clone())
        .bind(json(&s.config))
        .bind(json(&s.columns))
        .bind(s.source_name.clone())
        .bind(s.source_type.clone())
        .bind(s.rows.len() as i64)
        .bind(s.config.max_tries as i64)
        .bind(s.config.max_lapses as i64)
        .bind(s.config.lease_seconds as i64)
        .bind(s.created_by.clone())
        .bind(ts(ctx.now)),
    )
    .await?;
    // The file lives apart from the session row, which every lease and submit reads.
    super::inputs::insert_source(ctx, s.id, &s.source).await?;
    let now = ts(ctx.now);
    let session_id = s.id.to_string();
    for (c, chunk) in s.rows.chunks(ROWS_PER_INSERT).enumerate() {
        let values = vec!["(?, ?, ?, ?, ?, 'TODO', 'open', ?, ?)"; chunk.len()].join(", ");
        let sql = format!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at, reviews_required) \
             VALUES {values}"
        );
        let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (i, (key, input)) in chunk.iter().enumerate() {
            let id = s.quest_id();
            insert = insert
                .bind(id.to_string())
                .bind(session_id.clone())
                .bind((c * ROWS_PER_INSERT + i) as i64)
                .bind(key.clone())
                .bind(input.as_str().to_owned())
                .bind(now.clone())
                .bind(i64::from(s.looks_required(id)));
        }
        ctx.exec(insert).await?;
    }
    ctx.session_created(s.id, s.rows.len() as u64);
    Ok(s.id)
}
