//! The gate workers of one replica, shared by the gate runner's queued
//! checks and the re-checker, handed out by the fair policy of
//! [`crate::domain::fair`]: round-robin over sessions and their tokens, caps
//! while others wait, re-checks a class of their own.
//!
//! Concurrency: one lock around the policy's bookkeeping, never held while
//! a job runs or starts. A job waits in the policy as a boxed closure; one
//! dispatcher task takes the picks under the lock and calls them after it,
//! with a [`Permit`] whose drop (the job ended, or gave its worker back for a
//! wait) counts the worker free and wakes the dispatcher. A job that gave
//! its worker back asks again through [`JobPermits`] (the [`Permits`] seam of
//! the retry policy) and waits in the same policy, ahead of its owner's
//! queued jobs. At shutdown the dispatcher closes the scheduler: what waits
//! is dropped (a PENDING submission stays PENDING for the next start, a
//! marked re-check stays marked) and nothing more is queued.

use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::domain::fair::{Fair, Owner};
use crate::workers::retry::{Permit, Permits};

/// What a waiting job does with its permit once the policy picks it.
type Start = Box<dyn FnOnce(Permit) + Send>;

/// The shared, fair pool of gate workers.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
}

struct State {
    fair: Fair<Start>,
    closed: bool,
}

impl Scheduler {
    /// A pool of `workers` workers; it closes when `shutdown` fires.
    pub fn start(workers: usize, shutdown: CancellationToken) -> Scheduler {
        let scheduler = Scheduler {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    fair: Fair::new(workers),
                    closed: shutdown.is_cancelled(),
                }),
                wake: Notify::new(),
            }),
        };
        tokio::spawn(scheduler.clone().dispatch(shutdown));
        scheduler
    }

    /// Queues a job of `owner`: `start` gets its permit once the policy
    /// picks it, and should spawn the job's task with it. `false` when the
    /// scheduler is closed: the job is not queued.
    pub fn queue(&self, owner: Owner, start: impl FnOnce(Permit) + Send + 'static) -> bool {
        self.put(owner, Box::new(start), false)
    }

    /// Where the job of `owner` takes its permits again after a wait.
    pub fn permits(&self, owner: Owner) -> JobPermits {
        JobPermits {
            scheduler: self.clone(),
            owner,
        }
    }

    /// Workers busy now and jobs waiting (for tests and metrics).
    pub fn load(&self) -> (usize, usize) {
        let state = self.state();
        (state.fair.running(), state.fair.waiting())
    }

    fn put(&self, owner: Owner, start: Start, ahead: bool) -> bool {
        {
            let mut state = self.state();
            if state.closed {
                return false;
            }
            if ahead {
                state.fair.push_front(owner, start);
            } else {
                state.fair.push(owner, start);
            }
        }
        self.shared.wake.notify_one();
        true
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn dispatch(self, shutdown: CancellationToken) {
        loop {
            let picked: Vec<(Owner, Start)> = {
                let mut state = self.state();
                std::iter::from_fn(|| state.fair.pick()).collect()
            };
            for (owner, start) in picked {
                start(Permit::new(Worker {
                    shared: self.shared.clone(),
                    owner,
                }));
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.shared.wake.notified() => {}
            }
        }
        let dropped = {
            let mut state = self.state();
            state.closed = true;
            state.fair.drain()
        };
        // Outside the lock: a job's closure may hold what takes it.
        drop(dropped);
    }
}

/// A busy worker; dropped, it is free for the next pick.
struct Worker {
    shared: Arc<Shared>,
    owner: Owner,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fair
            .done(self.owner);
        self.shared.wake.notify_one();
    }
}

/// The permits of one job of one owner: each [`Permits::acquire`] waits in
/// the fair policy, ahead of the owner's queued jobs.
pub struct JobPermits {
    scheduler: Scheduler,
    owner: Owner,
}

impl Permits for JobPermits {
    fn acquire(&self) -> BoxFuture<'_, Option<Permit>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            // A waiter that is gone by its turn drops the permit at once.
            let start: Start = Box::new(move |permit| drop(tx.send(permit)));
            if !self.scheduler.put(self.owner, start, true) {
                return None;
            }
            rx.await.ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{SessionId, TokenId};

    fn check() -> Owner {
        Owner::Check {
            session: SessionId::new(),
            token: TokenId::new(),
        }
    }

    /// Queues a job of `owner` that reports its start on `started` and
    /// holds its worker until `release` says so.
    fn blocked(
        scheduler: &Scheduler,
        owner: Owner,
        name: u32,
        started: &tokio::sync::mpsc::UnboundedSender<u32>,
        release: &Arc<tokio::sync::Semaphore>,
    ) {
        let (started, release) = (started.clone(), release.clone());
        assert!(scheduler.queue(owner, move |permit| {
            tokio::spawn(async move {
                let _ = started.send(name);
                let _held = release.acquire().await.map(|p| p.forget());
                drop(permit);
            });
        }));
    }

    #[tokio::test]
    async fn a_freed_worker_goes_to_the_session_that_waits_not_to_the_one_that_held_them_all() {
        let scheduler = Scheduler::start(2, CancellationToken::new());
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let (a, b) = (check(), check());
        for name in 0..10 {
            blocked(&scheduler, a, name, &started_tx, &release);
        }
        assert_eq!(
            [started.recv().await, started.recv().await],
            [Some(0), Some(1)]
        );
        blocked(&scheduler, b, 100, &started_tx, &release);
        release.add_permits(1);
        assert_eq!(started.recv().await, Some(100));
    }

    /// Queues a job of `owner` whose permit comes back on the returned channel.
    fn handed(scheduler: &Scheduler, owner: Owner) -> oneshot::Receiver<Permit> {
        let (tx, rx) = oneshot::channel();
        assert!(scheduler.queue(owner, move |permit| drop(tx.send(permit))));
        rx
    }

    #[tokio::test]
    async fn a_job_that_gave_its_worker_back_takes_one_again_ahead_of_its_owners_queued_jobs() {
        let scheduler = Scheduler::start(1, CancellationToken::new());
        let owner = check();
        let first = handed(&scheduler, owner).await.unwrap();
        let second = handed(&scheduler, owner);
        assert_eq!(scheduler.load(), (1, 1));
        // The first job waits out a store outage: its worker goes to the second.
        drop(first);
        let second = second.await.unwrap();
        let permits = scheduler.permits(owner);
        let again = tokio::spawn(async move { permits.acquire().await });
        while scheduler.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        let mut third = handed(&scheduler, owner);
        assert_eq!(scheduler.load(), (1, 2));
        drop(second);
        let again = again.await.unwrap();
        assert!(again.is_some(), "the first job runs again before the third");
        assert!(third.try_recv().is_err());
        assert_eq!(scheduler.load(), (1, 1));
    }

    #[tokio::test]
    async fn a_closed_scheduler_queues_nothing_and_hands_out_no_permit() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let scheduler = Scheduler::start(1, shutdown);
        assert!(!scheduler.queue(check(), drop));
        assert!(scheduler.permits(check()).acquire().await.is_none());
    }
}
