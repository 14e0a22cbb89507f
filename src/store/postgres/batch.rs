//! Coalesced writes: the concurrent requests of one kind on this replica run
//! as one transaction, a handful of multi-row statements whatever the batch's
//! size, so that a batch costs round trips per kind, not per request (the
//! SQLite writer does the same, see `store::sqlite::writer`).
//!
//! A batcher takes whatever requests are queued (up to [`MAX_BATCH`], two of
//! the same key never in one batch) and runs them together while the next
//! ones queue ([`IN_FLIGHT`] says why one batch of a kind runs at a time).
//! A batch answers each request on its own: a request the rules refuse (a lease cap, a session that does not exist) is answered so and
//! writes nothing. When the database refuses the batch (a constraint or a
//! trigger), its requests run again one by one, each in a transaction of its
//! own, so that only the guilty one fails; a race another replica won
//! (a deadlock, a serialization failure) runs the whole batch again.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

use futures_util::future::BoxFuture;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::tx::{ATTEMPTS, Db, Tx, as_refusal, is_retryable, pause};
use crate::store::StoreError;

/// The most requests one transaction carries.
pub const MAX_BATCH: usize = 128;

/// How many batches of one kind run at once. One: the next batch gathers
/// while this one commits. The console figures are upserted in key order and
/// the throughput minute is kept in slots, so two batches of one session no
/// longer deadlock, but they still wait on each other's figure rows: measured
/// with two, one replica of the bench made 0.32 commits and 3.7 round trips
/// per cycle instead of 0.10 and about 1, and three replicas fell to 0.88x
/// one.
pub const IN_FLIGHT: usize = 1;

/// Each request's answer.
pub type Answers<T> = Vec<Result<T, StoreError>>;

/// A batch operation: one answer per request, in order; run again from the
/// start when its transaction is retried. An `Err` fails the whole batch.
pub type BatchOp<A, T> =
    for<'c> fn(&'c mut Tx, &'c [A]) -> BoxFuture<'c, Result<Answers<T>, StoreError>>;

/// What keeps two requests out of one batch (the agent of a `next`, the quest
/// of a submit): the second waits for the next batch, so that a batch never
/// holds two requests whose order matters.
pub trait Keyed {
    type Key: Eq + Hash + Send;
    fn key(&self) -> Self::Key;
}

type Request<A, T> = (A, oneshot::Sender<Result<T, StoreError>>);

/// The queue of one kind of request, and the task that runs its batches.
pub struct Batcher<A, T> {
    queue: mpsc::UnboundedSender<Request<A, T>>,
}

impl<A, T> Clone for Batcher<A, T> {
    fn clone(&self) -> Self {
        Batcher {
            queue: self.queue.clone(),
        }
    }
}

impl<A, T> Batcher<A, T>
where
    A: Keyed + Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    /// Starts the task that runs batches of `op` on `db`; it ends when the
    /// last clone of the batcher is dropped.
    pub fn start(db: Db, op: BatchOp<A, T>) -> Batcher<A, T> {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(serve(db, op, requests));
        Batcher { queue }
    }

    /// Queues `request` and waits for its answer.
    pub async fn run(&self, request: A) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((request, reply))
            .map_err(|_| StoreError::Unavailable)?;
        answer.await.unwrap_or(Err(StoreError::Unavailable))
    }
}

async fn serve<A, T>(
    db: Db,
    op: BatchOp<A, T>,
    mut requests: mpsc::UnboundedReceiver<Request<A, T>>,
) where
    A: Keyed + Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    // Requests that met one of the same key in their batch: first in the next.
    let mut held_back: VecDeque<Request<A, T>> = VecDeque::new();
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        // While every batch slot is busy, requests queue up for the next batch.
        if in_flight.available_permits() == 0 {
            let _ = in_flight.acquire().await;
        }
        let first = match held_back.pop_front() {
            Some(r) => r,
            None => match requests.recv().await {
                Some(r) => r,
                None => return,
            },
        };
        let mut batch = vec![first];
        {
            let mut keys = HashSet::from([batch[0].0.key()]);
            let mut waiting = std::mem::take(&mut held_back);
            while batch.len() < MAX_BATCH {
                let Some(next) = waiting.pop_front().or_else(|| requests.try_recv().ok()) else {
                    break;
                };
                if keys.insert(next.0.key()) {
                    batch.push(next);
                } else {
                    held_back.push_back(next);
                }
            }
            held_back.extend(waiting);
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let db = db.clone();
        tokio::spawn(async move {
            let (args, replies): (Vec<A>, Vec<_>) = batch.into_iter().unzip();
            let answers = run_batch(&db, op, &args).await;
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
            drop(permit);
        });
    }
}

/// Runs one batch: together while the database accepts it, else one by one.
async fn run_batch<A, T>(db: &Db, op: BatchOp<A, T>, args: &[A]) -> Answers<T>
where
    A: Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    let mut attempt = 1;
    loop {
        let together = async {
            let mut tx = db.begin().await?;
            let out = op(&mut tx, args).await;
            db.finish(tx, out).await
        };
        match together.await {
            Ok(answers) => return answers,
            Err(e) if attempt < ATTEMPTS && is_retryable(&e) => {
                attempt += 1;
                pause(attempt).await;
            }
            // One request alone gets the batch's own error.
            Err(e) if args.len() == 1 => return vec![Err(as_refusal(e))],
            Err(_) => break,
        }
    }
    // One at a time: together they would race for the same rows again.
    let mut answers = Vec::with_capacity(args.len());
    for a in args {
        answers.push(alone(db, op, a.clone()).await);
    }
    answers
}

/// One request in a transaction of its own, retried like any write.
async fn alone<A, T>(db: &Db, op: BatchOp<A, T>, arg: A) -> Result<T, StoreError>
where
    A: Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    let mut answers = Box::pin(run_batch(db, op, std::slice::from_ref(&arg))).await;
    answers.pop().unwrap_or(Err(StoreError::Unavailable))
}
