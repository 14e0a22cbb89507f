//! How values are written to SQLite: ids and times as text, JSON as text.
//! Rows are read through [`Columns`] and the shared decoders of
//! `store::decode`. Batched statements take their rows as one JSON array
//! bound to `json_each(?)`, so that their SQL text (and prepared statement)
//! is the same whatever the batch's size.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

pub use crate::store::columns::Columns;
pub use crate::store::common::{lease_of, set_status, status_of};
pub use crate::store::decode::*;
use crate::store::{QuestRow, StoreError};

/// The pool reads run on, and one of its connections.
pub type Pool = sqlx::SqlitePool;
pub type Conn = sqlx::SqliteConnection;

/// The text of a plain field of a JSON column, as an expression (the same
/// expression as the indexes on such fields).
pub fn json_text(column: &str, field: &str) -> String {
    format!("json_extract({column}, '$.{field}')")
}

/// A time as a bind: its stored text.
pub fn at(t: DateTime<Utc>) -> String {
    ts(t)
}

/// A minute of the console's throughput as stored: the first 16
/// characters of a time's text.
pub fn minute(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M").to_string()
}

/// A minute stored by [`minute`], read back.
pub fn read_minute(r: &SqliteRow, col: &str) -> Result<DateTime<Utc>, StoreError> {
    parse_ts(&format!("{}:00Z", r.str(col)?))
}

/// Plain data as a bind: its JSON text.
pub fn doc<T: Serialize + ?Sized>(value: &T) -> String {
    json(value)
}

/// Times are stored as fixed-width RFC 3339 text, so text order is time order.
pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time `{s}`: {e}")))
}

pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("serialising plain data cannot fail")
}

/// An id of any kind (`SessionId`, `QuestId`, …, or a bare `Uuid`) from its text.
pub fn uuid<T: From<Uuid>>(s: &str) -> Result<T, StoreError> {
    Uuid::parse_str(s)
        .map(T::from)
        .map_err(|e| StoreError::Corrupt(format!("uuid `{s}`: {e}")))
}

/// A row's text columns by their SQLite names (see [`Columns`] for the rest).
pub trait RowExt {
    fn str(&self, col: &str) -> Result<String, StoreError>;
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError>;
}

impl RowExt for SqliteRow {
    fn str(&self, col: &str) -> Result<String, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }
}

pub fn opt<T>(
    v: Option<String>,
    f: impl FnOnce(&str) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    v.as_deref().map(f).transpose()
}

/// A quest's every changeable column, as one element of a batched update.
pub fn quest_patch(q: &QuestRow) -> Value {
    json!({
        "id": q.id.to_string(),
        "state": q.state.as_str(),
        "phase": q.phase.map(|p| p.as_str()),
        "tries": q.tries,
        "lapses": q.lapses,
        "lease_id": q.lease_id.map(|l| l.to_string()),
        "last_facts": json(&q.last_facts),
        "result": q.result.as_ref().map(json),
        "submission_id": q.submission_id.map(|s| s.to_string()),
        "receipt": q.receipt,
        "decided_by": q.decided_by,
        "review_claimed_by": q.review_claimed_by.as_ref().map(|r| r.to_string()),
        "review_claim_expires_at": q.review_claim_expires_at.map(ts),
        "repeated_failure": q.repeated_failure,
        "updated_at": ts(q.updated_at),
    })
}
