//! The slots of running exports: a fixed number per server, at most
//! [`PER_TOKEN`] of them per token, so that one viewer reading slowly cannot
//! lock everyone (the admin included) out of exports. A slot lives as long as
//! the work does: a client that goes away frees it as soon as the work
//! notices, and a streamed export whose body nobody polls for the idle time
//! is ended by a watchdog, which frees its slot without waiting for a poll
//! that may never come.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::ExportFormat;
use crate::domain::ids::TokenId;
use crate::store::StoreError;

/// Exports one token may run at once.
pub const PER_TOKEN: usize = 2;
/// How long a streamed export may go unread before it is ended, unless the
/// server is told otherwise (`--export-idle-seconds`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);
/// How long a refused export should wait before it asks again.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot of the server is taken.
    Server { capacity: usize },
    /// The token runs as many exports as one token may.
    Token,
}

/// The slots of running exports, and where XLSX files are built.
#[derive(Debug, Clone)]
pub struct Exports {
    slots: Arc<Semaphore>,
    capacity: usize,
    per_token: Arc<Mutex<HashMap<TokenId, usize>>>,
    idle: Duration,
    temp_dir: Option<std::path::PathBuf>,
}

impl Exports {
    /// At most `capacity` exports at once; XLSX files are built in `temp_dir`
    /// (the system's when `None`).
    pub fn new(capacity: usize, temp_dir: Option<std::path::PathBuf>) -> Exports {
        let capacity = capacity.max(1);
        Exports {
            slots: Arc::new(Semaphore::new(capacity)),
            capacity,
            per_token: Arc::default(),
            idle: DEFAULT_IDLE,
            temp_dir,
        }
    }

    /// Streamed exports unread for `idle` are ended.
    pub fn idle_after(mut self, idle: Duration) -> Exports {
        self.idle = idle;
        self
    }

    /// A slot for `token`'s export in `format`, or why there is none.
    pub fn try_slot(&self, format: ExportFormat, token: TokenId) -> Result<Slot, NoSlot> {
        let mut counts = self
            .per_token
            .lock()
            .expect("the counts' lock is never poisoned");
        let held = counts.entry(token).or_default();
        if *held >= PER_TOKEN {
            return Err(NoSlot::Token);
        }
        let permit = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| NoSlot::Server {
                capacity: self.capacity,
            })?;
        *held += 1;
        metrics::gauge!("quest_exports_running").increment(1.0);
        Ok(Slot {
            _permit: permit,
            token,
            counts: self.per_token.clone(),
            format: format.media_type().1,
            finished: false,
        })
    }

    /// How long a streamed export may go unread.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// Where XLSX files are built.
    pub fn temp_dir(&self) -> Option<&std::path::Path> {
        self.temp_dir.as_deref()
    }
}

impl Default for Exports {
    fn default() -> Exports {
        Exports::new(4, None)
    }
}

/// One running export. Dropped before [`Slot::finish`], it counts as
/// cancelled (`quest_exports_cancelled_total{format}`): its client went away.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    token: TokenId,
    counts: Arc<Mutex<HashMap<TokenId, usize>>>,
    format: &'static str,
    finished: bool,
}

impl Slot {
    /// Marks the export as having run to its end.
    pub fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .counts
            .lock()
            .expect("the counts' lock is never poisoned");
        if let Some(held) = counts.get_mut(&self.token) {
            *held -= 1;
            if *held == 0 {
                counts.remove(&self.token);
            }
        }
        metrics::gauge!("quest_exports_running").decrement(1.0);
        if !self.finished {
            metrics::counter!("quest_exports_cancelled_total", "format" => self.format)
                .increment(1);
        }
    }
}

/// A slot that the stream using it and a watchdog share: whichever comes
/// first (the last page, or `idle` without a poll) takes it.
#[derive(Debug)]
pub struct SharedSlot(Mutex<Shared>);

#[derive(Debug)]
enum Shared {
    Held(Slot),
    Finished,
    /// The watchdog took it: nobody read the export for the idle time.
    Ended,
}

impl SharedSlot {
    /// Marks the export finished and frees its slot; false when the
    /// watchdog took it first (the export was ended).
    pub fn finish(&self) -> bool {
        let mut state = self.0.lock().expect("never poisoned");
        match std::mem::replace(&mut *state, Shared::Finished) {
            Shared::Held(mut slot) => {
                slot.finish();
                true
            }
            Shared::Finished => true,
            Shared::Ended => {
                *state = Shared::Ended;
                false
            }
        }
    }

    /// Whether the watchdog ended the export.
    fn ended(&self) -> bool {
        matches!(*self.0.lock().expect("never poisoned"), Shared::Ended)
    }

    /// Ends the export if it still holds its slot; true if it did.
    fn end(&self) -> bool {
        let mut state = self.0.lock().expect("never poisoned");
        if matches!(*state, Shared::Held(_)) {
            *state = Shared::Ended; // drops the slot: counted as cancelled
            return true;
        }
        false
    }
}

/// Why a streamed export stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Nobody read it for the idle time; its slot is free.
    #[error("the export was not read for {} s and was ended", .0.as_secs())]
    Idle(Duration),
}

/// `pages`, made from a slot it shares with a watchdog that ends it when
/// nobody polls it for `idle`: the slot is freed then, and the next poll (if
/// any) is an error, so that a cut export is never taken for a whole one.
pub fn end_when_idle<S>(
    slot: Slot,
    idle: Duration,
    pages: impl FnOnce(Arc<SharedSlot>) -> S,
) -> IdleEnding<S>
where
    S: Stream<Item = Result<Bytes, StoreError>>,
{
    let shared = Arc::new(SharedSlot(Mutex::new(Shared::Held(slot))));
    let last_poll = Arc::new(Mutex::new(Instant::now()));
    let watchdog = tokio::spawn({
        let (shared, last_poll) = (shared.clone(), last_poll.clone());
        async move {
            loop {
                let due = *last_poll.lock().expect("never poisoned") + idle;
                if Instant::now() >= due {
                    if shared.end() {
                        tracing::info!(
                            idle_seconds = idle.as_secs(),
                            "an export nobody read was ended"
                        );
                    }
                    return;
                }
                tokio::time::sleep_until(due).await;
            }
        }
    });
    IdleEnding {
        pages: Box::pin(pages(shared.clone())),
        shared,
        last_poll,
        idle,
        watchdog,
        done: false,
    }
}

/// The stream [`end_when_idle`] makes.
pub struct IdleEnding<S> {
    pages: Pin<Box<S>>,
    shared: Arc<SharedSlot>,
    last_poll: Arc<Mutex<Instant>>,
    idle: Duration,
    watchdog: tokio::task::JoinHandle<()>,
    done: bool,
}

impl<S> Stream for IdleEnding<S>
where
    S: Stream<Item = Result<Bytes, StoreError>>,
{
    type Item = Result<Bytes, StreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        *self.last_poll.lock().expect("never poisoned") = Instant::now();
        if self.shared.ended() {
            self.done = true;
            return Poll::Ready(Some(Err(StreamError::Idle(self.idle))));
        }
        let next = self.pages.as_mut().poll_next(cx);
        if let Poll::Ready(None | Some(Err(_))) = next {
            self.done = true;
        }
        next.map(|item| item.map(|page| page.map_err(StreamError::from)))
    }
}

impl<S> Drop for IdleEnding<S> {
    fn drop(&mut self) {
        self.watchdog.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn exports() -> Exports {
        Exports::new(3, None).idle_after(Duration::from_secs(30))
    }

    #[test]
    fn a_token_runs_at_most_two_exports_and_others_still_get_slots() {
        let exports = exports();
        let (viewer, admin) = (TokenId::new(), TokenId::new());
        let first = exports.try_slot(ExportFormat::Csv, viewer).unwrap();
        let _second = exports.try_slot(ExportFormat::Csv, viewer).unwrap();
        assert_eq!(
            exports.try_slot(ExportFormat::Csv, viewer).unwrap_err(),
            NoSlot::Token
        );
        let _admins = exports.try_slot(ExportFormat::Jsonl, admin).unwrap();
        assert_eq!(
            exports
                .try_slot(ExportFormat::Csv, TokenId::new())
                .unwrap_err(),
            NoSlot::Server { capacity: 3 }
        );
        drop(first);
        assert!(exports.try_slot(ExportFormat::Csv, viewer).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_export_nobody_polls_is_ended_and_its_slot_freed() {
        let exports = exports();
        let viewer = TokenId::new();
        let slot = exports.try_slot(ExportFormat::Csv, viewer).unwrap();
        let mut stream = end_when_idle(slot, exports.idle(), |_slot| {
            futures_util::stream::repeat_with(|| Ok(Bytes::from_static(b"row\n")))
        });
        assert!(stream.next().await.unwrap().is_ok());
        let _other = exports.try_slot(ExportFormat::Csv, viewer).unwrap();
        assert_eq!(
            exports.try_slot(ExportFormat::Csv, viewer).unwrap_err(),
            NoSlot::Token
        );
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(stream.next().await.unwrap().is_ok(), "polled in time");
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert!(
            exports.try_slot(ExportFormat::Csv, viewer).is_ok(),
            "the unread export's slot is free without another poll"
        );
        assert!(matches!(
            stream.next().await,
            Some(Err(StreamError::Idle(_)))
        ));
        assert!(stream.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_export_that_ran_to_its_end_is_not_ended_by_the_watchdog() {
        let exports = exports();
        let slot = exports.try_slot(ExportFormat::Csv, TokenId::new()).unwrap();
        let mut stream = end_when_idle(slot, exports.idle(), |slot| {
            futures_util::stream::once(async move {
                assert!(slot.finish());
                Ok(Bytes::from_static(b"last page\n"))
            })
        });
        assert!(stream.next().await.unwrap().is_ok());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(stream.next().await.is_none(), "the end, not an error");
    }
}
