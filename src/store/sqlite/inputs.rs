//! The uploaded file, kept in pieces of [`SOURCE_CHUNK`] bytes: written with
//! its session, read one piece at a time. Free functions that
//! `impl Store for SqliteStore` calls.

use crate::domain::ids::SessionId;
use sqlx::{Row, SqlitePool};

use super::writer::WriteCtx;
use crate::store::{SourceInfo, StoreError};

/// The size of one stored piece of an uploaded file.
pub const SOURCE_CHUNK: usize = 1 << 20;

/// Stores `bytes` as the session's uploaded file, piece by piece.
pub(super) async fn insert_source(
    ctx: &mut WriteCtx,
    session_id: SessionId,
    bytes: &[u8],
) -> Result<(), StoreError> {
    // An empty file is one empty piece, so every session has a piece 0.
    let pieces = bytes
        .chunks(SOURCE_CHUNK)
        .chain(bytes.is_empty().then_some(&[][..]));
    for (seq, piece) in pieces.enumerate() {
        ctx.exec(
            sqlx::query(
                "INSERT INTO session_source_chunks (session_id, seq, bytes) VALUES (?, ?, ?)",
            )
            .bind(session_id.to_string())
            .bind(seq as i64)
            .bind(piece.to_vec()),
        )
        .await?;
    }
    Ok(())
}

/// The uploaded file's name, media type and size; `length()` reads no piece.
pub(super) async fn source_info(
    pool: &SqlitePool,
    id: SessionId,
) -> Result<SourceInfo, StoreError> {
    let row = sqlx::query(
        "SELECT s.source_name, s.source_type,
                (SELECT COALESCE(SUM(length(c.bytes)), 0) FROM session_source_chunks c
                 WHERE c.session_id = s.id) AS size,
                (SELECT COUNT(*) FROM session_source_chunks c WHERE c.session_id = s.id) AS pieces
         FROM sessions s WHERE s.id = ?",
    )
    .bind(id.to_string())
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("session"))?;
    Ok(SourceInfo {
        name: row.try_get("source_name")?,
        media_type: row.try_get("source_type")?,
        size: row.try_get::<i64, _>("size")? as u64,
        pieces: row.try_get::<i64, _>("pieces")? as u64,
    })
}

/// Piece `seq` of the uploaded file; `None` past the last one.
pub(super) async fn source_chunk(
    pool: &SqlitePool,
    id: SessionId,
    seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = ? AND seq = ?",
    )
    .bind(id.to_string())
    .bind(seq as i64)
    .fetch_optional(pool)
    .await?)
}

/// The whole uploaded file, its pieces joined.
pub(super) async fn whole_source(
    pool: &SqlitePool,
    id: SessionId,
) -> Result<(String, String, Vec<u8>), StoreError> {
    let info = source_info(pool, id).await?;
    let pieces: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = ? ORDER BY seq",
    )
    .bind(id.to_string())
    .fetch_all(pool)
    .await?;
    Ok((info.name, info.media_type, pieces.concat()))
}
