//! Multi-row writes: quests, submissions, lease ends and renewals, L2 jobs,
//! each kind one statement whatever the number of rows (a batch of submits,
//! a sweep), and each checked to touch exactly the rows it names. Rows go to
//! the database as one JSON array (`json_to_recordset`), sent as text: a
//! `serde_json::Value` parameter would go as `jsonb`, whose text form differs
//! (`{"a": 1}`) from the one stored elsewhere, and the ratchet compares texts.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::codec::json as json_text;
use super::tx::{Tx, expect_rows};
use crate::domain::ids::LeaseId;
use crate::domain::replay::IdempotencyKey;
use crate::domain::work::LeaseEnd;
use crate::store::decision::L2JobWrite;
use crate::store::{QuestRow, StoreError, SubmissionRow};

/// A timestamp as the database keeps it (microseconds), so that a value
/// written through JSON equals the same value bound as a parameter.
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Writes every changeable column of each quest, fenced: only while the
/// quest still carries the lease given with it (or none, for `None`).
pub async fn save_quests(
    tx: &mut Tx,
    quests: &[(&QuestRow, Option<LeaseId>)],
) -> Result<(), StoreError> {
    if quests.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = quests
        .iter()
        .map(|(q, fence)| {
            json!({
                "id": q.id, "fence": fence, "state": q.state.as_str(),
                "phase": q.phase.map(|p| p.as_str()), "tries": q.tries, "lapses": q.lapses,
                "lease_id": q.lease_id, "last_facts": q.last_facts, "result": q.result,
                "submission_id": q.submission_id, "receipt": q.receipt, "decided_by": q.decided_by,
                "review_claimed_by": q.review_claimed_by.as_ref().map(|r| r.to_string()),
                "review_claim_expires_at": q.review_claim_expires_at.map(ts),
                "repeated_failure": q.repeated_failure, "updated_at": ts(q.updated_at),
            })
        })
        .collect();
    let touched = sqlx::query(
        "UPDATE quests SET state = r.state, phase = r.phase, tries = r.tries, lapses = r.lapses,
           lease_id = r.lease_id, last_facts = r.last_facts, result = r.result,
           submission_id = r.submission_id, receipt = r.receipt, decided_by = r.decided_by,
           review_claimed_by = r.review_claimed_by,
           review_claim_expires_at = r.review_claim_expires_at,
           repeated_failure = r.repeated_failure, updated_at = r.updated_at
         FROM json_to_recordset($1::json) AS r(
           id uuid, fence uuid, state text, phase text, tries int, lapses int, lease_id uuid,
           last_facts json, result json, submission_id uuid, receipt text, decided_by text,
           review_claimed_by text, review_claim_expires_at timestamptz, repeated_failure boolean,
           updated_at timestamptz)
         WHERE quests.id = r.id AND quests.lease_id IS NOT DISTINCT FROM r.fence",
    )
    .bind(json_text(&rows))
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the quest update", touched, quests.len() as u64)
}

/// Inserts submissions, each with the digest of its result.
pub async fn insert_submissions(
    tx: &mut Tx,
    submissions: &[(&SubmissionRow, &str, Option<&IdempotencyKey>)],
) -> Result<(), StoreError> {
    if submissions.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = submissions
        .iter()
        .map(|(s, hash, key)| {
            json!({
                "idempotency_token": key.map(|_| s.agent.token),
                "idempotency_key": key.map(|k| k.as_str()), "repeats": s.repeats,
                "id": s.id, "quest_id": s.quest_id, "session_id": s.session_id,
                "lease_id": s.lease_id, "agent": s.agent.to_string(), "result": s.result,
                "result_hash": hash, "verdict": s.verdict.as_str(), "facts": s.facts,
                "evidence": s.evidence, "gate": s.gate, "gate_version": s.gate_version,
                "receipt": s.receipt, "state_after": s.state_after.map(|st| st.as_str()),
                "tries_after": s.tries_after, "created_at": ts(s.created_at),
                "decided_at": s.decided_at.map(ts),
            })
        })
        .collect();
    let inserted = sqlx::query(
        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash,
           verdict, facts, evidence, gate, gate_version, receipt, state_after, tries_after,
           created_at, decided_at, idempotency_token, idempotency_key, repeats)
         SELECT id, quest_id, session_id, lease_id, agent, result, result_hash, verdict, facts,
           evidence, gate, gate_version, receipt, state_after, tries_after, created_at, decided_at,
           idempotency_token, idempotency_key, repeats
         FROM json_to_recordset($1::json) AS r(
           id uuid, quest_id uuid, session_id uuid, lease_id uuid, agent text, result json,
           result_hash text, verdict text, facts json, evidence json, gate text,
           gate_version text, receipt text, state_after text, tries_after int,
           created_at timestamptz, decided_at timestamptz, idempotency_token uuid,
           idempotency_key text, repeats uuid)",
    )
    .bind(json_text(&rows))
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the new submissions", inserted, submissions.len() as u64)
}

/// Ends live leases, each for its reason.
pub async fn end_leases(tx: &mut Tx, ends: &[(LeaseId, LeaseEnd)]) -> Result<(), StoreError> {
    if ends.is_empty() {
        return Ok(());
    }
    let ids: Vec<LeaseId> = ends.iter().map(|(id, _)| *id).collect();
    let reasons: Vec<&str> = ends.iter().map(|(_, end)| end.as_str()).collect();
    let touched = sqlx::query(
        "UPDATE leases SET ended_at = $3, end_reason = r.reason
         FROM unnest($1::uuid[], $2::text[]) AS r(id, reason)
         WHERE leases.id = r.id AND leases.ended_at IS NULL",
    )
    .bind(&ids)
    .bind(&reasons)
    .bind(tx.now)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the ended leases", touched, ends.len() as u64)
}

/// Moves the expiry of live leases.
pub async fn renew_leases(
    tx: &mut Tx,
    renewals: &[(LeaseId, DateTime<Utc>)],
) -> Result<(), StoreError> {
    if renewals.is_empty() {
        return Ok(());
    }
    let ids: Vec<LeaseId> = renewals.iter().map(|(id, _)| *id).collect();
    let until: Vec<DateTime<Utc>> = renewals.iter().map(|(_, t)| *t).collect();
    let touched = sqlx::query(
        "UPDATE leases SET expires_at = r.until
         FROM unnest($1::uuid[], $2::timestamptz[]) AS r(id, until)
         WHERE leases.id = r.id AND leases.ended_at IS NULL",
    )
    .bind(&ids)
    .bind(&until)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the renewed leases", touched, renewals.len() as u64)
}

pub async fn insert_l2_jobs(tx: &mut Tx, jobs: &[L2JobWrite]) -> Result<(), StoreError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({
                "id": j.id, "submission_id": j.submission_id, "quest_id": j.quest_id,
                "session_id": j.session_id, "verifier": j.verifier, "question_index": j.index,
                "question": j.question, "flag_on": j.flag_on, "request": j.request,
            })
        })
        .collect();
    let inserted = sqlx::query(
        "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index,
           question, flag_on, request, created_at)
         SELECT id, submission_id, quest_id, session_id, verifier, question_index, question,
           flag_on, request::json, $2
         FROM json_to_recordset($1::json) AS r(
           id uuid, submission_id uuid, quest_id uuid, session_id uuid, verifier text,
           question_index int, question text, flag_on text, request text)",
    )
    .bind(json_text(&rows))
    .bind(tx.now)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the new L2 jobs", inserted, jobs.len() as u64)
}
