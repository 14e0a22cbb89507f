//! The reads PostgreSQL writes in its own dialect (arrays, `json`
//! functions), and the counts the triggers keep in `session_counts`.

use sqlx::{PgConnection, PgPool};

use super::codec::*;
use crate::domain::ids::SessionId;
use crate::store::common::set_bucket;
use crate::store::*;

/// What the store knows of the counts without reading them: nothing, every
/// replica reads them from the database.
pub type Known = ();

/// A read-only transaction: one snapshot for several statements.
pub async fn snapshot(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    Ok(pool
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?)
}

/// A session's counts, as the triggers keep them in `session_counts` (the
/// slots of each bucket summed).
pub async fn counts(
    conn: &mut PgConnection,
    session: &SessionRow,
    _known: &Known,
) -> Result<Counts, StoreError> {
    let (id, total) = (session.id, session.total);
    let mut c = Counts {
        total,
        ..Counts::default()
    };
    for row in sqlx::query(
        "SELECT bucket, SUM(n)::bigint AS n FROM session_counts WHERE session_id = $1 GROUP BY bucket",
    )
        .bind(id)
        .fetch_all(conn)
        .await?
    {
        set_bucket(&mut c, &row.text("bucket")?, row.count("n")?)?;
    }
    Ok(c)
}

pub async fn result_fields(
    pool: &PgPool,
    session_id: SessionId,
) -> Result<Vec<String>, StoreError> {
    // A `json` value keeps its keys in the order written; the first row and
    // key position at which a field appears fixes its column.
    Ok(sqlx::query_scalar(
        "SELECT k.key FROM quests q, json_object_keys(q.result) WITH ORDINALITY AS k (key, ord)
         WHERE q.session_id = $1 AND q.state IN ('PASS', 'REVIEW') AND json_typeof(q.result) = 'object'
         GROUP BY k.key ORDER BY MIN(q.row_index * 1000000 + k.ord)",
    )
    .bind(session_id)
    .fetch_all(pool)
    .await?)
}
