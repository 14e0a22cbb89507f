//! One write, one transaction: [`PgStore::write`](super::PgStore) opens it,
//! reads "now" once, runs the operation, commits, and only then publishes the
//! operation's events. Conflicts between replicas that PostgreSQL resolves by
//! aborting one side (a deadlock, a serialization failure, two claims of one
//! agent racing for its one live lease) are retried from the start.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::{PgConnection, Postgres, Transaction};

use crate::domain::{EventKind, QuestEvent};
use crate::store::common::quest_event;
use crate::store::{QuestRow, StoreError, SubmissionRow};

/// An open write transaction, its "now", and what to publish after commit.
pub struct Tx {
    pub conn: Transaction<'static, Postgres>,
    pub now: DateTime<Utc>,
    pub events: Vec<QuestEvent>,
    /// Statements sent so far (`quest_store_round_trips_total`).
    pub trips: u64,
}

impl Tx {
    /// The connection, for one statement: counted as a round trip.
    pub fn db(&mut self) -> &mut PgConnection {
        self.trips += 1;
        &mut self.conn
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
            StoreError::conflict("illegal_transition", d.message().to_owned())
        }
        other => other,
    }
}

/// Fails unless a statement touched exactly `expected` rows.
pub fn expect_rows(what: &str, touched: u64, expected: u64) -> Result<(), StoreError> {
    if touched == expected {
        Ok(())
    } else {
        Err(StoreError::conflict(
            "illegal_transition",
            format!("{what} touched {touched} rows instead of {expected}; nothing was changed"),
        ))
    }
}
