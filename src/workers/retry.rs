//! The one retry policy of every worker: what a store error means for the
//! job that met it ([`classify`]), and [`Retry::until_stored`], which waits
//! out transient errors with back-off and hands permanent ones back.
//!
//! - *Permanent*: retrying the same write cannot succeed. The database
//!   refused its data (SQLSTATE class 22, e.g. 22P05 or 22021, and 54000),
//!   a rule refused it (a [`Refusal`], the ratchet's included), or what it
//!   acts on is gone. The worker decides what then: the gate runner records
//!   the verdict again with its texts cleaned, then a REVIEW naming the cause.
//! - *Transient*: everything else (a lost connection, an unavailable writer,
//!   a timeout). Retried without end, 100 ms doubling to 30 s, so that an
//!   outage never turns good work into REVIEW; only shutdown stops it.
//!
//! The seam for scheduling: a job runs under a worker permit taken from a
//! [`Permits`] source, and [`Slot`] gives the permit back for each wait and
//! takes one again before the next attempt, so that a stalled job holds no
//! worker. Today's source is a plain semaphore ([`Pool`]); a fair scheduler
//! of queued checks replaces it by implementing [`Permits`] (per job, it can
//! know the job's session and token), without touching the classification.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::domain::work::Refusal;
use crate::store::StoreError;

/// The first pause after a transient store error.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest pause between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// What retrying a failed store call can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// Nothing: the same call fails again. Says why, for a fact or a log.
    Permanent(Cause),
    /// It may succeed once the database is back.
    Transient,
}

/// Why a store call failed for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The database refused the data, with this SQLSTATE.
    Unstorable(String),
    /// A rule refused the write.
    Refused(Refusal),
    /// What the call acts on does not exist.
    Gone(&'static str),
}

impl Cause {
    /// Whether the database refused the data itself (the permanent errors
    /// of the containment rules: SQLSTATE class 22, 54000, a row the
    /// ratchet refused), so that the same work cleaned, or a REVIEW naming
    /// the cause, may be stored instead. A refusal of the domain's (the
    /// state forbids the write) or a job that is gone is not.
    pub fn about_the_data(&self) -> bool {
        matches!(
            self,
            Cause::Unstorable(_) | Cause::Refused(Refusal::Ratchet(_))
        )
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Unstorable(sqlstate) => write!(f, "SQLSTATE {sqlstate}"),
            Cause::Refused(refusal) => write!(f, "refused: {} ({refusal})", refusal.code()),
            Cause::Gone(what) => write!(f, "no such {what}"),
        }
    }
}

/// Whether retrying a store call that failed with `e` can help.
pub fn classify(e: &StoreError) -> Class {
    match e {
        StoreError::Refused(refusal) => Class::Permanent(Cause::Refused(refusal.clone())),
        StoreError::NotFound(what) => Class::Permanent(Cause::Gone(what)),
        StoreError::Database(sqlx::Error::Database(d)) => match d.code() {
            Some(code) if unstorable(&code) => Class::Permanent(Cause::Unstorable(code.into())),
            _ => Class::Transient,
        },
        _ => Class::Transient,
    }
}

/// SQLSTATE class 22 (data exception: bad encoding, a NUL in text, a value
/// out of range) and 54000 (program limit exceeded: a row or value too big).
fn unstorable(sqlstate: &str) -> bool {
    sqlstate.starts_with("22") || sqlstate == "54000"
}

/// The pauses between attempts: [`FIRST_DELAY`] doubling up to [`MAX_DELAY`].
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST_DELAY }
    }
}

impl Iterator for Backoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(MAX_DELAY);
        Some(delay)
    }
}

/// A worker permit: while a job holds one, it counts against its pool.
pub struct Permit(#[expect(dead_code, reason = "held for its Drop")] Box<dyn Send + Sync>);

impl Permit {
    /// A permit that gives itself back when `guard` is dropped.
    pub fn new(guard: impl Send + Sync + 'static) -> Permit {
        Permit(Box::new(guard))
    }
}

/// Where a job's worker permits come from. `None`: the source is closed
/// (the server stops).
pub trait Permits: Send + Sync {
    /// Waits for a permit.
    fn acquire(&self) -> BoxFuture<'_, Option<Permit>>;
}

/// A plain pool of `n` workers, first come first served.
#[derive(Clone)]
pub struct Pool(Arc<Semaphore>);

impl Pool {
    /// A pool of `workers` permits.
    pub fn new(workers: usize) -> Pool {
        Pool(Arc::new(Semaphore::new(workers)))
    }

    /// Permits free now (for tests and metrics).
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

impl Permits for Pool {
    fn acquire(&self) -> BoxFuture<'_, Option<Permit>> {
        Box::pin(async move { self.0.clone().acquire_owned().await.ok().map(Permit::new) })
    }
}

/// A job's hold on a worker: the permit it runs under, given back for each
/// wait and taken again before the next attempt. A slot without a source
/// (work that runs under no pool) just waits.
pub struct Slot<'a> {
    source: Option<&'a dyn Permits>,
    permit: Option<Permit>,
}

impl<'a> Slot<'a> {
    /// A slot holding `permit`, taken from `source`.
    pub fn holding(source: &'a dyn Permits, permit: Permit) -> Slot<'a> {
        Slot {
            source: Some(source),
            permit: Some(permit),
        }
    }

    /// A slot of work that holds no permit.
    pub fn unpooled() -> Slot<'a> {
        Slot {
            source: None,
            permit: None,
        }
    }

    /// Takes a permit from `source` for the work ahead; `None` when the
    /// source is closed.
    pub async fn take(source: &'a dyn Permits) -> Option<Slot<'a>> {
        Some(Slot::holding(source, source.acquire().await?))
    }

    /// Gives the permit back, waits `delay` (or until shutdown), and takes
    /// one again: whether the job may go on (`false`: shutdown).
    async fn wait(&mut self, delay: Duration, shutdown: &CancellationToken) -> bool {
        let had = self.permit.take().is_some();
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
        let (true, Some(source)) = (had, self.source) else {
            return true;
        };
        tokio::select! {
            _ = shutdown.cancelled() => false,
            permit = source.acquire() => {
                self.permit = permit;
                self.permit.is_some()
            }
        }
    }
}

/// Why [`Retry::until_stored`] gave up.
#[derive(Debug)]
pub enum Stop {
    /// The server stops: the job is left as it is, for the next start.
    Shutdown,
    /// Retrying cannot help; the error and why.
    Permanent(StoreError, Cause),
}

/// The retry policy of one job, logged under its name.
pub struct Retry<'a> {
    job: &'a str,
    shutdown: &'a CancellationToken,
}

impl<'a> Retry<'a> {
    /// The policy for the job named `job` (for logs), until `shutdown`.
    pub fn new(job: &'a str, shutdown: &'a CancellationToken) -> Retry<'a> {
        Retry { job, shutdown }
    }

    /// Runs `call` until it succeeds or fails permanently; a transient
    /// failure is waited out ([`Backoff`]), with `slot`'s permit given
    /// back during each wait.
    pub async fn until_stored<T, F, Fut>(&self, slot: &mut Slot<'_>, mut call: F) -> Result<T, Stop>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut delays = Backoff::default();
        loop {
            let e = match call().await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            match classify(&e) {
                Class::Permanent(cause) => return Err(Stop::Permanent(e, cause)),
                Class::Transient => {
                    let delay = delays.next().unwrap_or(MAX_DELAY);
                    metrics::counter!("quest_store_retries_total").increment(1);
                    tracing::warn!(job = self.job, error = %e, retry_in_ms = delay.as_millis() as u64, "the store failed; retrying");
                    if !slot.wait(delay, self.shutdown).await {
                        return Err(Stop::Shutdown);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
