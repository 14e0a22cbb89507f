//! Submissions and verdicts: a submit records a result (PENDING, or with the
//! verdict of a gate that ran in the request), and the gate runner's verdict
//! decides a PENDING one. Each locks its quest first, so two replicas acting
//! on one quest take turns, and every write is fenced by the checked lease.

use std::sync::Arc;

use crate::domain::ids::{L2JobId, LeaseId, QuestId, SessionId, SubmissionId};
use sqlx::Row;

use super::codec::*;
use super::leases::{end_lease, lock_quest_with_lease, renew_lease, save_quest, session};
use super::tx::{Tx, expect_rows};
use crate::domain::work::{self, Before, LeaseAfter, LeaseFacts, Limits};
use crate::domain::{EventKind, Phase, SubmissionVerdict};
use crate::store::common::{lease_of, set_status, status_of};
use crate::store::{
    Decided, GateDecision, LeaseRow, NewSubmission, QuestRow, SessionRow, StoreError,
    SubmissionRow, SubmissionView, SubmitOutcome,
};

/// The count of a session's quests still TODO, as this transaction sees it.
pub async fn remaining(tx: &mut Tx, session_id: SessionId) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(n), 0)::bigint FROM session_counts WHERE session_id = $1 AND bucket LIKE 'TODO/%'",
    )
    .bind(session_id)
    .fetch_one(tx.db())
    .await?;
    Ok(n.max(0) as u64)
}

pub async fn submit(
    tx: &mut Tx,
    args: Arc<(NewSubmission, Option<GateDecision>)>,
) -> Result<SubmitOutcome, StoreError> {
    let (new, decision) = &*args;
    let row = lock_quest_with_lease(tx, new.quest_id, new.lease_id)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let (mut quest, lease) = (quest_row(&row)?, prefixed_lease(&row)?);
    let latest = sqlx::query(
        "SELECT * FROM submissions WHERE quest_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(quest.id)
    .fetch_optional(tx.db())
    .await?;
    if let Some(latest) = latest {
        let hash: String = latest.try_get("result_hash")?;
        let latest = submission_row(&latest)?;
        if latest.lease_id == new.lease_id
            && hash == new.result_hash
            && latest.agent.belongs_to(new.token_id)
        {
            let s = session(tx, quest.session_id).await?;
            let lease = lease.filter(|l| l.ended.is_none() && quest.lease_id == Some(l.id));
            return Ok(SubmitOutcome::Replayed(SubmissionView {
                submission: latest,
                max_tries: s.config.max_tries,
                remaining: remaining(tx, quest.session_id).await?,
                lease: lease.as_ref().map(lease_of),
                quest,
            }));
        }
    }
    work::check_hold(
        status_of(&quest),
        quest.lease_id,
        lease.as_ref(),
        new.lease_id,
        new.token_id,
        tx.now,
    )?;
    let lease = lease.ok_or(StoreError::NotFound("lease"))?;
    let s = session(tx, quest.session_id).await?;
    let checking = work::check_submit(status_of(&quest))?;
    let mut submission = SubmissionRow {
        id: SubmissionId::new(),
        quest_id: quest.id,
        session_id: quest.session_id,
        lease_id: new.lease_id,
        agent: lease.agent.clone(),
        result: new.result.clone(),
        verdict: SubmissionVerdict::Pending,
        facts: Vec::new(),
        evidence: Vec::new(),
        gate: None,
        gate_version: None,
        receipt: None,
        state_after: None,
        tries_after: None,
        created_at: tx.now,
        decided_at: None,
    };
    // Watchers see the same two steps whether the gate ran here or on the runner.
    set_status(&mut quest, checking);
    quest.updated_at = tx.now;
    tx.moved(EventKind::Submitted, &quest, Some(&submission));
    let mut writes = Writes::default();
    let (kept, l2_jobs) = match decision.clone() {
        Some(d) => decide(tx, &mut writes, &s, &mut quest, &mut submission, &lease, d)?,
        None => (Some(lease_of(&lease)), Vec::new()),
    };
    insert_submission(tx, &submission, &new.result_hash).await?;
    writes.apply(tx, &quest, lease.id).await?;
    Ok(SubmitOutcome::Recorded {
        view: SubmissionView {
            submission,
            max_tries: s.config.max_tries,
            remaining: remaining(tx, quest.session_id).await?,
            lease: kept,
            quest,
        },
        l2_jobs,
    })
}

pub async fn apply_verdict(
    tx: &mut Tx,
    args: Arc<(SubmissionId, GateDecision)>,
) -> Result<Decided, StoreError> {
    let (submission_id, decision) = &*args;
    let quest_id: QuestId = sqlx::query_scalar("SELECT quest_id FROM submissions WHERE id = $1")
        .bind(submission_id)
        .fetch_optional(tx.db())
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM quests q LEFT JOIN leases l ON l.id = q.lease_id
         WHERE q.id = $1 FOR UPDATE OF q"
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(quest_id)
        .fetch_optional(tx.db())
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let (mut quest, lease) = (quest_row(&row)?, prefixed_lease(&row)?);
    // Read after the lock: another replica may have decided it a moment ago.
    let mut submission = submission_row(
        &sqlx::query("SELECT * FROM submissions WHERE id = $1")
            .bind(submission_id)
            .fetch_one(tx.db())
            .await?,
    )?;
    if submission.verdict != SubmissionVerdict::Pending {
        return Ok(Decided {
            submission,
            quest,
            l2_jobs: Vec::new(),
        });
    }
    let lease = lease.filter(|l| quest.lease_id == Some(l.id) && l.id == submission.lease_id);
    let (Some(lease), Some(Phase::Checking)) = (lease, quest.phase) else {
        return Err(StoreError::Corrupt(format!(
            "pending submission {} whose quest is not checking it",
            submission.id
        )));
    };
    let s = session(tx, quest.session_id).await?;
    let mut writes = Writes::default();
    let (_, l2_jobs) = decide(
        tx,
        &mut writes,
        &s,
        &mut quest,
        &mut submission,
        &lease,
        decision.clone(),
    )?;
    let touched = sqlx::query(
        "UPDATE submissions SET verdict = $2, facts = $3::json, evidence = $4::json, gate = $5,
           gate_version = $6, receipt = $7, state_after = $8, tries_after = $9, decided_at = $10
         WHERE id = $1 AND verdict = 'PENDING'",
    )
    .bind(submission.id)
    .bind(submission.verdict.as_str())
    .bind(json(&submission.facts))
    .bind(json(&submission.evidence))
    .bind(submission.gate.as_deref())
    .bind(submission.gate_version.as_deref())
    .bind(submission.receipt.as_deref())
    .bind(submission.state_after.map(|s| s.as_str()))
    .bind(submission.tries_after.map(|t| t as i32))
    .bind(submission.decided_at)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the decided submission", touched, 1)?;
    writes.apply(tx, &quest, lease.id).await?;
    Ok(Decided {
        submission,
        quest,
        l2_jobs,
    })
}

async fn insert_submission(
    tx: &mut Tx,
    s: &SubmissionRow,
    result_hash: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash,
           verdict, facts, evidence, gate, gate_version, receipt, state_after, tries_after,
           created_at, decided_at)
         VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9::json, $10::json, $11, $12, $13, $14, $15, $16, $17)",
    )
    .bind(s.id)
    .bind(s.quest_id)
    .bind(s.session_id)
    .bind(s.lease_id)
    .bind(s.agent.to_string())
    .bind(json(&s.result))
    .bind(result_hash)
    .bind(s.verdict.as_str())
    .bind(json(&s.facts))
    .bind(json(&s.evidence))
    .bind(s.gate.as_deref())
    .bind(s.gate_version.as_deref())
    .bind(s.receipt.as_deref())
    .bind(s.state_after.map(|st| st.as_str()))
    .bind(s.tries_after.map(|t| t as i32))
    .bind(s.created_at)
    .bind(s.decided_at)
    .execute(tx.db())
    .await?;
    Ok(())
}

/// What a verdict writes besides its submission.
#[derive(Default)]
struct Writes {
    lease: Option<LeaseAfterWrite>,
    l2_jobs: Vec<L2JobWrite>,
}

enum LeaseAfterWrite {
    Renewed(chrono::DateTime<chrono::Utc>),
    Ended(work::LeaseEnd),
}

struct L2JobWrite {
    id: L2JobId,
    submission_id: SubmissionId,
    verifier: String,
    index: u32,
    question: String,
    flag_on: &'static str,
    request: String,
}

impl Writes {
    /// The quest (fenced by the lease it was checked with), the lease, the L2 jobs.
    async fn apply(self, tx: &mut Tx, quest: &QuestRow, lease: LeaseId) -> Result<(), StoreError> {
        save_quest(tx, quest, Some(lease)).await?;
        match self.lease {
            Some(LeaseAfterWrite::Renewed(until)) => renew_lease(tx, lease, until).await?,
            Some(LeaseAfterWrite::Ended(end)) => end_lease(tx, lease, end).await?,
            None => {}
        }
        for job in self.l2_jobs {
            sqlx::query(
                "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index,
                   question, flag_on, request, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::json, $10)",
            )
            .bind(job.id)
            .bind(job.submission_id)
            .bind(quest.id)
            .bind(quest.session_id)
            .bind(job.verifier)
            .bind(job.index as i32)
            .bind(job.question)
            .bind(job.flag_on)
            .bind(job.request)
            .bind(tx.now)
            .execute(tx.db())
            .await?;
        }
        Ok(())
    }
}

/// Applies `d` to `quest` through `submission` (PENDING until now): fills in
/// both rows as [`work::on_verdict`] says and gathers the other writes.
/// Returns the lease the holder keeps, if any, and the L2 jobs created.
fn decide(
    tx: &mut Tx,
    writes: &mut Writes,
    session: &SessionRow,
    quest: &mut QuestRow,
    submission: &mut SubmissionRow,
    lease: &LeaseFacts,
    d: GateDecision,
) -> Result<(Option<LeaseRow>, Vec<L2JobId>), StoreError> {
    let verify = session.config.verify.as_ref();
    let effects = work::on_verdict(
        Before {
            status: status_of(quest),
            last_facts: &quest.last_facts,
            decided_before: quest.submission_id.is_some(),
        },
        d.verdict,
        &d.facts,
        Limits {
            max_tries: session.config.max_tries,
            verify: verify.is_some(),
        },
    )?;
    submission.verdict = d.verdict.into();
    submission.facts = d.facts.clone();
    submission.evidence = d.evidence;
    submission.gate = Some(d.gate);
    submission.gate_version = Some(d.gate_version);
    submission.receipt = Some(d.receipt);
    submission.state_after = Some(effects.status.state);
    submission.tries_after = Some(effects.status.tries);
    submission.decided_at = Some(tx.now);

    set_status(quest, effects.status);
    quest.last_facts = d.facts;
    quest.result = effects.keeps_result.then(|| submission.result.clone());
    quest.submission_id = Some(submission.id);
    quest.receipt = if effects.keeps_receipt {
        submission.receipt.clone()
    } else {
        None
    };
    quest.decided_by = effects.decided_by.map(|b| b.to_string());
    quest.repeated_failure = effects.repeated_failure;
    quest.updated_at = tx.now;
    let kept = match effects.lease {
        LeaseAfter::Renewed => {
            quest.lease_id = Some(lease.id);
            let mut kept = lease_of(lease);
            kept.expires_at =
                tx.now + chrono::Duration::seconds(i64::from(session.config.lease_seconds));
            writes.lease = Some(LeaseAfterWrite::Renewed(kept.expires_at));
            Some(kept)
        }
        LeaseAfter::Ended(end) => {
            quest.lease_id = None;
            writes.lease = Some(LeaseAfterWrite::Ended(end));
            None
        }
    };
    let mut jobs = Vec::new();
    if let (true, Some(verify)) = (effects.asks_verifiers, verify) {
        let request = d.verify.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the PASS of submission {} came without what its verifiers may see",
                submission.id
            ))
        })?;
        let request = json(&request);
        for (verifier, index, question) in verify.jobs() {
            let id = L2JobId::new();
            writes.l2_jobs.push(L2JobWrite {
                id,
                submission_id: submission.id,
                verifier: verifier.to_owned(),
                index: index as u32,
                question: question.text.clone(),
                flag_on: question.flag_on.as_str(),
                request: request.clone(),
            });
            jobs.push(id);
        }
    }
    tx.moved(EventKind::Decided, quest, Some(submission));
    Ok((kept, jobs))
}
