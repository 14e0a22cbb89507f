//! Transactions: [`Db::write`] opens one, reads "now" once, runs the
//! operation, commits, and only then publishes the operation's events.
//! Conflicts between replicas that PostgreSQL resolves by aborting one side (a
//! deadlock, a serialization failure, two claims of one agent racing for its
//! one live lease) are retried from the start. [`Db::begin`] and
//! [`Db::finish`] are the two halves, for a batch of requests
//! ([`super::batch`]).

use crate::domain::work::Refusal;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::TimeSource;
use super::events;
use crate::domain::ids::SessionId;
use crate::domain::{EventKind, QuestEvent, QuestStatus};
use crate::store::common::{Turn, quest_event};
use crate::store::decode::{SESSION_COLUMNS, session_row};
use crate::store::{QuestRow, SessionRow, StoreError, SubmissionRow};

/// The pool, the time source and where committed events go: what every
/// transaction of a replica needs.
#[derive(Clone)]
pub struct Db {
    pub pool: PgPool,
    pub time: TimeSource,
    pub events: broadcast::Sender<QuestEvent>,
    /// This replica's id in the `events` table: its own events it publishes at once.
    pub origin: Uuid,
    /// How far the database's clock is ahead of this replica's, in
    /// microseconds, as the last transaction read it: what [`Db::clock`]
    /// adds, so that a schedule or a page's ages keep the database's time
    /// without a round trip.
    pub skew: Arc<AtomicI64>,
}

impl Db {
    /// Runs `op` in a transaction of its own; retried from the start when
    /// PostgreSQL aborted it to resolve a race. Events are published after commit.
    pub async fn write<A, T>(&self, args: A, op: Op<A, T>) -> Result<T, StoreError>
    where
        A: Clone + Send + Sync + 'static,
        T: Send + 'static,
    {
        let mut attempt = 1;
        loop {
            let mut tx = self.begin().await?;
            let out = op(&mut tx, args.clone()).await;
            match self.finish(tx, out).await {
                Err(e) if attempt < ATTEMPTS && is_retryable(&e) => {
                    attempt += 1;
                    pause(attempt).await;
                }
                Err(e) => return Err(as_refusal(e)),
                Ok(v) => return Ok(v),
            }
        }
    }

    /// Opens a transaction and reads its "now".
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        let mut conn = self.pool.begin().await?;
        let now = self.read_now(&mut *conn).await?;
        Ok(Tx {
            conn,
            now,
            events: Vec::new(),
            database_time: matches!(self.time, TimeSource::Database),
            // BEGIN, and the read of "now" when the database gives it.
            trips: 1 + u64::from(matches!(self.time, TimeSource::Database)),
            sessions: HashMap::new(),
        })
    }

    /// "Now" without a round trip: the injected clock, or this replica's
    /// clock set to the database's by the last transaction's reading.
    pub fn clock(&self) -> DateTime<Utc> {
        match &self.time {
            TimeSource::Clock(c) => c.now(),
            TimeSource::Database => {
                Utc::now() + chrono::Duration::microseconds(self.skew.load(Ordering::Relaxed))
            }
        }
    }

    /// "Now" as the database has it (the injected clock in tests), read on
    /// `conn`; the reading also sets [`Db::clock`] to the database's time.
    pub async fn read_now<'c, E>(&self, conn: E) -> Result<DateTime<Utc>, StoreError>
    where
        E: sqlx::PgExecutor<'c>,
    {
        match &self.time {
            TimeSource::Clock(c) => Ok(c.now()),
            TimeSource::Database => {
                let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(conn).await?;
                if let Some(us) = (now - Utc::now()).num_microseconds() {
                    self.skew.store(us, Ordering::Relaxed);
                }
                Ok(now)
            }
        }
    }

    /// Commits what `out` says succeeded (with the pauses its DONEs call
    /// for, see [`super::pauses`], and its events, for the other replicas),
    /// then publishes the events; rolls back on an error.
    pub async fn finish<T>(&self, mut tx: Tx, out: Result<T, StoreError>) -> Result<T, StoreError> {
        let out = match out {
            Ok(v) => match super::pauses::after_endings(&mut tx).await {
                Ok(()) => events::record(&mut tx, self.origin).await.map(|()| v),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match out {
            Ok(v) => {
                metrics::counter!("quest_store_round_trips_total").increment(tx.trips + 1);
                tx.conn.commit().await?;
                metrics::counter!("quest_store_commits_total").increment(1);
                for e in tx.events {
                    crate::store::common::count_committed(&e);
                    let _ = self.events.send(e);
                }
                Ok(v)
            }
            Err(e) => {
                let _ = tx.conn.rollback().await;
                Err(e)
            }
        }
    }
}

/// A short pause, growing with the attempt, that lets the winner of a race commit.
pub async fn pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(u64::from(attempt) * 2)).await;
}

/// A statement with its arguments.
pub type Query<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// An open write transaction, its "now", and what to publish after commit.
pub struct Tx {
    pub conn: Transaction<'static, Postgres>,
    pub now: DateTime<Utc>,
    pub events: Vec<QuestEvent>,
    /// Whether `now` is the database's (not an injected clock's), so that
    /// [`Tx::catch_up`] can read it again.
    database_time: bool,
    /// Statements sent so far (`quest_store_round_trips_total`).
    pub trips: u64,
    /// The sessions read so far: they never change after the scan.
    pub sessions: HashMap<SessionId, Arc<SessionRow>>,
}

impl Tx {
    /// Moves `now` on to the database's clock at this statement. `now` is
    /// read when the transaction begins, but under READ COMMITTED a later
    /// statement sees rows that transactions begun after it committed
    /// meanwhile: a lease granted on a quest another transaction just freed
    /// must not be stamped before that one ended it.
    pub async fn catch_up(&mut self) -> Result<(), StoreError> {
        if self.database_time {
            let now: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
                .fetch_one(self.db())
                .await?;
            self.now = self.now.max(now);
        }
        Ok(())
    }

    /// The connection, for one statement: counted as a round trip.
    pub fn db(&mut self) -> &mut PgConnection {
        self.trips += 1;
        &mut self.conn
    }

    /// The session, read once per transaction.
    pub async fn session(&mut self, id: SessionId) -> Result<Arc<SessionRow>, StoreError> {
        if let Some(s) = self.sessions.get(&id) {
            return Ok(s.clone());
        }
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
        let row = self
            .row(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id))
            .await?
            .ok_or(StoreError::NotFound("session"))?;
        let session = Arc::new(session_row(&row)?);
        self.sessions.insert(id, session.clone());
        Ok(session)
    }

    /// Runs a statement; the number of rows it changed.
    pub async fn exec(&mut self, q: Query<'_>) -> Result<u64, sqlx::Error> {
        Ok(q.execute(self.db()).await?.rows_affected())
    }

    /// Runs a statement and returns its rows.
    pub async fn rows(&mut self, q: Query<'_>) -> Result<Vec<PgRow>, sqlx::Error> {
        q.fetch_all(self.db()).await
    }

    /// Runs a statement and returns its first row, if any.
    pub async fn row(&mut self, q: Query<'_>) -> Result<Option<PgRow>, sqlx::Error> {
        q.fetch_optional(self.db()).await
    }

    /// Waits for the other replicas' writes of the same kind to commit.
    pub async fn take_turns(&mut self, turn: Turn<'_>) -> Result<(), StoreError> {
        let lock = match turn {
            // A lock of its own: a lock on the session row would hold up
            // every write that refers to it.
            Turn::RecheckStart(session) => sqlx::query(
                "SELECT pg_advisory_xact_lock(hashtextextended('recheck ' || $1::text, 0))",
            )
            .bind(session),
            Turn::Calibration(session) => sqlx::query(
                "SELECT pg_advisory_xact_lock(hashtext('quest calibration ' || $1::text))",
            )
            .bind(session),
            Turn::Pause(session, token) => sqlx::query(concat!(
                "SELECT pg_advisory_xact_lock(",
                pause_lock_key!(),
                ")"
            ))
            .bind(session)
            .bind(token),
            Turn::PauseRead(session, token) => sqlx::query(concat!(
                "SELECT pg_advisory_xact_lock_shared(",
                pause_lock_key!(),
                "), pg_advisory_xact_lock_shared(",
                token_pause_lock_key!("$2"),
                ")"
            ))
            .bind(session)
            .bind(token),
            Turn::TokenPause(token) => sqlx::query(concat!(
                "SELECT pg_advisory_xact_lock(",
                token_pause_lock_key!("$1"),
                ")"
            ))
            .bind(token),
            Turn::Token(name) => {
                sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('token ' || $1, 0))")
                    .bind(name)
            }
            Turn::GoldItems(session) => {
                sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('gold ' || $1::text, 0))")
                    .bind(session)
            }
            Turn::GoldHandOut(session, token) => sqlx::query(
                "SELECT pg_advisory_xact_lock(hashtextextended('gold ' || $1::text || ' ' || $2::text, 0))",
            )
            .bind(session)
            .bind(token),
            Turn::RecheckRun(run) => {
                sqlx::query("SELECT 1 FROM recheck_runs WHERE id = $1 FOR UPDATE").bind(run)
            }
        };
        self.exec(lock).await?;
        Ok(())
    }

    /// Publishes `event` after commit (a change that moves no count).
    pub fn publish(&mut self, event: QuestEvent) {
        self.events.push(event);
    }

    /// Records that `quest` moved from `before` (the triggers count the move
    /// on this engine, so only its event is kept, for after commit).
    pub fn moved_from(
        &mut self,
        kind: EventKind,
        quest: &QuestRow,
        _before: QuestStatus,
        submission: Option<&SubmissionRow>,
    ) {
        self.moved(kind, quest, submission);
    }

    /// Records that `quest` moved (its status as it is now): its event after commit.
    pub fn moved(&mut self, kind: EventKind, quest: &QuestRow, submission: Option<&SubmissionRow>) {
        self.events
            .push(quest_event(kind, quest, submission, self.now));
    }
}

/// A write operation: run again from the start when its transaction is retried.
pub type Op<A, T> = for<'c> fn(&'c mut Tx, A) -> BoxFuture<'c, Result<T, StoreError>>;

/// How often a write is tried before its conflict is reported.
pub const ATTEMPTS: u32 = 8;

/// Whether the transaction lost a race PostgreSQL resolved by aborting it,
/// so that running it again may succeed.
pub fn is_retryable(e: &StoreError) -> bool {
    let StoreError::Database(sqlx::Error::Database(d)) = e else {
        return false;
    };
    match d.code().as_deref() {
        // serialization_failure, deadlock_detected
        Some("40001") | Some("40P01") => true,
        // Two claims of one agent: the loser finds the winner's lease next time.
        Some("23505") => d.constraint() == Some("leases_live_by_agent"),
        _ => false,
    }
}

/// A rule of the database (a constraint or a ratchet trigger, SQLSTATE class
/// 23) refused the write: a conflict with the state, not a failed database.
pub fn as_refusal(e: StoreError) -> StoreError {
    match e {
        StoreError::Database(sqlx::Error::Database(d))
            if d.code().is_some_and(|c| c.starts_with("23")) =>
        {
            Refusal::Ratchet(d.message().to_owned()).into()
        }
        other => other,
    }
}

/// Fails unless a statement touched exactly `expected` rows.
pub fn expect_rows(what: &str, touched: u64, expected: u64) -> Result<(), StoreError> {
    if touched == expected {
        Ok(())
    } else {
        Err(Refusal::Illegal(format!(
            "{what} touched {touched} rows instead of {expected}; nothing was changed"
        ))
        .into())
    }
}
