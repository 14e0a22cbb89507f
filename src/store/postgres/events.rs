//! Events across replicas: each committed write's events go into the `events`
//! table with one NOTIFY per transaction, and every replica's relay passes
//! the events of the others on to its own watchers. Lost notifications only
//! delay: the relay reads on every (re)connect and once a second, and it reads
//! by transaction id against its snapshot's xmin, so a transaction that
//! commits after a later-numbered one is still seen (see migration 0004).

use std::collections::HashSet;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{PgPool, Row};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::codec::json;
use super::tx::Tx;
use crate::domain::QuestEvent;
use crate::store::StoreError;

/// The channel every replica listens on.
pub const CHANNEL: &str = "quest_events";
/// How often the relay reads without a notification.
const POLL: Duration = Duration::from_secs(1);
/// How long events are kept for replicas that reconnect.
const KEEP: &str = "1 hour";

/// Records the transaction's events for the other replicas and notifies them
/// once, at commit.
pub async fn record(tx: &mut Tx, origin: Uuid) -> Result<(), StoreError> {
    if tx.events.is_empty() {
        return Ok(());
    }
    let bodies: Vec<String> = tx.events.iter().map(json).collect();
    sqlx::query(
        "WITH e AS (INSERT INTO events (origin, body) SELECT $1, b::json FROM UNNEST($2::text[]) AS b RETURNING 1)
         SELECT pg_notify($3, $1::text) FROM (SELECT COUNT(*) FROM e) n",
    )
    .bind(origin)
    .bind(&bodies)
    .bind(CHANNEL)
    .execute(tx.db())
    .await?;
    Ok(())
}

/// Where the relay has read up to: every transaction before `horizon` is
/// seen; of those from `horizon` on, the ids already passed on.
struct Cursor {
    horizon: u64,
    seen: HashSet<i64>,
}

/// Passes on the events of other replicas until `stop`.
pub async fn relay(
    pool: PgPool,
    origin: Uuid,
    events: broadcast::Sender<QuestEvent>,
    stop: CancellationToken,
) {
    let mut cursor = loop {
        match horizon(&pool).await {
            Ok(horizon) => {
                break Cursor {
                    horizon,
                    seen: HashSet::new(),
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "the event relay cannot read the database; retrying")
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
    };
    let mut reads = 0u64;
    while !stop.is_cancelled() {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "the event relay cannot listen; retrying");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(POLL) => continue,
                }
            }
        };
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::warn!(error = %e, "the event relay cannot listen; retrying");
            continue;
        }
        // A catch-up read on every (re)connect, on another replica's
        // notification, and at least once per POLL (a lost notification);
        // never for a notification of this replica's own commits, whose
        // events were passed on as they happened.
        let mut last_read: Option<tokio::time::Instant> = None;
        loop {
            if last_read.is_none_or(|t| t.elapsed() >= POLL) {
                if let Err(e) = catch_up(&pool, origin, &events, &mut cursor).await {
                    tracing::warn!(error = %e, "the event relay could not read the events");
                }
                last_read = Some(tokio::time::Instant::now());
                reads += 1;
                if reads.is_multiple_of(600) {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DELETE FROM events WHERE created_at < now() - interval '{KEEP}'"
                    )))
                    .execute(&pool)
                    .await;
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                got = tokio::time::timeout(POLL, listener.try_recv()) => match got {
                    Ok(Ok(Some(n))) if n.payload() == origin.to_string() => {}
                    Ok(Ok(Some(_))) | Err(_) => last_read = None,
                    // The connection dropped: listen anew, then catch up.
                    Ok(Ok(None)) | Ok(Err(_)) => break,
                },
            }
        }
    }
}

/// The xmin of a fresh snapshot: every transaction before it has finished.
async fn horizon(pool: &PgPool) -> Result<u64, StoreError> {
    let text: String = sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
        .fetch_one(pool)
        .await?;
    parse_xid(&text)
}

fn parse_xid(text: &str) -> Result<u64, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("transaction id `{text}`")))
}

/// Reads the events of transactions from the cursor's horizon on, in one
/// snapshot, and passes on those of other replicas not passed on before.
async fn catch_up(
    pool: &PgPool,
    origin: Uuid,
    events: &broadcast::Sender<QuestEvent>,
    cursor: &mut Cursor,
) -> Result<(), StoreError> {
    let rows = sqlx::query(
        "WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS horizon)
         SELECT h.horizon, e.id, e.tx::text AS tx, e.origin, e.body
         FROM h LEFT JOIN events e ON e.tx >= $1::text::xid8 ORDER BY e.id",
    )
    .bind(cursor.horizon.to_string())
    .fetch_all(pool)
    .await?;
    let Some(first) = rows.first() else {
        return Ok(());
    };
    // Never behind where the relay has read up to.
    let horizon = parse_xid(&first.try_get::<String, _>("horizon")?)?.max(cursor.horizon);
    let mut seen = HashSet::new();
    for row in &rows {
        let Some(id) = row.try_get::<Option<i64>, _>("id")? else {
            continue;
        };
        let tx = parse_xid(&row.try_get::<String, _>("tx")?)?;
        if !cursor.seen.contains(&id) && row.try_get::<Uuid, _>("origin")? != origin {
            let body: sqlx::types::Json<QuestEvent> = row.try_get("body")?;
            let _ = events.send(body.0);
        }
        // Rows of transactions past the new horizon come again next time.
        if tx >= horizon {
            seen.insert(id);
        }
    }
    cursor.horizon = horizon;
    cursor.seen = seen;
    Ok(())
}
