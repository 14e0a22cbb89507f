//! Submissions and verdicts: a submit records a result (PENDING, or with the
//! verdict of a gate that ran in the request), and the gate runner's verdict
//! decides a PENDING one. Each locks its quest first, so two replicas acting
//! on one quest take turns, and every write is fenced by the checked lease.

use std::sync::Arc;

use crate::domain::ids::{L2JobId, LeaseId, QuestId, SessionId, SubmissionId};

use super::codec::*;
use super::saves::{end_leases, insert_l2_jobs, renew_leases, save_quests};
use super::tx::{Tx, expect_rows};
use crate::domain::EventKind;
use crate::domain::work::{self, LeaseFacts};
use crate::store::decision::{self, L2JobWrite, LeaseWrite};
use crate::store::{
    Decided, GateDecision, LeaseRow, QuestRow, SessionRow, StoreError, SubmissionRow,
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
    let Some(lease) = decision::checking_lease(&quest, &submission, lease)? else {
        return Ok(Decided {
            submission,
            quest,
            l2_jobs: Vec::new(),
        });
    };
    let s = tx.session(quest.session_id).await?;
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
    writes.apply(tx).await?;
    Ok(Decided {
        submission,
        quest,
        l2_jobs,
    })
}

/// What the verdicts of one transaction write besides their submissions:
/// the quests (each fenced by the lease it was checked with), lease ends and
/// renewals, L2 jobs; each kind one statement.
#[derive(Default)]
pub struct Writes {
    pub quests: Vec<(QuestRow, LeaseId)>,
    pub renewals: Vec<(LeaseId, chrono::DateTime<chrono::Utc>)>,
    pub ends: Vec<(LeaseId, work::LeaseEnd)>,
    pub l2_jobs: Vec<L2JobWrite>,
}

impl Writes {
    /// Adds what another request wrote.
    pub fn extend(&mut self, other: Writes) {
        self.quests.extend(other.quests);
        self.renewals.extend(other.renewals);
        self.ends.extend(other.ends);
        self.l2_jobs.extend(other.l2_jobs);
    }

    pub async fn apply(self, tx: &mut Tx) -> Result<(), StoreError> {
        let quests: Vec<(&QuestRow, Option<LeaseId>)> =
            self.quests.iter().map(|(q, l)| (q, Some(*l))).collect();
        save_quests(tx, &quests).await?;
        end_leases(tx, &self.ends).await?;
        renew_leases(tx, &self.renewals).await?;
        insert_l2_jobs(tx, &self.l2_jobs).await
    }
}

/// Applies `d` to `quest` through `submission` (PENDING until now), as
/// [`decision::decide`] says, and gathers the writes (the quest's among
/// them). Returns the lease the holder keeps, if any, and the L2 jobs created.
pub fn decide(
    tx: &mut Tx,
    writes: &mut Writes,
    session: &SessionRow,
    quest: &mut QuestRow,
    submission: &mut SubmissionRow,
    lease: &LeaseFacts,
    d: GateDecision,
) -> Result<(Option<LeaseRow>, Vec<L2JobId>), StoreError> {
    let decided = decision::decide(tx.now, session, quest, submission, lease, d)?;
    match decided.lease {
        LeaseWrite::Renewed(id, until) => writes.renewals.push((id, until)),
        LeaseWrite::Ended(id, end) => writes.ends.push((id, end)),
    }
    let jobs = decided.l2_jobs.iter().map(|j| j.id).collect();
    writes.l2_jobs.extend(decided.l2_jobs);
    writes.quests.push((quest.clone(), lease.id));
    tx.moved(EventKind::Decided, quest, Some(submission));
    Ok((decided.kept, jobs))
}
