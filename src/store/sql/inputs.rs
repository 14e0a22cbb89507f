//! The uploaded file, kept in pieces of [`SOURCE_CHUNK`] bytes apart from
//! the session row (which every lease and submit reads): written with its
//! session, read one piece at a time.

use super::Tx;
use super::codec::*;
use crate::domain::ids::SessionId;
use crate::store::{SOURCE_CHUNK, SourceInfo, StoreError};

/// Stores `bytes` as the session's uploaded file, piece by piece.
pub async fn insert_source(
    tx: &mut Tx,
    session_id: SessionId,
    bytes: &[u8],
) -> Result<(), StoreError> {
    // An empty file is one empty piece, so every session has a piece 0.
    let pieces = bytes
        .chunks(SOURCE_CHUNK)
        .chain(bytes.is_empty().then_some(&[][..]));
    for (seq, piece) in pieces.enumerate() {
        tx.exec(
            sqlx::query(
                "INSERT INTO session_source_chunks (session_id, seq, bytes) VALUES ($1, $2, $3)",
            )
            .bind(session_id)
            .bind(seq as i32)
            .bind(piece.to_vec()),
        )
        .await?;
    }
    Ok(())
}

/// The uploaded file's name, media type and size; `length()` reads no piece.
pub async fn source_info(pool: &Pool, id: SessionId) -> Result<SourceInfo, StoreError> {
    let row = sqlx::query(
        "SELECT s.source_name, s.source_type,
                (SELECT CAST(COALESCE(SUM(length(c.bytes)), 0) AS BIGINT)
                 FROM session_source_chunks c WHERE c.session_id = s.id) AS size,
                (SELECT COUNT(*) FROM session_source_chunks c WHERE c.session_id = s.id) AS pieces
         FROM sessions s WHERE s.id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("session"))?;
    Ok(SourceInfo {
        name: row.text("source_name")?,
        media_type: row.text("source_type")?,
        size: row.count("size")?,
        pieces: row.count("pieces")?,
    })
}

/// Piece `seq` of the uploaded file; `None` past the last one.
pub async fn source_chunk(
    pool: &Pool,
    id: SessionId,
    seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = $1 AND seq = $2",
    )
    .bind(id)
    .bind(seq.min(i32::MAX as u64) as i32)
    .fetch_optional(pool)
    .await?)
}

/// The whole uploaded file, its pieces joined.
pub async fn whole_source(
    pool: &Pool,
    id: SessionId,
) -> Result<(String, String, Vec<u8>), StoreError> {
    let info = source_info(pool, id).await?;
    let pieces: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT bytes FROM session_source_chunks WHERE session_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok((info.name, info.media_type, pieces.concat()))
}
