//! The rare writes: scans (a session with its uploaded file and quests) and
//! tokens.

use crate::domain::work::Refusal;
use std::sync::Arc;

use crate::domain::ids::{QuestId, SessionId, TokenId};

use super::codec::*;
use super::tx::Tx;
use crate::domain::Role;
use crate::store::common::{scope_text, session_event};
use crate::store::{NewSession, SOURCE_CHUNK, StoreError, TokenRow};

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
    // An empty file is one empty piece, so every session has a piece 0.
    let pieces = s
        .source
        .chunks(SOURCE_CHUNK)
        .chain(s.source.is_empty().then_some(&[][..]));
    for (seq, piece) in pieces.enumerate() {
        sqlx::query(
            "INSERT INTO session_source_chunks (session_id, seq, bytes) VALUES ($1, $2, $3)",
        )
        .bind(s.id)
        .bind(seq as i32)
        .bind(piece)
        .execute(tx.db())
        .await?;
    }
    for (c, chunk) in s.rows.chunks(ROWS_PER_INSERT).enumerate() {
        let ids: Vec<QuestId> = chunk.iter().map(|_| QuestId::new()).collect();
        let indexes: Vec<i64> = (0..chunk.len())
            .map(|i| (c * ROWS_PER_INSERT + i) as i64)
            .collect();
        let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let inputs: Vec<&str> = chunk.iter().map(|(_, input)| input.as_str()).collect();
        sqlx::query(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at)
             SELECT u.id, $1, u.row_index, u.key, u.input::json, 'TODO', 'open', $2
             FROM UNNEST($3::uuid[], $4::bigint[], $5::text[], $6::text[]) AS u (id, row_index, key, input)",
        )
        .bind(s.id)
        .bind(tx.now)
        .bind(&ids)
        .bind(&indexes)
        .bind(&keys)
        .bind(&inputs)
        .execute(tx.db())
        .await?;
    }
    tx.events.push(session_event(s.id, tx.now));
    Ok(s.id)
}

/// Stores a token by the SHA-256 of its secret.
pub async fn create_token(
    tx: &mut Tx,
    name: String,
    role: Role,
    hash: String,
    max_leases: Option<u32>,
    sessions: Option<Vec<SessionId>>,
) -> Result<TokenRow, StoreError> {
    let id = TokenId::new();
    // DO NOTHING, not an error: a taken name (or digest) leaves the transaction usable.
    let inserted = sqlx::query(
        "INSERT INTO tokens (id, name, role, hash, max_leases, sessions, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(&name)
    .bind(role.as_str())
    .bind(&hash)
    .bind(max_leases.map(|n| n.min(i32::MAX as u32) as i32))
    .bind(scope_text(sessions.as_deref()))
    .bind(tx.now)
    .execute(tx.db())
    .await?
    .rows_affected();
    if inserted == 0 {
        return Err(Refusal::NameTaken(name).into());
    }
    Ok(TokenRow {
        id,
        name,
        role,
        hash,
        max_leases,
        sessions,
        created_at: tx.now,
        revoked_at: None,
    })
}

/// Makes `hash` the one live token named `name` (the bootstrap admin).
pub async fn ensure_token(
    tx: &mut Tx,
    name: String,
    role: Role,
    hash: String,
) -> Result<(), StoreError> {
    // Replicas starting together ensure the same token: they take turns, so
    // the second finds the first's row instead of colliding with it.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('token ' || $1, 0))")
        .bind(&name)
        .execute(tx.db())
        .await?;
    // The configured secret is the only live token of this name: a rotated
    // secret retires the old one, and a revoked bootstrap token comes back.
    sqlx::query(
        "UPDATE tokens SET revoked_at = $1 WHERE name = $2 AND hash <> $3 AND revoked_at IS NULL",
    )
    .bind(tx.now)
    .bind(&name)
    .bind(&hash)
    .execute(tx.db())
    .await?;
    sqlx::query(
        "INSERT INTO tokens (id, name, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (hash) DO UPDATE SET name = excluded.name, role = excluded.role, revoked_at = NULL",
    )
    .bind(TokenId::new())
    .bind(name)
    .bind(role.as_str())
    .bind(hash)
    .bind(tx.now)
    .execute(tx.db())
    .await?;
    Ok(())
}

/// Revokes a token (again is a no-op).
pub async fn revoke_token(tx: &mut Tx, id: TokenId) -> Result<TokenRow, StoreError> {
    let row = sqlx::query(
        "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 RETURNING *",
    )
    .bind(tx.now)
    .bind(id)
    .fetch_optional(tx.db())
    .await?
    .ok_or(StoreError::NotFound("token"))?;
    token_row(&row)
}
