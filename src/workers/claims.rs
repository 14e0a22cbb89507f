//! Holding a job claim while the job runs. A claim is short
//! ([`CLAIM_SECONDS`]) and renewed every [`RENEW_EVERY`] while its gate or
//! LLM call is in flight, so that the jobs of a replica that died are taken
//! over by a survivor's orphan scan within seconds. A renewal that fails
//! (the claim lapsed; someone else may own the job now) stops the work, and
//! the holder records nothing: before recording, it renews once more as a
//! fence. The store's ratchet (a submission is decided once, an L2 job is
//! answered once) is the second lock.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{JobClaim, Store, StoreError};

/// How long a job claim lasts unless renewed.
pub const CLAIM_SECONDS: u32 = 15;
/// How often a held claim is renewed: a third of its length, so that one
/// failed renewal (a slow moment of the database) does not lose it.
pub const RENEW_EVERY: Duration = Duration::from_secs(CLAIM_SECONDS as u64 / 3);

/// What came of work done under a claim.
#[derive(Debug, PartialEq, Eq)]
pub enum Held<T> {
    /// The work finished while the claim lived.
    Done(T),
    /// The claim lapsed or was taken over first: the work was dropped.
    Lost,
}

/// Runs `work` while renewing `claim`; stops it as soon as a renewal is
/// refused, or when no renewal succeeded for a whole claim length (the store
/// failing), since by then another holder may have taken the job.
pub async fn hold<T>(
    store: &dyn Store,
    claim: &JobClaim,
    work: impl Future<Output = T>,
) -> Held<T> {
    tokio::select! {
        done = work => Held::Done(done),
        () = renew_until_lost(store, claim) => Held::Lost,
    }
}

/// The fence before recording a job's result: `record` runs only if a
/// renewal says `claim` still lives, which leaves it a whole claim length to
/// finish in; `None` (nothing recorded) when the claim is lost.
pub async fn record_if_held<T>(
    store: &dyn Store,
    claim: &JobClaim,
    record: impl Future<Output = Result<T, StoreError>>,
) -> Result<Option<T>, StoreError> {
    if !store.renew_job(claim, CLAIM_SECONDS).await? {
        return Ok(None);
    }
    record.await.map(Some)
}

async fn renew_until_lost(store: &dyn Store, claim: &JobClaim) {
    let lapses = Duration::from_secs(u64::from(CLAIM_SECONDS));
    let mut renewed = Instant::now();
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        match store.renew_job(claim, CLAIM_SECONDS).await {
            Ok(true) => renewed = Instant::now(),
            Ok(false) => {
                tracing::warn!(job = ?claim.job, "job claim lost: another holder may run it now");
                return;
            }
            Err(e) if renewed.elapsed() + RENEW_EVERY >= lapses => {
                tracing::warn!(job = ?claim.job, error = %e, "job claim not renewed in time: giving the job up");
                return;
            }
            Err(e) => {
                tracing::warn!(job = ?claim.job, error = %e, "job claim renewal failed; retrying")
            }
        }
    }
}
