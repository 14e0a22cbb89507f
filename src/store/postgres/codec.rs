//! How rows are read back from PostgreSQL: ids, times and flags in their
//! native types, JSON from `json` columns (its text, so object keys keep their
//! order), states and other closed sets from their text.

use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::Postgres;
use sqlx::Row;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgRow, PgTypeInfo, PgValueRef};
use uuid::Uuid;

use crate::domain::ids::{
    L2JobId, LeaseId, QuestId, RecheckRunId, SessionId, SubmissionId, TokenId,
};
use sqlx::types::Json;

use crate::domain::work::LeaseFacts;
use crate::store::common::scope_of;
use crate::store::{
    L2AnswerRow, L2Job, LeaseRow, QuestRow, SessionRow, StoreError, SubmissionRow, TokenRow,
};

/// The record ids are UUIDs in the database: each binds and decodes as one.
macro_rules! uuid_columns {
    ($($id:ty),+) => {$(
        impl sqlx::Type<Postgres> for $id {
            fn type_info() -> PgTypeInfo {
                <Uuid as sqlx::Type<Postgres>>::type_info()
            }
        }

        impl sqlx::Encode<'_, Postgres> for $id {
            fn encode_by_ref(
                &self,
                buf: &mut PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <Uuid as sqlx::Encode<Postgres>>::encode_by_ref(&self.as_uuid(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, Postgres> for $id {
            fn decode(value: PgValueRef<'r>) -> Result<$id, sqlx::error::BoxDynError> {
                <Uuid as sqlx::Decode<Postgres>>::decode(value).map(<$id>::from)
            }
        }

        impl PgHasArrayType for $id {
            fn array_type_info() -> PgTypeInfo {
                <Uuid as PgHasArrayType>::array_type_info()
            }
        }
    )+};
}

uuid_columns!(
    SessionId,
    QuestId,
    LeaseId,
    SubmissionId,
    TokenId,
    L2JobId,
    RecheckRunId
);

/// A value of a closed set (a state, a phase, a role...) from its stored text.
pub fn text<T: FromStr>(s: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .map_err(|e: T::Err| StoreError::Corrupt(e.to_string()))
}

/// Plain data as the text a `json` column takes (bound with a `::json` cast).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("serialising plain data cannot fail")
}

/// Typed access to a row's columns.
pub trait PgRowExt {
    fn json<T: DeserializeOwned>(&self, col: &str) -> Result<T, StoreError>;
    fn opt_json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, StoreError>;
    fn parsed<T: FromStr>(&self, col: &str) -> Result<T, StoreError>
    where
        T::Err: std::fmt::Display;
    fn opt_parsed<T: FromStr>(&self, col: &str) -> Result<Option<T>, StoreError>
    where
        T::Err: std::fmt::Display;
    fn count(&self, col: &str) -> Result<u64, StoreError>;
}

fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, StoreError> {
    serde_json::from_value(v).map_err(|e| StoreError::Corrupt(format!("json: {e}")))
}

impl PgRowExt for PgRow {
    fn json<T: DeserializeOwned>(&self, col: &str) -> Result<T, StoreError> {
        from_value(self.try_get::<Json<Value>, _>(col)?.0)
    }
    fn opt_json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, StoreError> {
        self.try_get::<Option<Json<Value>>, _>(col)?
            .map(|v| from_value(v.0))
            .transpose()
    }
    fn parsed<T: FromStr>(&self, col: &str) -> Result<T, StoreError>
    where
        T::Err: std::fmt::Display,
    {
        text(&self.try_get::<String, _>(col)?)
    }
    fn opt_parsed<T: FromStr>(&self, col: &str) -> Result<Option<T>, StoreError>
    where
        T::Err: std::fmt::Display,
    {
        self.try_get::<Option<String>, _>(col)?
            .as_deref()
            .map(text)
            .transpose()
    }
    fn count(&self, col: &str) -> Result<u64, StoreError> {
        Ok(self.try_get::<i64, _>(col)?.max(0) as u64)
    }
}

pub const SESSION_COLUMNS: &str =
    "id, name, key_column, config, columns, source_name, total, created_by, created_at";

pub fn session_row(r: &PgRow) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        key_column: r.try_get("key_column")?,
        config: r.json("config")?,
        columns: r.json("columns")?,
        source_name: r.try_get("source_name")?,
        total: r.count("total")?,
        created_by: r.try_get("created_by")?,
        created_at: r.try_get("created_at")?,
    })
}

pub fn quest_row(r: &PgRow) -> Result<QuestRow, StoreError> {
    Ok(QuestRow {
        id: r.try_get("id")?,
        session_id: r.try_get("session_id")?,
        row_index: r.count("row_index")?,
        key: r.try_get("key")?,
        input: r.json("input")?,
        state: r.parsed("state")?,
        phase: r.opt_parsed("phase")?,
        tries: r.try_get::<i32, _>("tries")? as u32,
        lapses: r.try_get::<i32, _>("lapses")? as u32,
        leases: r.try_get::<i32, _>("leases")? as u32,
        lease_id: r.try_get("lease_id")?,
        last_facts: r.json("last_facts")?,
        result: r.opt_json("result")?,
        submission_id: r.try_get("submission_id")?,
        receipt: r.try_get("receipt")?,
        decided_by: r.try_get("decided_by")?,
        review_claimed_by: r.opt_parsed("review_claimed_by")?,
        review_claim_expires_at: r.try_get("review_claim_expires_at")?,
        repeated_failure: r.try_get("repeated_failure")?,
        updated_at: r.try_get("updated_at")?,
        recheck_mark: r.opt_parsed("recheck_mark")?,
        rechecked_at: r.try_get("rechecked_at")?,
        recheck_facts: r.json("recheck_facts")?,
    })
}

/// The lease columns of `leases l` under the prefix [`prefixed_lease`] reads.
pub const LEASE_PREFIXED: &str = "l.id AS l_id, l.quest_id AS l_quest_id, l.agent AS l_agent, \
     l.granted_at AS l_granted_at, l.expires_at AS l_expires_at, l.end_reason AS l_end_reason";

/// A lease read under the prefix `l_`, if the join found one.
pub fn prefixed_lease(r: &PgRow) -> Result<Option<LeaseFacts>, StoreError> {
    let Some(id) = r.try_get("l_id")? else {
        return Ok(None);
    };
    Ok(Some(LeaseFacts {
        id,
        quest_id: r.try_get("l_quest_id")?,
        agent: r.parsed("l_agent")?,
        granted_at: r.try_get("l_granted_at")?,
        expires_at: r.try_get("l_expires_at")?,
        ended: r.opt_parsed("l_end_reason")?,
    }))
}

pub fn lease_row(r: &PgRow) -> Result<LeaseRow, StoreError> {
    Ok(LeaseRow {
        id: r.try_get("id")?,
        quest_id: r.try_get("quest_id")?,
        agent: r.parsed("agent")?,
        expires_at: r.try_get("expires_at")?,
    })
}

pub fn submission_row(r: &PgRow) -> Result<SubmissionRow, StoreError> {
    Ok(SubmissionRow {
        id: r.try_get("id")?,
        quest_id: r.try_get("quest_id")?,
        session_id: r.try_get("session_id")?,
        lease_id: r.try_get("lease_id")?,
        agent: r.parsed("agent")?,
        result: r.json("result")?,
        verdict: r.parsed("verdict")?,
        facts: r.json("facts")?,
        evidence: r.json("evidence")?,
        gate: r.try_get("gate")?,
        gate_version: r.try_get("gate_version")?,
        receipt: r.try_get("receipt")?,
        state_after: r.opt_parsed("state_after")?,
        tries_after: r
            .try_get::<Option<i32>, _>("tries_after")?
            .map(|n| n as u32),
        created_at: r.try_get("created_at")?,
        decided_at: r.try_get("decided_at")?,
        repeats: r.try_get("repeats")?,
    })
}

pub fn token_row(r: &PgRow) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        role: r.parsed("role")?,
        hash: r.try_get("hash")?,
        max_leases: r.try_get::<Option<i32>, _>("max_leases")?.map(|n| n as u32),
        sessions: scope_of(r.try_get("sessions")?)?,
        created_at: r.try_get("created_at")?,
        revoked_at: r.try_get("revoked_at")?,
    })
}

pub fn l2_job_row(r: &PgRow) -> Result<L2Job, StoreError> {
    Ok(L2Job {
        id: r.try_get("id")?,
        submission_id: r.try_get("submission_id")?,
        quest_id: r.try_get("quest_id")?,
        session_id: r.try_get("session_id")?,
        verifier: r.try_get("verifier")?,
        question_index: r.try_get::<i32, _>("question_index")? as u32,
        question: r.try_get("question")?,
        flag_on: r.parsed("flag_on")?,
        request: r.json("request")?,
        status: r.parsed("status")?,
    })
}

pub fn l2_answer_row(r: &PgRow) -> Result<L2AnswerRow, StoreError> {
    Ok(L2AnswerRow {
        job_id: r.try_get("job_id")?,
        submission_id: r.try_get("submission_id")?,
        quest_id: r.try_get("quest_id")?,
        verifier: r.try_get("verifier")?,
        model: r.try_get("model")?,
        question_index: r.try_get::<i32, _>("question_index")? as u32,
        question: r.try_get("question")?,
        flag_on: r.parsed("flag_on")?,
        raw_reply: r.try_get("raw_reply")?,
        answer: r.opt_parsed("answer")?,
        detail: r.try_get("detail")?,
        flagged: r.try_get("flagged")?,
        attempts: r.try_get::<i32, _>("attempts")? as u32,
        latency_ms: r.count("latency_ms")?,
        created_at: r.try_get("created_at")?,
    })
}
