//! The held-decision worker: records the review page's held decisions when
//! their undo window ends, through the store's ordinary decide, and keeps why
//! one could not be (the quest was decided meanwhile, or its claim went to
//! another reviewer) for the reviewer's next page. Due decisions left by a
//! stop are recorded at the next start; a worker that dies with one taken
//! leaves it to another after the store's hold on it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::retry::{Cause, Retry, Slot, Stop};
use crate::domain::Clock;
use crate::store::Store;

/// How many due decisions one step takes.
const BATCH: u32 = 64;
/// The longest the worker sleeps without looking (another replica's held
/// decisions, or one whose worker died).
const IDLE: Duration = Duration::from_secs(1);

/// What one step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub recorded: usize,
    /// Not recorded: refused when due.
    pub dropped: usize,
}

/// Records every held decision that is due now; `None` when the server stops.
pub async fn run_once(store: &dyn Store, shutdown: &CancellationToken) -> Option<Step> {
    let retry = Retry::new("held review decision", shutdown);
    let mut slot = Slot::unpooled();
    let mut step = Step::default();
    loop {
        let due = match retry
            .until_stored(&mut slot, || store.take_due_reviews(BATCH))
            .await
        {
            Ok(due) => due,
            Err(Stop::Shutdown) => return None,
            Err(Stop::Permanent(e, _)) => {
                tracing::warn!(error = %e, "cannot take the held review decisions");
                return Some(step);
            }
        };
        let full = due.len() == BATCH as usize;
        for held in due {
            let (quest, token) = (held.quest_id, held.reviewer.token);
            let outcome = match retry
                .until_stored(&mut slot, || store.record_held_review(quest, token))
                .await
            {
                Ok(_) => {
                    step.recorded += 1;
                    continue;
                }
                Err(Stop::Shutdown) => return None,
                // Undone or gone meanwhile: nothing to say.
                Err(Stop::Permanent(_, Cause::Gone(_))) => continue,
                Err(Stop::Permanent(_, Cause::Refused(refusal))) => refusal.code().to_owned(),
                Err(Stop::Permanent(e, cause)) => {
                    tracing::warn!(%quest, error = %e, %cause, "a held review decision cannot be recorded");
                    "not_recorded".to_owned()
                }
            };
            match retry
                .until_stored(&mut slot, || store.drop_held_review(quest, token, &outcome))
                .await
            {
                Ok(()) => step.dropped += 1,
                Err(Stop::Shutdown) => return None,
                Err(Stop::Permanent(e, _)) => {
                    tracing::warn!(%quest, error = %e, "cannot keep why a held decision was not recorded");
                }
            }
        }
        if !full {
            return Some(step);
        }
    }
}

/// Records held decisions as they fall due, until `shutdown`: at once on
/// start, then at each due time, when `posted` fires (a new one), and at
/// least every [`IDLE`].
pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    posted: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        match run_once(store.as_ref(), &shutdown).await {
            None => break,
            Some(Step {
                recorded: 0,
                dropped: 0,
            }) => {}
            Some(step) => tracing::info!(
                recorded = step.recorded,
                dropped = step.dropped,
                "held review decisions fell due"
            ),
        }
        let wait = match store.next_held_review().await {
            Ok(Some(due)) => (due - clock.now()).to_std().unwrap_or_default().min(IDLE),
            Ok(None) => IDLE,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read when the next held decision is due");
                IDLE
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = posted.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
