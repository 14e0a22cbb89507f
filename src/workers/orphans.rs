//! The orphan scan: work that no replica holds (a PENDING submission or an
//! unanswered L2 job whose claim expired, or that was never claimed because
//! the replica that took it died) goes to this replica's runners, whose claims
//! make sure it runs once. A store that one process alone uses has no orphans.
//! The scan runs on replicas with workers only.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::domain::ids::SubmissionId;
use crate::domain::{EventKind, Phase, QuestEvent};

use crate::store::{Job, Store, StoreError};
use crate::workers::{GateRunner, VerifierRunner};

/// How old unclaimed work must be before it counts as orphaned: the replica
/// that recorded it claims it within moments.
pub const GRACE_SECONDS: u32 = 10;

/// One scan: the number of jobs handed to the runners.
pub async fn run_once(
    store: &dyn Store,
    gates: &GateRunner,
    verifiers: &VerifierRunner,
) -> Result<usize, StoreError> {
    let jobs = store.orphaned_jobs(GRACE_SECONDS).await?;
    for job in &jobs {
        match *job {
            Job::Gate(id) => gates.enqueue_found(id),
            Job::Verify(id) => verifiers.enqueue([id]),
            // Re-checks are found by their markers, not by the orphan scan.
            Job::Recheck(..) => {}
        }
    }
    Ok(jobs.len())
}

/// Scans every `every` until `shutdown` fires. Between scans, a submission
/// another replica recorded PENDING (it may run no workers) is queued as soon
/// as its event arrives; the claims keep it from running twice.
pub async fn run(
    store: Arc<dyn Store>,
    gates: GateRunner,
    verifiers: VerifierRunner,
    mut events: broadcast::Receiver<QuestEvent>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            event = events.recv() => {
                match event {
                    Ok(e) => {
                        for id in waiting_checks(e, &mut events) {
                            gates.enqueue_found(id);
                        }
                    }
                    // Missed events are found by the next scan.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        match run_once(store.as_ref(), &gates, &verifiers).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "work of another replica taken over"),
            Err(e) => tracing::warn!(error = %e, "orphan scan failed"),
        }
    }
}

/// The submissions that wait for their gate among `first` and the events
/// already queued behind it. A submission a gate decided in its own request
/// (its `decided` event comes with its `submitted` one, from one commit) is
/// not one: claiming it only to find it decided would cost two commits.
fn waiting_checks(
    first: QuestEvent,
    events: &mut broadcast::Receiver<QuestEvent>,
) -> Vec<SubmissionId> {
    let mut waiting: Vec<SubmissionId> = Vec::new();
    let mut next = Some(first);
    while let Some(e) = next {
        match (e.kind, e.phase, e.submission_id) {
            (EventKind::Submitted, Some(Phase::Checking), Some(id)) => waiting.push(id),
            (EventKind::Decided, _, Some(id)) => waiting.retain(|w| *w != id),
            _ => {}
        }
        next = events.try_recv().ok();
    }
    waiting
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::State;
    use crate::domain::ids::SessionId;

    fn event(kind: EventKind, phase: Option<Phase>, id: SubmissionId) -> QuestEvent {
        QuestEvent {
            kind,
            session_id: SessionId::new(),
            quest_id: None,
            submission_id: Some(id),
            state: Some(State::Todo),
            phase,
            verdict: None,
            mark: None,
            at: chrono::Utc::now(),
        }
    }

    #[test]
    fn a_check_decided_in_its_own_commit_is_not_handed_to_the_gate_runner() {
        let (tx, mut rx) = broadcast::channel(16);
        let (inline, waiting) = (SubmissionId::new(), SubmissionId::new());
        let first = event(EventKind::Submitted, Some(Phase::Checking), inline);
        for e in [
            event(EventKind::Decided, None, inline),
            event(EventKind::Submitted, Some(Phase::Checking), waiting),
        ] {
            tx.send(e).unwrap();
        }
        assert_eq!(waiting_checks(first, &mut rx), [waiting]);
        assert!(rx.try_recv().is_err(), "every queued event was read");
    }
}
