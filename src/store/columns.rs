//! How both engines read and bind the same values, so that one body of SQL
//! code serves both (see [`crate::store`]'s module documentation).
//!
//! The typed ids bind and decode as UUIDs on PostgreSQL and as their
//! hyphenated text on SQLite, which is how the SQLite schema stores them.
//! [`Columns`] reads a row's columns by meaning (an id, a time, a count, a
//! JSON document, a value of a closed set) rather than by the engine's
//! storage type: PostgreSQL keeps `uuid`, `timestamptz`, `int4`/`int8`,
//! `bool` and `json`; SQLite keeps text and integers.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgRow, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::types::Json;
use sqlx::{Decode, Postgres, Row, Sqlite, TypeInfo, ValueRef};
use uuid::Uuid;
use uuid::fmt::Hyphenated;

use crate::domain::ids::{
    GoldItemId, L2JobId, LeaseId, QuestId, RecheckRunId, SessionId, SubmissionId, TokenId,
};
use crate::store::StoreError;

type BoxError = sqlx::error::BoxDynError;

/// The record ids: a `uuid` on PostgreSQL, hyphenated text on SQLite.
macro_rules! id_columns {
    ($($id:ty),+) => {$(
        impl sqlx::Type<Postgres> for $id {
            fn type_info() -> PgTypeInfo {
                <Uuid as sqlx::Type<Postgres>>::type_info()
            }
        }

        impl sqlx::Encode<'_, Postgres> for $id {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<sqlx::encode::IsNull, BoxError> {
                <Uuid as sqlx::Encode<Postgres>>::encode_by_ref(&self.as_uuid(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, Postgres> for $id {
            fn decode(value: PgValueRef<'r>) -> Result<$id, BoxError> {
                <Uuid as sqlx::Decode<Postgres>>::decode(value).map(<$id>::from)
            }
        }

        impl PgHasArrayType for $id {
            fn array_type_info() -> PgTypeInfo {
                <Uuid as PgHasArrayType>::array_type_info()
            }
        }

        impl sqlx::Type<Sqlite> for $id {
            fn type_info() -> SqliteTypeInfo {
                <Hyphenated as sqlx::Type<Sqlite>>::type_info()
            }
        }

        impl sqlx::Encode<'_, Sqlite> for $id {
            fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<sqlx::encode::IsNull, BoxError> {
                <Hyphenated as sqlx::Encode<Sqlite>>::encode(self.as_uuid().hyphenated(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, Sqlite> for $id {
            fn decode(value: SqliteValueRef<'r>) -> Result<$id, BoxError> {
                <Hyphenated as sqlx::Decode<Sqlite>>::decode(value).map(|h| <$id>::from(h.into_uuid()))
            }
        }
    )+};
}

/// The id of a row that nothing refers to by a type of its own (a
/// re-check's record, an answer): a new one is time-ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowId(Uuid);

impl RowId {
    pub fn new() -> RowId {
        RowId(Uuid::now_v7())
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for RowId {
    fn from(id: Uuid) -> RowId {
        RowId(id)
    }
}

id_columns!(
    RowId,
    SessionId,
    QuestId,
    LeaseId,
    SubmissionId,
    TokenId,
    L2JobId,
    RecheckRunId,
    GoldItemId
);

fn null(col: &str) -> StoreError {
    StoreError::Corrupt(format!("column `{col}` is NULL"))
}

fn corrupt(col: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("column `{col}`: {e}"))
}

/// A row's columns read by what they mean, the same way on both engines.
/// Each engine supplies the `opt_` readers of its storage types; the rest
/// follows from them.
pub trait Columns {
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError>;
    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>, StoreError>;
    fn opt_at(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError>;
    /// An integer of any width.
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError>;
    fn flag(&self, col: &str) -> Result<bool, StoreError>;
    fn real(&self, col: &str) -> Result<f64, StoreError>;
    fn opt_json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, StoreError>;

    fn text(&self, col: &str) -> Result<String, StoreError> {
        self.opt_text(col)?.ok_or_else(|| null(col))
    }

    /// An id of any kind (`SessionId`, `QuestId`, …).
    fn id<T: From<Uuid>>(&self, col: &str) -> Result<T, StoreError> {
        self.opt_id(col)?.ok_or_else(|| null(col))
    }

    fn opt_id<T: From<Uuid>>(&self, col: &str) -> Result<Option<T>, StoreError> {
        Ok(self.opt_uuid(col)?.map(T::from))
    }

    fn at(&self, col: &str) -> Result<DateTime<Utc>, StoreError> {
        self.opt_at(col)?.ok_or_else(|| null(col))
    }

    fn int(&self, col: &str) -> Result<i64, StoreError> {
        self.opt_int(col)?.ok_or_else(|| null(col))
    }

    /// A count or another figure that cannot be negative.
    fn count(&self, col: &str) -> Result<u64, StoreError> {
        Ok(self.int(col)?.max(0) as u64)
    }

    /// A small count (tries, lapses, an index).
    fn small(&self, col: &str) -> Result<u32, StoreError> {
        u32::try_from(self.int(col)?.max(0)).map_err(|e| corrupt(col, e))
    }

    fn opt_small(&self, col: &str) -> Result<Option<u32>, StoreError> {
        self.opt_int(col)?
            .map(|n| u32::try_from(n.max(0)).map_err(|e| corrupt(col, e)))
            .transpose()
    }

    fn json<T: DeserializeOwned>(&self, col: &str) -> Result<T, StoreError> {
        self.opt_json(col)?.ok_or_else(|| null(col))
    }

    /// A value of a closed set (a state, a phase, a role…) from its text.
    fn parsed<T: FromStr>(&self, col: &str) -> Result<T, StoreError>
    where
        T::Err: std::fmt::Display,
    {
        self.opt_parsed(col)?.ok_or_else(|| null(col))
    }

    fn opt_parsed<T: FromStr>(&self, col: &str) -> Result<Option<T>, StoreError>
    where
        T::Err: std::fmt::Display,
    {
        self.opt_text(col)?
            .map(|s| s.parse().map_err(|e: T::Err| corrupt(col, e)))
            .transpose()
    }
}

impl Columns for PgRow {
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_at(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        let raw = self.try_get_raw(col)?;
        if raw.is_null() {
            return Ok(None);
        }
        let wide = match raw.type_info().name() {
            "INT2" => <i16 as Decode<Postgres>>::decode(raw).map(i64::from),
            "INT4" => <i32 as Decode<Postgres>>::decode(raw).map(i64::from),
            "INT8" => <i64 as Decode<Postgres>>::decode(raw),
            other => return Err(corrupt(col, format!("{other} is not an integer type"))),
        };
        wide.map(Some).map_err(|e| corrupt(col, e))
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn real(&self, col: &str) -> Result<f64, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, StoreError> {
        Ok(self.try_get::<Option<Json<T>>, _>(col)?.map(|j| j.0))
    }
}

impl Columns for SqliteRow {
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>, StoreError> {
        self.opt_text(col)?
            .map(|s| Uuid::parse_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    }

    /// Times are stored as fixed-width RFC 3339 text (`sqlite::codec::ts`).
    fn opt_at(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.opt_text(col)?
            .map(|s| {
                DateTime::parse_from_rfc3339(&s)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| corrupt(col, e))
            })
            .transpose()
    }

    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.int(col)? != 0)
    }

    fn real(&self, col: &str) -> Result<f64, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, StoreError> {
        let raw = self.try_get_raw(col)?;
        if raw.is_null() {
            return Ok(None);
        }
        let text = <&str as Decode<Sqlite>>::decode(raw).map_err(|e| corrupt(col, e))?;
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| corrupt(col, e))
    }
}
