//! The server's secrets (keys of its draws), made once and shared by replicas.

use super::Tx;
use super::codec::*;
use crate::store::StoreError;

/// The secret named `name`: `candidate` when none was kept yet (it is kept
/// then), else the one kept first.
pub async fn server_secret(
    tx: &mut Tx,
    name: String,
    candidate: String,
) -> Result<String, StoreError> {
    tx.exec(
        sqlx::query(
            "INSERT INTO server_secrets (name, secret, created_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name.clone())
        .bind(candidate)
        .bind(at(tx.now)),
    )
    .await?;
    tx.row(sqlx::query("SELECT secret FROM server_secrets WHERE name = $1").bind(name))
        .await?
        .ok_or(StoreError::NotFound("server secret"))?
        .text("secret")
}
