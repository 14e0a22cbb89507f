//! The store's rows read back from either engine, each decoder written once
//! over [`Columns`].

use crate::domain::work::LeaseFacts;
use crate::store::columns::Columns;
use crate::store::common::scope_of;
use crate::store::{
    L2AnswerRow, L2Job, LeaseRow, PairStats, QuestRow, SessionRow, StoreError, SubmissionRow,
    TokenRow,
};

/// A session's columns, as `session_row` reads them (a macro, for `concat!`).
macro_rules! session_columns {
    () => {
        "id, name, key_column, config, columns, source_name, total, created_by, created_at, gold_of"
    };
}

pub const SESSION_COLUMNS: &str = session_columns!();

pub fn session_row(r: &impl Columns) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: r.id("id")?,
        name: r.text("name")?,
        key_column: r.text("key_column")?,
        config: r.json("config")?,
        columns: r.json("columns")?,
        source_name: r.text("source_name")?,
        total: r.count("total")?,
        created_by: r.text("created_by")?,
        created_at: r.at("created_at")?,
        gold_of: r.opt_id("gold_of")?,
    })
}

pub fn quest_row(r: &impl Columns) -> Result<QuestRow, StoreError> {
    Ok(QuestRow {
        id: r.id("id")?,
        session_id: r.id("session_id")?,
        row_index: r.count("row_index")?,
        key: r.text("key")?,
        input: r.json("input")?,
        state: r.parsed("state")?,
        phase: r.opt_parsed("phase")?,
        tries: r.small("tries")?,
        lapses: r.small("lapses")?,
        leases: r.small("leases")?,
        lease_id: r.opt_id("lease_id")?,
        last_facts: r.json("last_facts")?,
        result: r.opt_json("result")?,
        submission_id: r.opt_id("submission_id")?,
        receipt: r.opt_text("receipt")?,
        decided_by: r.opt_text("decided_by")?,
        review_claimed_by: r.opt_parsed("review_claimed_by")?,
        review_claim_expires_at: r.opt_at("review_claim_expires_at")?,
        reviews_required: r.small("reviews_required")?,
        repeated_failure: r.flag("repeated_failure")?,
        updated_at: r.at("updated_at")?,
        recheck_mark: r.opt_parsed("recheck_mark")?,
        rechecked_at: r.opt_at("rechecked_at")?,
        recheck_facts: r.json("recheck_facts")?,
    })
}

/// The lease columns of `leases l` under the prefix [`prefixed_lease`] reads.
pub const LEASE_PREFIXED: &str = "l.id AS l_id, l.quest_id AS l_quest_id, l.agent AS l_agent, \
     l.granted_at AS l_granted_at, l.expires_at AS l_expires_at, l.end_reason AS l_end_reason";

/// A lease read under the prefix `l_` (`l_id`, `l_agent`, ...), if the join found one.
pub fn prefixed_lease(r: &impl Columns) -> Result<Option<LeaseFacts>, StoreError> {
    let Some(id) = r.opt_id("l_id")? else {
        return Ok(None);
    };
    Ok(Some(LeaseFacts {
        id,
        quest_id: r.id("l_quest_id")?,
        agent: r.parsed("l_agent")?,
        granted_at: r.at("l_granted_at")?,
        expires_at: r.at("l_expires_at")?,
        ended: r.opt_parsed("l_end_reason")?,
    }))
}

pub fn lease_row(r: &impl Columns) -> Result<LeaseRow, StoreError> {
    Ok(LeaseRow {
        id: r.id("id")?,
        quest_id: r.id("quest_id")?,
        agent: r.parsed("agent")?,
        expires_at: r.at("expires_at")?,
    })
}

pub fn submission_row(r: &impl Columns) -> Result<SubmissionRow, StoreError> {
    Ok(SubmissionRow {
        id: r.id("id")?,
        quest_id: r.id("quest_id")?,
        session_id: r.id("session_id")?,
        lease_id: r.id("lease_id")?,
        agent: r.parsed("agent")?,
        result: r.json("result")?,
        verdict: r.parsed("verdict")?,
        facts: r.json("facts")?,
        evidence: r.json("evidence")?,
        gate: r.opt_text("gate")?,
        gate_version: r.opt_text("gate_version")?,
        receipt: r.opt_text("receipt")?,
        state_after: r.opt_parsed("state_after")?,
        tries_after: r.opt_small("tries_after")?,
        created_at: r.at("created_at")?,
        decided_at: r.opt_at("decided_at")?,
        repeats: r.opt_id("repeats")?,
    })
}

pub fn token_row(r: &impl Columns) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        id: r.id("id")?,
        name: r.text("name")?,
        role: r.parsed("role")?,
        hash: r.text("hash")?,
        max_leases: r.opt_small("max_leases")?,
        sessions: scope_of(r.opt_text("sessions")?)?,
        adjudicate: r.flag("adjudicate")?,
        created_at: r.at("created_at")?,
        revoked_at: r.opt_at("revoked_at")?,
    })
}

/// The agreement of two verifiers (`l2_pair_stats`, or its sums).
pub fn pair_stats_row(r: &impl Columns) -> Result<PairStats, StoreError> {
    Ok(PairStats {
        a: r.text("verifier_a")?,
        b: r.text("verifier_b")?,
        compared: r.count("compared")?,
        agreed: r.count("agreed")?,
    })
}

pub fn l2_job_row(r: &impl Columns) -> Result<L2Job, StoreError> {
    Ok(L2Job {
        id: r.id("id")?,
        submission_id: r.id("submission_id")?,
        quest_id: r.id("quest_id")?,
        session_id: r.id("session_id")?,
        verifier: r.text("verifier")?,
        question_index: r.small("question_index")?,
        question: r.text("question")?,
        flag_on: r.parsed("flag_on")?,
        request: r.json("request")?,
        status: r.parsed("status")?,
    })
}

pub fn l2_answer_row(r: &impl Columns) -> Result<L2AnswerRow, StoreError> {
    Ok(L2AnswerRow {
        job_id: r.id("job_id")?,
        submission_id: r.id("submission_id")?,
        quest_id: r.id("quest_id")?,
        verifier: r.text("verifier")?,
        model: r.text("model")?,
        question_index: r.small("question_index")?,
        question: r.text("question")?,
        flag_on: r.parsed("flag_on")?,
        raw_reply: r.opt_text("raw_reply")?,
        answer: r.opt_parsed("answer")?,
        detail: r.text("detail")?,
        flagged: r.flag("flagged")?,
        attempts: r.small("attempts")?,
        latency_ms: r.count("latency_ms")?,
        created_at: r.at("created_at")?,
    })
}
