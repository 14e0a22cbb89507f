//! Tokens: stored by the SHA-256 of their secret, with their lease cap and
//! the sessions they are limited to; the bootstrap admin's ensured at start.

use super::Tx;
use super::codec::*;
use crate::domain::Role;
use crate::domain::ids::TokenId;
use crate::domain::work::Refusal;
use crate::store::common::{Turn, scope_text};
use crate::store::{NewToken, StoreError, TokenRow};

/// Stores a token by the SHA-256 of its secret.
pub async fn create_token(tx: &mut Tx, token: NewToken) -> Result<TokenRow, StoreError> {
    let id = TokenId::new();
    // DO NOTHING, not an error: a taken name (or digest) leaves the transaction usable.
    let inserted = tx
        .exec(
            sqlx::query(
                "INSERT INTO tokens (id, name, role, hash, max_leases, sessions, adjudicate, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(token.name.clone())
            .bind(token.role.as_str())
            .bind(token.hash.clone())
            .bind(token.max_leases.map(|n| n.min(i32::MAX as u32) as i32))
            .bind(scope_text(token.sessions.as_deref()))
            .bind(token.adjudicate)
            .bind(at(tx.now)),
        )
        .await?;
    if inserted == 0 {
        return Err(Refusal::NameTaken(token.name).into());
    }
    Ok(TokenRow {
        id,
        name: token.name,
        role: token.role,
        hash: token.hash,
        max_leases: token.max_leases,
        sessions: token.sessions,
        adjudicate: token.adjudicate,
        created_at: tx.now,
        revoked_at: None,
    })
}

/// Makes `hash` the one live token named `name` (the bootstrap admin) and
/// answers true. With `replace` false, a live token of that name with
/// another hash wins instead: nothing is written and the answer is false.
pub async fn ensure_token(
    tx: &mut Tx,
    name: String,
    role: Role,
    hash: String,
    replace: bool,
) -> Result<bool, StoreError> {
    // Replicas starting together ensure the same token: they take turns, so
    // the second finds the first's row instead of colliding with it.
    tx.take_turns(Turn::Token(&name)).await?;
    if !replace {
        let other = tx
            .row(
                sqlx::query(
                    "SELECT 1 FROM tokens WHERE name = $1 AND hash <> $2 AND revoked_at IS NULL LIMIT 1",
                )
                .bind(name.clone())
                .bind(hash.clone()),
            )
            .await?;
        if other.is_some() {
            return Ok(false);
        }
    }
    // The configured secret is the only live token of this name: a rotated
    // secret retires the old one, and a revoked bootstrap token comes back.
    tx.exec(
        sqlx::query(
            "UPDATE tokens SET revoked_at = $1 WHERE name = $2 AND hash <> $3 AND revoked_at IS NULL",
        )
        .bind(at(tx.now))
        .bind(name.clone())
        .bind(hash.clone()),
    )
    .await?;
    tx.exec(
        sqlx::query(
            "INSERT INTO tokens (id, name, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (hash) DO UPDATE
             SET name = excluded.name, role = excluded.role, revoked_at = NULL",
        )
        .bind(TokenId::new())
        .bind(name)
        .bind(role.as_str())
        .bind(hash)
        .bind(at(tx.now)),
    )
    .await?;
    Ok(true)
}

/// Revokes a token (again is a no-op).
pub async fn revoke_token(tx: &mut Tx, id: TokenId) -> Result<TokenRow, StoreError> {
    let row = tx
        .row(
            sqlx::query(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 RETURNING *",
            )
            .bind(at(tx.now))
            .bind(id),
        )
        .await?
        .ok_or(StoreError::NotFound("token"))?;
    // Its claims end with it: the quest's own claim columns by the
    // migrations' trigger, its looks' claims here.
    tx.exec(sqlx::query("DELETE FROM review_claims WHERE reviewer_token = $1").bind(id))
        .await?;
    token_row(&row)
}
