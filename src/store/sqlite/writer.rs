//! The single writer: one task owns the only write connection, and every write
//! is a request queued to it.
//!
//! The writer takes whatever requests are queued (up to [`MAX_BATCH`]) into one
//! `BEGIN IMMEDIATE` transaction and commits once; only then are callers
//! answered and events published. Requests of one kind (every `next`, every
//! submit, ...) run together as one *group*: a handful of multi-row statements
//! whatever the group's size, so a batch costs round trips per kind, not per
//! request. All requests of a batch are concurrent, so running them kind by
//! kind is one valid order; two requests on the same quest (or agent) go to
//! separate groups, in arrival order.
//!
//! A group applies whole or not at all: it runs inside a savepoint, and when
//! the database refuses one of its statements (a constraint or trigger, or a
//! statement that touched other rows than it should) the group is rolled back
//! and run again request by request, so that only the guilty request fails.
//! Any other error (a full disk, an I/O error) fails the whole batch: every
//! caller hears "unavailable", nothing of it is committed, and the connection
//! is opened anew.

use crate::domain::ids::SessionId;
use crate::domain::work::Refusal;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqliteRow};
use sqlx::{ConnectOptions, Connection, Sqlite, SqliteConnection};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::codec::SESSION_COLUMNS;
use super::codec::session_row;
use crate::domain::{Clock, EventKind, Phase, QuestEvent, QuestStatus, State};
use crate::store::common::{Turn, quest_event, session_event};
use crate::store::{Counts, QuestRow, SessionRow, StoreError, SubmissionRow};

/// The most requests one commit carries.
pub const MAX_BATCH: usize = 256;

/// A statement with its arguments.
pub type Query = sqlx::query::Query<'static, Sqlite, SqliteArguments>;

/// The live counts of every session, kept from committed writes.
pub type Counters = RwLock<HashMap<SessionId, Counts>>;

/// What the requests of a batch work on: the connection inside the open
/// transaction, the batch's "now", and what to publish after commit.
pub struct WriteCtx {
    conn: SqliteConnection,
    pub now: DateTime<Utc>,
    events: Vec<QuestEvent>,
    moves: Vec<(SessionId, Bucket, i64)>,
    /// Sessions never change after the scan: read once per writer.
    sessions: HashMap<SessionId, Arc<SessionRow>>,
    trips: u64,
}

/// A count a quest is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Quest(State, Option<Phase>),
    Submissions,
    Total,
}

impl WriteCtx {
    /// Runs a statement; the number of rows it changed.
    pub async fn exec(&mut self, q: Query) -> Result<u64, sqlx::Error> {
        self.trips += 1;
        Ok(q.execute(&mut self.conn).await?.rows_affected())
    }

    /// Runs a statement and returns its rows.
    pub async fn rows(&mut self, q: Query) -> Result<Vec<SqliteRow>, sqlx::Error> {
        self.trips += 1;
        q.fetch_all(&mut self.conn).await
    }

    /// Runs a statement and returns its first row, if any.
    pub async fn row(&mut self, q: Query) -> Result<Option<SqliteRow>, sqlx::Error> {
        self.trips += 1;
        q.fetch_optional(&mut self.conn).await
    }

    /// The session, read once.
    pub async fn session(&mut self, id: SessionId) -> Result<Arc<SessionRow>, StoreError> {
        if let Some(s) = self.sessions.get(&id) {
            return Ok(s.clone());
        }
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?");
        let row = self
            .row(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.to_string()))
            .await?
            .ok_or(StoreError::NotFound("session"))?;
        let session = Arc::new(session_row(&row)?);
        self.sessions.insert(id, session.clone());
        Ok(session)
    }

    /// Records that `quest` moves from `before` to its current status: its
    /// event after commit, and the counts it leaves and enters.
    pub fn moved_from(
        &mut self,
        kind: EventKind,
        quest: &QuestRow,
        before: QuestStatus,
        submission: Option<&SubmissionRow>,
    ) {
        let (from, to) = (
            Bucket::Quest(before.state, before.phase),
            Bucket::Quest(quest.state, quest.phase),
        );
        if from != to {
            self.moves.push((quest.session_id, from, -1));
            self.moves.push((quest.session_id, to, 1));
        }
        self.events
            .push(quest_event(kind, quest, submission, self.now));
    }

    /// The quests, with their sessions, this batch has moved into `state` so far.
    pub fn ended_in(&self, state: State) -> Vec<(SessionId, crate::domain::ids::QuestId)> {
        crate::store::common::ended_in(&self.events, state)
    }

    /// Nothing to wait for: the single writer runs every write alone.
    pub async fn take_turns(&mut self, _turn: Turn<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    /// Publishes `event` after commit (a change that moves no count).
    pub fn publish(&mut self, event: QuestEvent) {
        self.events.push(event);
    }

    /// Counts a new submission of `session`.
    pub fn submitted(&mut self, session: SessionId) {
        self.moves.push((session, Bucket::Submissions, 1));
    }

    /// A new session with `total` open quests.
    pub fn session_created(&mut self, session: SessionId, total: u64) {
        self.moves.push((
            session,
            Bucket::Quest(State::Todo, Some(Phase::Open)),
            total as i64,
        ));
        self.moves.push((session, Bucket::Total, total as i64));
        self.events.push(session_event(session, self.now));
    }

    fn mark(&self) -> (usize, usize) {
        (self.events.len(), self.moves.len())
    }

    fn rewind(&mut self, (events, moves): (usize, usize)) {
        self.events.truncate(events);
        self.moves.truncate(moves);
    }

    async fn plain(&mut self, sql: &'static str) -> Result<(), GroupError> {
        self.exec(sqlx::query(sql)).await?;
        Ok(())
    }
}

impl Counts {
    fn add(&mut self, bucket: Bucket, n: i64) {
        let slot = match bucket {
            Bucket::Submissions => &mut self.submissions,
            Bucket::Total => &mut self.total,
            Bucket::Quest(State::Todo, Some(Phase::Open)) => &mut self.open,
            Bucket::Quest(State::Todo, Some(Phase::Leased)) => &mut self.leased,
            Bucket::Quest(State::Todo, Some(Phase::Checking)) => &mut self.checking,
            Bucket::Quest(State::Todo, Some(Phase::Verifying)) => &mut self.verifying,
            Bucket::Quest(State::Pass, _) => &mut self.pass,
            Bucket::Quest(State::Review, _) => &mut self.review,
            Bucket::Quest(State::Done, _) => &mut self.done,
            Bucket::Quest(State::Todo, None) => return,
        };
        *slot = slot.saturating_add_signed(n);
    }
}

/// Why a group could not apply.
#[derive(Debug)]
pub enum GroupError {
    /// The database refused a statement, or a row could not be read: run the
    /// group request by request; this is the error of a request that fails alone.
    Refused(StoreError),
    /// The database itself failed: the batch fails.
    Fatal(String),
}

/// Whether the database refused a statement by a rule (constraint or trigger)
/// rather than failed: SQLite's primary code SQLITE_CONSTRAINT.
pub fn is_refusal(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 19),
        _ => false,
    }
}

impl From<sqlx::Error> for GroupError {
    fn from(e: sqlx::Error) -> Self {
        if is_refusal(&e) {
            let message = match &e {
                sqlx::Error::Database(d) => d.message().to_owned(),
                other => other.to_string(),
            };
            GroupError::Refused(Refusal::Ratchet(message).into())
        } else {
            GroupError::Fatal(e.to_string())
        }
    }
}

impl From<StoreError> for GroupError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Database(e) => e.into(),
            other => GroupError::Refused(other),
        }
    }
}

/// What a failed control statement (BEGIN, SAVEPOINT, COMMIT) says.
fn text(e: GroupError) -> String {
    match e {
        GroupError::Fatal(e) => e,
        GroupError::Refused(e) => e.to_string(),
    }
}

/// Checks that a statement touched exactly the rows it should; otherwise the
/// group must not apply.
pub fn expect_rows(what: &str, touched: u64, expected: usize) -> Result<(), GroupError> {
    if touched == expected as u64 {
        Ok(())
    } else {
        Err(GroupError::Refused(
            Refusal::Illegal(format!(
                "{what} touched {touched} rows instead of {expected}; nothing was changed"
            ))
            .into(),
        ))
    }
}

/// The results of a group, one per request, in order.
pub type GroupResult<T> = Result<Vec<Result<T, StoreError>>, GroupError>;

/// A kind of request the writer runs as a group.
pub trait Kind: Sized + Send + Sync + 'static {
    type Out: Send + 'static;
    type Key: Hash + Eq + Send;
    /// What two requests of one group must not share.
    fn key(&self) -> Self::Key;
    /// Runs every request of a group with as few statements as it can.
    fn run<'a>(
        ctx: &'a mut WriteCtx,
        reqs: &'a [Self],
    ) -> impl Future<Output = GroupResult<Self::Out>> + Send + 'a;
    /// Completes an answer once the batch is committed, from the counts then.
    fn finish(_out: &mut Self::Out, _counts: &HashMap<SessionId, Counts>) {}
}

/// A write that is not worth grouping: runs alone inside its own savepoint.
pub type Single = Box<
    dyn for<'c> FnOnce(&'c mut WriteCtx) -> BoxFuture<'c, (Result<(), GroupError>, Finish)> + Send,
>;

/// Answers a caller once the batch's fate is known: `Some(counts)` after
/// commit, `None` when the batch failed.
pub type Finish = Box<dyn FnOnce(Option<&HashMap<SessionId, Counts>>) + Send>;

/// A queued request.
pub enum Op {
    Group(Box<dyn Grouped>),
    Single(Single),
}

/// A typed request with its reply channel, erased so that one queue carries every kind.
pub trait Grouped: Send {
    /// Which kind it is, to bucket a batch (the order kinds run in).
    fn rank(&self) -> u8;
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// A request of kind `K` and where its answer goes.
pub struct Request<K: Kind> {
    pub req: K,
    pub reply: oneshot::Sender<Result<K::Out, StoreError>>,
}

/// The order in which kinds run inside a batch.
pub trait Ranked {
    const RANK: u8;
}

impl<K: Kind + Ranked> Grouped for Request<K> {
    fn rank(&self) -> u8 {
        K::RANK
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// How the writer reaches the database and what it reports to.
pub struct Writer {
    pub ctx: WriteCtx,
    pub options: SqliteConnectOptions,
    pub events: broadcast::Sender<QuestEvent>,
    pub clock: Arc<dyn Clock>,
    pub counters: Arc<Counters>,
    /// Runs the grouped requests of one rank; set by the store for each kind.
    pub runners: Vec<(u8, Runner)>,
    /// How the WAL is kept bounded.
    pub wal: WalPolicy,
    /// Commits since the WAL was last looked at.
    pub since_checkpoint: u32,
    /// How many commits after a restart that did not complete the writer
    /// looks again; doubles on each miss, back to one on success.
    pub restart_backoff: u32,
}

/// How the writer keeps the WAL file bounded. SQLite's own checkpoints after
/// each commit are passive: with readers that never pause, they never get to
/// reset the WAL, which then grows without bound.
#[derive(Debug, Clone, Copy)]
pub struct WalPolicy {
    /// How many commits pass between two looks at the WAL's length.
    pub every_commits: u32,
    /// The WAL length (in pages) past which the writer waits for the readers
    /// of the moment to let it restart the log.
    pub restart_past_pages: i64,
}

impl Default for WalPolicy {
    /// Every 256 commits; a restart past 8,192 pages (32 MiB of 4 KiB pages).
    fn default() -> WalPolicy {
        WalPolicy {
            every_commits: 256,
            restart_past_pages: 8192,
        }
    }
}

/// Runs every request of one kind in a batch.
pub type Runner = for<'a> fn(
    &'a mut WriteCtx,
    Vec<Box<dyn std::any::Any + Send>>,
    &'a mut Vec<Finish>,
) -> BoxFuture<'a, Result<(), String>>;

impl WriteCtx {
    /// A context around a fresh connection.
    pub fn new(conn: SqliteConnection, now: DateTime<Utc>) -> WriteCtx {
        WriteCtx {
            conn,
            now,
            events: Vec::new(),
            moves: Vec::new(),
            sessions: HashMap::new(),
            trips: 0,
        }
    }
}

/// Runs the requests of kind `K` of a batch, group by group.
pub fn run_kind<'a, K: Kind>(
    ctx: &'a mut WriteCtx,
    items: Vec<Box<dyn std::any::Any + Send>>,
    finishers: &'a mut Vec<Finish>,
) -> BoxFuture<'a, Result<(), String>> {
    Box::pin(async move {
        let mut groups: Vec<Vec<Request<K>>> = Vec::new();
        let mut keys = HashSet::new();
        for item in items {
            let request = *item
                .downcast::<Request<K>>()
                .expect("a runner gets only requests of its own kind");
            if groups.is_empty() || !keys.insert(request.req.key()) {
                keys.clear();
                keys.insert(request.req.key());
                groups.push(Vec::new());
            }
            groups.last_mut().expect("pushed above").push(request);
        }
        for group in groups {
            let (reqs, replies): (Vec<K>, Vec<_>) =
                group.into_iter().map(|r| (r.req, r.reply)).unzip();
            let results = match run_group(ctx, &reqs).await {
                Ok(results) => results,
                Err(e) => {
                    for reply in replies {
                        finishers.push(Box::new(move |_| {
                            let _ = reply.send(Err(StoreError::Unavailable));
                        }));
                    }
                    return Err(e);
                }
            };
            for (result, reply) in results.into_iter().zip(replies) {
                finishers.push(Box::new(move |committed| {
                    let answer = match committed {
                        Some(counts) => result.map(|mut out| {
                            K::finish(&mut out, counts);
                            out
                        }),
                        None => Err(StoreError::Unavailable),
                    };
                    let _ = reply.send(answer);
                }));
            }
        }
        Ok(())
    })
}

/// One group in a savepoint; refused as a whole, it runs request by request.
async fn run_group<K: Kind>(
    ctx: &mut WriteCtx,
    reqs: &[K],
) -> Result<Vec<Result<K::Out, StoreError>>, String> {
    let fatal = text;
    let mark = ctx.mark();
    ctx.plain("SAVEPOINT batch_group").await.map_err(fatal)?;
    match K::run(ctx, reqs).await {
        Ok(results) => {
            ctx.plain("RELEASE batch_group").await.map_err(fatal)?;
            return Ok(results);
        }
        Err(GroupError::Fatal(e)) => return Err(e),
        Err(GroupError::Refused(e)) if reqs.len() > 1 => {
            tracing::debug!(error = %e, size = reqs.len(), "a grouped write was refused; running it request by request");
        }
        Err(GroupError::Refused(e)) => {
            ctx.rewind(mark);
            ctx.plain("ROLLBACK TO batch_group").await.map_err(fatal)?;
            ctx.plain("RELEASE batch_group").await.map_err(fatal)?;
            return Ok(vec![Err(e)]);
        }
    }
    ctx.rewind(mark);
    ctx.plain("ROLLBACK TO batch_group").await.map_err(fatal)?;
    let mut results = Vec::with_capacity(reqs.len());
    for req in reqs {
        let mark = ctx.mark();
        ctx.plain("SAVEPOINT batch_one").await.map_err(fatal)?;
        match K::run(ctx, std::slice::from_ref(req)).await {
            Ok(mut one) => {
                ctx.plain("RELEASE batch_one").await.map_err(fatal)?;
                results.push(one.pop().unwrap_or(Err(StoreError::Unavailable)));
            }
            Err(GroupError::Refused(e)) => {
                ctx.rewind(mark);
                ctx.plain("ROLLBACK TO batch_one").await.map_err(fatal)?;
                ctx.plain("RELEASE batch_one").await.map_err(fatal)?;
                results.push(Err(e));
            }
            Err(GroupError::Fatal(e)) => return Err(e),
        }
    }
    ctx.plain("RELEASE batch_group").await.map_err(fatal)?;
    Ok(results)
}

/// Decides the pauses the batch's DONEs call for, in its transaction (see
/// [`super::pauses`]). Refused, they are rolled back alone and logged: the
/// batch's writes stand, and the next DONE of the token decides again.
async fn decide_pauses(ctx: &mut WriteCtx) -> Result<(), String> {
    let mark = ctx.mark();
    ctx.plain("SAVEPOINT batch_pauses").await.map_err(text)?;
    match super::pauses::after_endings(ctx).await {
        Ok(()) => {}
        Err(GroupError::Fatal(e)) => return Err(e),
        Err(GroupError::Refused(e)) => {
            tracing::error!(error = %e, "pauses could not be decided; the next DONE decides them again");
            ctx.rewind(mark);
            ctx.plain("ROLLBACK TO batch_pauses").await.map_err(text)?;
        }
    }
    ctx.plain("RELEASE batch_pauses").await.map_err(text)
}

/// Receives requests until every sender is gone.
pub async fn run(mut writer: Writer, mut queue: mpsc::Receiver<Op>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        writer.run_batch(std::mem::take(&mut batch)).await;
    }
    let _ = writer.ctx.conn.close().await;
}

impl Writer {
    async fn run_batch(&mut self, batch: Vec<Op>) {
        metrics::counter!("quest_store_writes_total").increment(batch.len() as u64);
        let mut singles = Vec::new();
        let mut ranked: Vec<Vec<Box<dyn std::any::Any + Send>>> =
            self.runners.iter().map(|_| Vec::new()).collect();
        for op in batch {
            match op {
                Op::Single(s) => singles.push(s),
                Op::Group(g) => {
                    let rank = g.rank();
                    let slot = self.runners.iter().position(|(r, _)| *r == rank);
                    ranked[slot.expect("every kind has a runner")].push(g.into_any());
                }
            }
        }
        let ctx = &mut self.ctx;
        ctx.now = self.clock.now();
        ctx.rewind((0, 0));
        ctx.trips = 0;
        let mut finishers: Vec<Finish> = Vec::new();
        let mut failed = ctx.plain("BEGIN IMMEDIATE").await.err().map(text);
        for single in singles {
            if failed.is_some() {
                // Dropping a request drops its reply: the caller hears "unavailable".
                continue;
            }
            let mark = ctx.mark();
            if let Err(e) = ctx.plain("SAVEPOINT batch_one").await {
                failed = Some(text(e));
                continue;
            }
            let (outcome, finish) = single(ctx).await;
            finishers.push(finish);
            match outcome {
                Ok(()) => {}
                Err(GroupError::Fatal(e)) => {
                    failed = Some(e);
                    continue;
                }
                Err(GroupError::Refused(_)) => {
                    ctx.rewind(mark);
                    if let Err(e) = ctx.plain("ROLLBACK TO batch_one").await {
                        failed = Some(text(e));
                        continue;
                    }
                }
            }
            if let Err(e) = ctx.plain("RELEASE batch_one").await {
                failed = Some(text(e));
            }
        }
        for ((_, runner), items) in self.runners.iter().zip(ranked) {
            if items.is_empty() {
                continue;
            }
            if failed.is_some() {
                // Dropping a request drops its reply: the caller hears "unavailable".
                continue;
            }
            if let Err(e) = runner(ctx, items, &mut finishers).await {
                failed = Some(e);
            }
        }
        if failed.is_none() {
            failed = decide_pauses(ctx).await.err();
        }
        let outcome = match failed {
            None => ctx.plain("COMMIT").await.map_err(text),
            Some(e) => Err(e),
        };
        // Every statement is one hop to the connection's thread and back: the
        // cost that grouping keeps per kind instead of per request.
        metrics::counter!("quest_store_round_trips_total").increment(ctx.trips);
        match outcome {
            Ok(()) => {
                metrics::counter!("quest_store_commits_total").increment(1);
                let mut counters = self.counters.write().unwrap_or_else(|e| e.into_inner());
                for (session, bucket, n) in ctx.moves.drain(..) {
                    counters.entry(session).or_default().add(bucket, n);
                }
                for event in ctx.events.drain(..) {
                    crate::store::common::count_committed(&event);
                    let _ = self.events.send(event);
                }
                for finish in finishers {
                    finish(Some(&counters));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "a write batch failed; nothing of it was committed");
                let _ = ctx.plain("ROLLBACK").await;
                ctx.rewind((0, 0));
                for finish in finishers {
                    finish(None);
                }
                self.reopen().await;
                return;
            }
        }
        self.since_checkpoint += 1;
        if self.since_checkpoint >= self.wal.every_commits {
            if self.checkpoint().await {
                self.since_checkpoint = 0;
                self.restart_backoff = 1;
            } else {
                // Looked at again after 1, 2, 4 ... commits (at most a period):
                // a reader that outlasts the busy timeout costs the writer that
                // wait a few times, not once per commit.
                self.since_checkpoint = self.wal.every_commits.saturating_sub(self.restart_backoff);
                self.restart_backoff = (self.restart_backoff * 2).min(self.wal.every_commits);
            }
        }
    }

    /// Keeps the WAL bounded: a passive checkpoint, and when the log is still
    /// long, a restart that waits for the readers of the moment (new readers
    /// then read the database file, so the wait is short). Answers whether the
    /// log is now short; when it is not (readers held out past the busy
    /// timeout, an I/O error), the writer tries again soon rather than a whole
    /// period later, so one missed restart cannot double the log.
    async fn checkpoint(&mut self) -> bool {
        let passive: Result<(i64, i64, i64), _> = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&mut self.ctx.conn)
            .await;
        let log = match passive {
            Ok((_, log, _)) => log,
            Err(e) => {
                tracing::warn!(error = %e, "the WAL could not be checkpointed; trying again after the next commit");
                return false;
            }
        };
        if log < self.wal.restart_past_pages {
            return true;
        }
        metrics::counter!("quest_store_wal_restarts_total").increment(1);
        match sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(RESTART)")
            .fetch_one(&mut self.ctx.conn)
            .await
        {
            Ok((0, log, done)) => {
                tracing::debug!(log, done, "WAL restarted");
                true
            }
            Ok((_, log, done)) => {
                tracing::warn!(
                    log,
                    done,
                    "readers held the WAL past the busy timeout; trying again after the next commit"
                );
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "the WAL could not be restarted; trying again after the next commit");
                false
            }
        }
    }

    /// Opens the write connection anew after a failed batch, so that no state
    /// of the failure (an aborted transaction, a poisoned statement) lingers.
    async fn reopen(&mut self) {
        let mut delay = Duration::from_millis(50);
        loop {
            match self.options.connect().await {
                Ok(conn) => {
                    let old = std::mem::replace(&mut self.ctx.conn, conn);
                    let _ = old.close().await;
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot reopen the write connection; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
