//! How values are written to and read from SQLite: ids and times as text,
//! JSON as text, and one decoder per row type. Batched statements take their
//! rows as one JSON array bound to `json_each(?)`, so that their SQL text (and
//! prepared statement) is the same whatever the batch's size.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use crate::domain::verify::{Answer, FlagOn};
use crate::domain::work::{AgentId, LeaseFacts};
use crate::store::common::scope_of;
pub use crate::store::common::{lease_of, set_status, status_of};
use crate::store::{
    L2AnswerRow, L2Job, LeaseRow, QuestRow, SessionRow, StoreError, SubmissionRow, TokenRow,
};

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

pub fn from_json<T: DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("json: {e}")))
}

/// An id of any kind (`SessionId`, `QuestId`, …, or a bare `Uuid`) from its text.
pub fn uuid<T: From<Uuid>>(s: &str) -> Result<T, StoreError> {
    Uuid::parse_str(s)
        .map(T::from)
        .map_err(|e| StoreError::Corrupt(format!("uuid `{s}`: {e}")))
}

pub fn text<T: FromStr>(s: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .map_err(|e: T::Err| StoreError::Corrupt(e.to_string()))
}

/// Typed access to a row's columns.
pub trait RowExt {
    fn str(&self, col: &str) -> Result<String, StoreError>;
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, col: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError>;
}

impl RowExt for SqliteRow {
    fn str(&self, col: &str) -> Result<String, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn int(&self, col: &str) -> Result<i64, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }
}

pub fn opt<T>(
    v: Option<String>,
    f: impl FnOnce(&str) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    v.as_deref().map(f).transpose()
}

pub const SESSION_COLUMNS: &str =
    "id, name, key_column, config, columns, source_name, total, created_by, created_at";

pub fn session_row(r: &SqliteRow) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: uuid(&r.str("id")?)?,
        name: r.str("name")?,
        key_column: r.str("key_column")?,
        config: from_json(&r.str("config")?)?,
        columns: from_json(&r.str("columns")?)?,
        source_name: r.str("source_name")?,
        total: r.int("total")? as u64,
        created_by: r.str("created_by")?,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}

pub fn quest_row(r: &SqliteRow) -> Result<QuestRow, StoreError> {
    Ok(QuestRow {
        id: uuid(&r.str("id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        row_index: r.int("row_index")? as u64,
        key: r.str("key")?,
        input: from_json(&r.str("input")?)?,
        state: text(&r.str("state")?)?,
        phase: opt(r.opt_str("phase")?, text)?,
        tries: r.int("tries")? as u32,
        lapses: r.int("lapses")? as u32,
        leases: r.int("leases")? as u32,
        lease_id: opt(r.opt_str("lease_id")?, uuid)?,
        last_facts: from_json(&r.str("last_facts")?)?,
        result: opt(r.opt_str("result")?, from_json)?,
        submission_id: opt(r.opt_str("submission_id")?, uuid)?,
        receipt: r.opt_str("receipt")?,
        decided_by: r.opt_str("decided_by")?,
        review_claimed_by: opt(r.opt_str("review_claimed_by")?, text)?,
        review_claim_expires_at: opt(r.opt_str("review_claim_expires_at")?, parse_ts)?,
        repeated_failure: r.int("repeated_failure")? != 0,
        updated_at: parse_ts(&r.str("updated_at")?)?,
        recheck_mark: opt(r.opt_str("recheck_mark")?, text)?,
        rechecked_at: opt(r.opt_str("rechecked_at")?, parse_ts)?,
        recheck_facts: from_json(&r.str("recheck_facts")?)?,
    })
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

/// A lease read under the prefix `l_` (`l_id`, `l_agent`, ...), if the join found one.
pub fn prefixed_lease(r: &SqliteRow) -> Result<Option<LeaseFacts>, StoreError> {
    let Some(id) = r.opt_str("l_id")? else {
        return Ok(None);
    };
    Ok(Some(LeaseFacts {
        id: uuid(&id)?,
        quest_id: uuid(&r.str("l_quest_id")?)?,
        agent: text(&r.str("l_agent")?)?,
        granted_at: parse_ts(&r.str("l_granted_at")?)?,
        expires_at: parse_ts(&r.str("l_expires_at")?)?,
        ended: opt(r.opt_str("l_end_reason")?, text)?,
    }))
}

/// The lease columns of `leases l` under the prefix [`prefixed_lease`] reads.
pub const LEASE_PREFIXED: &str = "l.id AS l_id, l.quest_id AS l_quest_id, l.agent AS l_agent, \
     l.granted_at AS l_granted_at, l.expires_at AS l_expires_at, l.end_reason AS l_end_reason";

pub fn lease_row(r: &SqliteRow) -> Result<LeaseRow, StoreError> {
    Ok(LeaseRow {
        id: uuid(&r.str("id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        agent: text(&r.str("agent")?)?,
        expires_at: parse_ts(&r.str("expires_at")?)?,
    })
}

pub fn agent_of(s: &str) -> Result<AgentId, StoreError> {
    text(s)
}

pub fn submission_row(r: &SqliteRow) -> Result<SubmissionRow, StoreError> {
    Ok(SubmissionRow {
        id: uuid(&r.str("id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        lease_id: uuid(&r.str("lease_id")?)?,
        agent: agent_of(&r.str("agent")?)?,
        result: from_json(&r.str("result")?)?,
        verdict: text(&r.str("verdict")?)?,
        facts: from_json(&r.str("facts")?)?,
        evidence: from_json(&r.str("evidence")?)?,
        gate: r.opt_str("gate")?,
        gate_version: r.opt_str("gate_version")?,
        receipt: r.opt_str("receipt")?,
        state_after: opt(r.opt_str("state_after")?, text)?,
        tries_after: r
            .try_get::<Option<i64>, _>("tries_after")?
            .map(|n| n as u32),
        created_at: parse_ts(&r.str("created_at")?)?,
        decided_at: opt(r.opt_str("decided_at")?, parse_ts)?,
        repeats: opt(r.opt_str("repeats")?, uuid)?,
    })
}

pub fn token_row(r: &SqliteRow) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        id: uuid(&r.str("id")?)?,
        name: r.str("name")?,
        role: text(&r.str("role")?)?,
        hash: r.str("hash")?,
        max_leases: r.opt_int("max_leases")?.map(|n| n as u32),
        sessions: scope_of(r.opt_str("sessions")?)?,
        created_at: parse_ts(&r.str("created_at")?)?,
        revoked_at: opt(r.opt_str("revoked_at")?, parse_ts)?,
    })
}

fn flag_on(s: &str) -> Result<FlagOn, StoreError> {
    text(s)
}

pub fn l2_job_row(r: &SqliteRow) -> Result<L2Job, StoreError> {
    Ok(L2Job {
        id: uuid(&r.str("id")?)?,
        submission_id: uuid(&r.str("submission_id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        verifier: r.str("verifier")?,
        question_index: r.int("question_index")? as u32,
        question: r.str("question")?,
        flag_on: flag_on(&r.str("flag_on")?)?,
        request: from_json(&r.str("request")?)?,
        status: text(&r.str("status")?)?,
    })
}

pub fn l2_answer_row(r: &SqliteRow) -> Result<L2AnswerRow, StoreError> {
    Ok(L2AnswerRow {
        job_id: uuid(&r.str("job_id")?)?,
        submission_id: uuid(&r.str("submission_id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        verifier: r.str("verifier")?,
        model: r.str("model")?,
        question_index: r.int("question_index")? as u32,
        question: r.str("question")?,
        flag_on: flag_on(&r.str("flag_on")?)?,
        raw_reply: r.opt_str("raw_reply")?,
        answer: opt(r.opt_str("answer")?, text::<Answer>)?,
        detail: r.str("detail")?,
        flagged: r.int("flagged")? != 0,
        attempts: r.int("attempts")? as u32,
        latency_ms: r.int("latency_ms")? as u64,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}
