//! The lease sweeper: returns expired leases to `open` (or ends their quests
//! after `max_lapses`). Claims sweep their own session too, so correctness does
//! not depend on this loop; it keeps `status` honest between claims.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError};

/// One sweep: the number of leases returned.
pub async fn run_once(store: &dyn Store) -> Result<u64, StoreError> {
    store.sweep_expired().await
}

/// Sweeps every `every` until `shutdown` fires.
pub async fn run(store: Arc<dyn Store>, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match run_once(store.as_ref()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(swept = n, "expired leases returned"),
            Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
        }
    }
}
