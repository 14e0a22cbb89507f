//! The rare writes: scans (a session with its quests) and tokens. Each runs
//! alone inside the writer's batch (see [`super::writer::Single`]).

use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::work::Refusal;
use uuid::Uuid;

use super::codec::*;
use super::writer::WriteCtx;
use crate::domain::Role;
use crate::store::common::scope_text;
use crate::store::{NewSession, StoreError, TokenRow};

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
        let values = vec!["(?, ?, ?, ?, ?, 'TODO', 'open', ?)"; chunk.len()].join(", ");
        let sql = format!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at) VALUES {values}"
        );
        let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (i, (key, input)) in chunk.iter().enumerate() {
            insert = insert
                .bind(QuestId::new().to_string())
                .bind(session_id.clone())
                .bind((c * ROWS_PER_INSERT + i) as i64)
                .bind(key.clone())
                .bind(input.as_str().to_owned())
                .bind(now.clone());
        }
        ctx.exec(insert).await?;
    }
    ctx.session_created(s.id, s.rows.len() as u64);
    Ok(s.id)
}

/// Stores a token by the SHA-256 of its secret, with its lease cap.
pub async fn create_token(
    ctx: &mut WriteCtx,
    name: String,
    role: Role,
    hash: String,
    max_leases: Option<u32>,
    sessions: Option<Vec<SessionId>>,
) -> Result<TokenRow, StoreError> {
    let id = TokenId::new();
    let inserted = ctx
        .exec(
            sqlx::query(
                "INSERT INTO tokens (id, name, role, hash, max_leases, sessions, created_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(id.to_string())
            .bind(name.clone())
            .bind(role.as_str())
            .bind(hash.clone())
            .bind(max_leases.map(i64::from))
            .bind(scope_text(sessions.as_deref()))
            .bind(ts(ctx.now)),
        )
        .await;
    match inserted {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            Err(Refusal::NameTaken(name).into())
        }
        other => {
            other?;
            Ok(TokenRow {
                id,
                name,
                role,
                hash,
                max_leases,
                sessions,
                created_at: ctx.now,
                revoked_at: None,
            })
        }
    }
}

/// Makes `hash` the one live token named `name` (the bootstrap admin).
pub async fn ensure_token(
    ctx: &mut WriteCtx,
    name: String,
    role: Role,
    hash: String,
) -> Result<(), StoreError> {
    // The configured secret is the only live token of this name: a rotated
    // secret retires the old one, and a revoked bootstrap token comes back.
    ctx.exec(
        sqlx::query(
            "UPDATE tokens SET revoked_at = ? WHERE name = ? AND hash <> ? AND revoked_at IS NULL",
        )
        .bind(ts(ctx.now))
        .bind(name.clone())
        .bind(hash.clone()),
    )
    .await?;
    ctx.exec(
        sqlx::query(
            "INSERT INTO tokens (id, name, role, hash, created_at) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (hash) DO UPDATE SET name = excluded.name, role = excluded.role, revoked_at = NULL",
        )
        .bind(Uuid::now_v7().to_string())
        .bind(name)
        .bind(role.as_str())
        .bind(hash)
        .bind(ts(ctx.now)),
    )
    .await?;
    Ok(())
}

/// Revokes a token (again is a no-op).
pub async fn revoke_token(ctx: &mut WriteCtx, id: TokenId) -> Result<TokenRow, StoreError> {
    let row = ctx
        .row(
            sqlx::query(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING *",
            )
            .bind(ts(ctx.now))
            .bind(id.to_string()),
        )
        .await?
        .ok_or(StoreError::NotFound("token"))?;
    token_row(&row)
}
