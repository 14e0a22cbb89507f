//! How values are bound to PostgreSQL: ids, times and flags in their native
//! types, plain data as `json` (its text, so object keys keep their order),
//! states and other closed sets as their text. Rows are read through
//! [`Columns`] and the shared decoders of `store::decode`.

use chrono::{DateTime, Utc};
use sqlx::Postgres;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgRow, PgTypeInfo};

use crate::store::StoreError;

pub use crate::store::columns::Columns;
pub use crate::store::decode::*;

/// The pool reads run on, and one of its connections.
pub type Pool = sqlx::PgPool;
pub type Conn = sqlx::PgConnection;

/// The text of a plain field of a JSON column, as an expression (the same
/// expression as the indexes on such fields).
pub fn json_text(column: &str, field: &str) -> String {
    format!("{column} ->> '{field}'")
}

/// A time as a bind: a `timestamptz`.
pub fn at(t: DateTime<Utc>) -> DateTime<Utc> {
    t
}

/// A minute of the console's throughput: a `timestamptz`.
pub fn minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t
}

/// A minute stored by [`minute`], read back.
pub fn read_minute(r: &PgRow, col: &str) -> Result<DateTime<Utc>, StoreError> {
    r.at(col)
}

/// Plain data as a bind of type `json`.
pub fn doc<T: serde::Serialize + ?Sized>(value: &T) -> JsonText {
    JsonText(json(value))
}

/// JSON text bound as a `json` parameter (whose binary format is its text).
pub struct JsonText(String);

impl sqlx::Type<Postgres> for JsonText {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(114))
    }
}

impl sqlx::Encode<'_, Postgres> for JsonText {
    fn encode_by_ref(
        &self,
        buf: &mut PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<Postgres>>::encode(self.0.as_str(), buf)
    }
}

/// Plain data as the text a `json` column takes (bound with a `::json` cast).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("serialising plain data cannot fail")
}
