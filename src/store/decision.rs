//! The row effects of a gate's decision, written once for both engines: a
//! PENDING submission and its quest filled in as [`work::on_verdict`] says,
//! with the lease it renews or ends and the L2 questions it asks. Nothing
//! here knows SQL; each engine writes what [`decide`] returns its own way.

use chrono::{DateTime, Utc};

use crate::domain::ids::{L2JobId, LeaseId, QuestId, SessionId, SubmissionId};
use crate::domain::work::{self, Before, LeaseAfter, LeaseEnd, LeaseFacts, Limits};
use crate::domain::{Phase, QuestStatus, SubmissionVerdict};
use crate::store::common::{lease_of, renewal, set_status, status_of, verdict_facts};
use crate::store::{GateDecision, LeaseRow, QuestRow, SessionRow, StoreError, SubmissionRow};

/// An L2 question to ask about a passed submission.
pub struct L2JobWrite {
    pub id: L2JobId,
    pub submission_id: SubmissionId,
    pub quest_id: QuestId,
    pub session_id: SessionId,
    pub verifier: String,
    pub index: u32,
    pub question: String,
    pub flag_on: &'static str,
    /// What the verifier may see, as JSON text.
    pub request: String,
}

/// What becomes of the holder's lease.
pub enum LeaseWrite {
    /// Renewed until then (the holder may fix a FAIL).
    Renewed(LeaseId, DateTime<Utc>),
    Ended(LeaseId, LeaseEnd),
}

/// A decision's writes besides the two rows it filled in.
pub struct Decided {
    /// The quest's status before the decision.
    pub before: QuestStatus,
    /// The lease the holder keeps, if any.
    pub kept: Option<LeaseRow>,
    pub lease: LeaseWrite,
    pub l2_jobs: Vec<L2JobWrite>,
}

/// The lease under which a queued verdict applies to `submission`: `None`
/// when the submission was decided already (its decision stands, and is
/// answered as it is), else the lease its quest is checking it under.
pub fn checking_lease(
    quest: &QuestRow,
    submission: &SubmissionRow,
    lease: Option<LeaseFacts>,
) -> Result<Option<LeaseFacts>, StoreError> {
    if submission.verdict != SubmissionVerdict::Pending {
        return Ok(None);
    }
    let lease = lease.filter(|l| quest.lease_id == Some(l.id) && l.id == submission.lease_id);
    match (lease, quest.phase) {
        (Some(lease), Some(Phase::Checking)) => Ok(Some(lease)),
        _ => Err(StoreError::Corrupt(format!(
            "pending submission {} whose quest is not checking it",
            submission.id
        ))),
    }
}

/// Applies `d` to `quest` through `submission` (PENDING until now), at `now`.
pub fn decide(
    now: DateTime<Utc>,
    session: &SessionRow,
    quest: &mut QuestRow,
    submission: &mut SubmissionRow,
    lease: &LeaseFacts,
    d: GateDecision,
) -> Result<Decided, StoreError> {
    let before = status_of(quest);
    let verify = session.config.verify.as_ref();
    let facts = verdict_facts(submission, d.verdict, d.facts);
    let effects = work::on_verdict(
        Before {
            status: before,
            last_facts: &quest.last_facts,
            decided_before: quest.submission_id.is_some(),
        },
        d.verdict,
        &facts,
        Limits {
            max_tries: session.config.max_tries,
            verify: verify.is_some(),
        },
    )?;
    submission.verdict = d.verdict.into();
    submission.facts = facts.clone();
    submission.evidence = d.evidence;
    submission.gate = Some(d.gate);
    submission.gate_version = Some(d.gate_version);
    submission.receipt = Some(d.receipt);
    submission.state_after = Some(effects.status.state);
    submission.tries_after = Some(effects.status.tries);
    submission.decided_at = Some(now);

    set_status(quest, effects.status);
    quest.last_facts = facts;
    quest.result = effects.keeps_result.then(|| submission.result.clone());
    quest.submission_id = Some(submission.id);
    quest.receipt = if effects.keeps_receipt {
        submission.receipt.clone()
    } else {
        None
    };
    quest.decided_by = effects.decided_by.map(|b| b.to_string());
    quest.repeated_failure = effects.repeated_failure;
    quest.updated_at = now;
    let (kept, lease_write) = match effects.lease {
        LeaseAfter::Renewed => {
            quest.lease_id = Some(lease.id);
            let mut kept = lease_of(lease);
            kept.expires_at = renewal(lease, session, now);
            let write = LeaseWrite::Renewed(lease.id, kept.expires_at);
            (Some(kept), write)
        }
        LeaseAfter::Ended(end) => {
            quest.lease_id = None;
            (None, LeaseWrite::Ended(lease.id, end))
        }
    };
    let mut l2_jobs = Vec::new();
    if let (true, Some(verify)) = (effects.asks_verifiers, verify) {
        let request = d.verify.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the PASS of submission {} came without what its verifiers may see",
                submission.id
            ))
        })?;
        let request = serde_json::to_string(&request).expect("plain data serialises");
        for (verifier, index, question) in verify.jobs() {
            l2_jobs.push(L2JobWrite {
                id: L2JobId::new(),
                submission_id: submission.id,
                quest_id: quest.id,
                session_id: quest.session_id,
                verifier: verifier.to_owned(),
                index: index as u32,
                question: question.text.clone(),
                flag_on: question.flag_on.as_str(),
                request: request.clone(),
            });
        }
    }
    Ok(Decided {
        before,
        kept,
        lease: lease_write,
        l2_jobs,
    })
}
