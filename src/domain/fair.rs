//! The fair share of one replica's gate workers: which waiting job starts
//! when a worker is free. Pure bookkeeping (no clock, no tasks); the workers'
//! scheduler holds one [`Fair`] behind a lock and does what it says.
//!
//! Two classes of jobs wait: the queued checks of submissions (never the
//! decisions a gate makes at once in the request) and re-checks. The policy:
//!
//! - **Round-robin.** Checks go round the sessions that have checks waiting,
//!   and within a session round its tokens; re-checks go round their runs
//!   (a run belongs to one session). The classes take turns.
//! - **Caps while others wait** ([`Caps::of`]): while another session has a
//!   check waiting, a session starts no check past `workers - 2` running
//!   (at least 1: with 3 workers or fewer, one each); while a check of
//!   another token waits, a token starts none past `max(1, workers / 2)`;
//!   while checks wait, re-checks start none past `max(1, workers / 2)`.
//!   With nothing else waiting, one session or one token may use every
//!   worker (the usual set-up is one token with many agent names).
//! - **No idle worker while work waits.** A cap keeps a worker for whoever
//!   waits within their caps; when every waiting job is past a cap (say
//!   two sessions at one each on three workers), the free worker goes round
//!   the same order to one of them rather than stay idle.
//! - A job that gave its worker back during a wait (a store outage) takes
//!   one again through the same policy, ahead of its owner's queued jobs.
//!
//! A re-check counts against its class only, not against its session's cap.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use crate::domain::ids::{RecheckRunId, SessionId, TokenId};

/// Whose job waits or runs: what the policy shares the workers between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A submission's queued check: its session and the token that submitted it.
    Check { session: SessionId, token: TokenId },
    /// A re-check of a quest in `run`.
    Recheck { run: RecheckRunId },
}

/// The most workers one owner may hold while others wait (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Workers in all.
    pub workers: usize,
    /// Per session, while another session has a check waiting: `workers - 2`, at least 1.
    pub session: usize,
    /// Per token, while another token has a check waiting: `max(1, workers / 2)`.
    pub token: usize,
    /// All re-checks together, while checks wait: `max(1, workers / 2)`.
    pub rechecks: usize,
}

impl Caps {
    /// The caps of a pool of `workers` (at least one worker).
    pub fn of(workers: usize) -> Caps {
        let workers = workers.max(1);
        Caps {
            workers,
            session: workers.saturating_sub(2).max(1),
            token: (workers / 2).max(1),
            rechecks: (workers / 2).max(1),
        }
    }
}

/// Keys that have something waiting, in turn order: the one served last goes
/// to the back; one skipped for a cap keeps its place.
#[derive(Debug)]
struct Rotation<K, V> {
    order: VecDeque<K>,
    queues: HashMap<K, V>,
}

impl<K, V> Default for Rotation<K, V> {
    fn default() -> Self {
        Rotation {
            order: VecDeque::new(),
            queues: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V: Default> Rotation<K, V> {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The queue of `key`, entered at the back of the turn order if new.
    fn entry(&mut self, key: K) -> &mut V {
        if !self.queues.contains_key(&key) {
            self.order.push_back(key);
        }
        self.queues.entry(key).or_default()
    }

    /// The first key in turn order for which `take` gives something, which
    /// then goes to the back (or out, once `empty` says its queue is).
    fn serve<T>(
        &mut self,
        mut take: impl FnMut(K, &mut V) -> Option<T>,
        empty: impl Fn(&V) -> bool,
    ) -> Option<(K, T)> {
        for i in 0..self.order.len() {
            let key = self.order[i];
            let queue = self
                .queues
                .get_mut(&key)
                .expect("every key in turn has a queue");
            let Some(taken) = take(key, queue) else {
                continue;
            };
            self.order.remove(i);
            if empty(queue) {
                self.queues.remove(&key);
            } else {
                self.order.push_back(key);
            }
            return Some((key, taken));
        }
        None
    }

    fn drain(&mut self) -> impl Iterator<Item = V> + '_ {
        self.order.clear();
        self.queues.drain().map(|(_, v)| v)
    }
}

/// A session's waiting checks, by token.
type Tokens<J> = Rotation<TokenId, VecDeque<J>>;

/// The waiting jobs `J` and the running counts of one pool of workers.
#[derive(Debug)]
pub struct Fair<J> {
    caps: Caps,
    checks: Rotation<SessionId, Tokens<J>>,
    rechecks: Rotation<RecheckRunId, VecDeque<J>>,
    /// Waiting checks per token, over every session.
    waiting_tokens: HashMap<TokenId, usize>,
    waiting_checks: usize,
    running: usize,
    running_sessions: HashMap<SessionId, usize>,
    running_tokens: HashMap<TokenId, usize>,
    running_rechecks: usize,
    /// Whether re-checks are served first at the next pick.
    rechecks_first: bool,
}

impl<J> Fair<J> {
    /// An empty pool of `workers` workers.
    pub fn new(workers: usize) -> Fair<J> {
        Fair {
            caps: Caps::of(workers),
            checks: Rotation::default(),
            rechecks: Rotation::default(),
            waiting_tokens: HashMap::new(),
            waiting_checks: 0,
            running: 0,
            running_sessions: HashMap::new(),
            running_tokens: HashMap::new(),
            running_rechecks: 0,
            rechecks_first: false,
        }
    }

    /// The caps this pool applies.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Jobs started and not yet [`Fair::done`].
    pub fn running(&self) -> usize {
        self.running
    }

    /// Jobs waiting to start.
    pub fn waiting(&self) -> usize {
        self.waiting_checks
            + self
                .rechecks
                .queues
                .values()
                .map(VecDeque::len)
                .sum::<usize>()
    }

    /// Queues a job of `owner` behind that owner's others.
    pub fn push(&mut self, owner: Owner, job: J) {
        self.queue(owner).push_back(job);
    }

    /// Queues a job of `owner` ahead of that owner's others: one that ran
    /// already and gave its worker back for a wait.
    pub fn push_front(&mut self, owner: Owner, job: J) {
        self.queue(owner).push_front(job);
    }

    fn queue(&mut self, owner: Owner) -> &mut VecDeque<J> {
        match owner {
            Owner::Check { session, token } => {
                self.waiting_checks += 1;
                *self.waiting_tokens.entry(token).or_default() += 1;
                self.checks.entry(session).entry(token)
            }
            Owner::Recheck { run } => self.rechecks.entry(run),
        }
    }

    /// The job to start now on a free worker, counted as running from now
    /// on; `None` when every worker is busy or nothing waits.
    pub fn pick(&mut self) -> Option<(Owner, J)> {
        if self.running >= self.caps.workers {
            return None;
        }
        let order = if self.rechecks_first {
            [Class::Rechecks, Class::Checks]
        } else {
            [Class::Checks, Class::Rechecks]
        };
        let (owner, job) = [true, false]
            .into_iter()
            .flat_map(|capped| order.map(|class| (class, capped)))
            .find_map(|(class, capped)| match class {
                Class::Checks => self.next_check(capped),
                Class::Rechecks => self.next_recheck(capped),
            })?;
        self.rechecks_first = matches!(owner, Owner::Check { .. });
        self.running += 1;
        match owner {
            Owner::Check { session, token } => {
                *self.running_sessions.entry(session).or_default() += 1;
                *self.running_tokens.entry(token).or_default() += 1;
            }
            Owner::Recheck { .. } => self.running_rechecks += 1,
        }
        Some((owner, job))
    }

    /// The next check in turn, within the caps if `capped`.
    fn next_check(&mut self, capped: bool) -> Option<(Owner, J)> {
        let caps = self.caps;
        let other_sessions_wait = self.checks.len() > 1;
        let other_tokens_wait = self.waiting_tokens.len() > 1;
        let (running_sessions, running_tokens) = (&self.running_sessions, &self.running_tokens);
        let (session, (token, job)) = self.checks.serve(
            |session, tokens| {
                if capped && other_sessions_wait && over(running_sessions, session, caps.session) {
                    return None;
                }
                tokens.serve(
                    |token, jobs| {
                        if capped && other_tokens_wait && over(running_tokens, token, caps.token) {
                            return None;
                        }
                        jobs.pop_front()
                    },
                    VecDeque::is_empty,
                )
            },
            |tokens| tokens.is_empty(),
        )?;
        self.waiting_checks -= 1;
        if let Some(n) = self.waiting_tokens.get_mut(&token) {
            *n -= 1;
            if *n == 0 {
                self.waiting_tokens.remove(&token);
            }
        }
        Some((Owner::Check { session, token }, job))
    }

    /// The next re-check in turn, within the class's cap if `capped`.
    fn next_recheck(&mut self, capped: bool) -> Option<(Owner, J)> {
        if capped && self.waiting_checks > 0 && self.running_rechecks >= self.caps.rechecks {
            return None;
        }
        let (run, job) = self
            .rechecks
            .serve(|_, jobs| jobs.pop_front(), VecDeque::is_empty)?;
        Some((Owner::Recheck { run }, job))
    }

    /// A job of `owner` that [`Fair::pick`] started has finished (or gave
    /// its worker back): its worker is free.
    pub fn done(&mut self, owner: Owner) {
        self.running = self.running.saturating_sub(1);
        match owner {
            Owner::Check { session, token } => {
                release(&mut self.running_sessions, session);
                release(&mut self.running_tokens, token);
            }
            Owner::Recheck { .. } => {
                self.running_rechecks = self.running_rechecks.saturating_sub(1)
            }
        }
    }

    /// Takes every waiting job out (the pool closes); running ones stay counted.
    pub fn drain(&mut self) -> Vec<J> {
        self.waiting_checks = 0;
        self.waiting_tokens.clear();
        let mut jobs: Vec<J> = self
            .checks
            .drain()
            .flat_map(|mut tokens| tokens.drain().flatten().collect::<Vec<_>>())
            .collect();
        jobs.extend(self.rechecks.drain().flatten());
        jobs
    }
}

#[derive(Debug, Clone, Copy)]
enum Class {
    Checks,
    Rechecks,
}

/// Whether `key` runs `cap` jobs or more.
fn over<K: Eq + Hash>(running: &HashMap<K, usize>, key: K, cap: usize) -> bool {
    running.get(&key).copied().unwrap_or(0) >= cap
}

fn release<K: Eq + Hash>(running: &mut HashMap<K, usize>, key: K) {
    if let Some(n) = running.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            running.remove(&key);
        }
    }
}

#[cfg(test)]
#[path = "fair_tests.rs"]
mod tests;
