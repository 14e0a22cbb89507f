//! The orphan scan: work that no replica holds (a PENDING submission or an
//! unanswered L2 job whose claim expired, or that was never claimed because
//! the replica that took it died) goes to this replica's runners, whose claims
//! make sure it runs once. A store that one process alone uses has no orphans.
//! The scan runs on replicas with workers only.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

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
            Job::Gate(id) => gates.enqueue(id),
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
                        if let (EventKind::Submitted, Some(Phase::Checking), Some(id)) = (e.kind, e.phase, e.submission_id) {
                            gates.enqueue(id);
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
