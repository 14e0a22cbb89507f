//! The embedded SQLite store (WAL).
//!
//! One task owns the only write connection; every write is a job sent to it.
//! The writer takes whatever jobs are queued (up to [`MAX_BATCH`]), runs each
//! inside its own savepoint of one `BEGIN IMMEDIATE` transaction, commits once,
//! and only then answers the callers and publishes their events. Many requests
//! thus share one durable commit, and a failed job rolls back alone.
//! Reads use a separate pool of read-only connections.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row, SqliteConnection, SqlitePool};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use super::*;
use crate::domain::verify::{self, Question};
use crate::domain::{Clock, DecidedBy, EventKind, QuestEvent, QuestStatus, Transition};

// The console's reads and writes, in their own file; a child module, so it
// shares this file's row decoders and the writer.
#[path = "sqlite_console.rs"]
mod console;

/// The most jobs one commit carries.
pub const MAX_BATCH: usize = 256;

/// The state a write job works on: the write connection inside the open
/// transaction, the batch's "now", and the events to publish after commit.
pub struct WriteCtx {
    conn: SqliteConnection,
    now: DateTime<Utc>,
    events: Vec<QuestEvent>,
}

type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;
type Job = Box<dyn for<'c> FnOnce(&'c mut WriteCtx) -> BoxFuture<'c, (bool, Finish)> + Send>;

/// The SQLite implementation of [`Store`].
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    writer: mpsc::Sender<Job>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database file, runs the migrations and
    /// starts the writer task. Events of committed writes go to `events`.
    pub async fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
        events: broadcast::Sender<QuestEvent>,
    ) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before any caller hears of it.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .disable_statement_logging();
        let mut conn = options.connect().await?;
        sqlx::migrate!("./migrations/sqlite").run(&mut conn).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options.read_only(true))
            .await?;
        let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
        let ctx = WriteCtx {
            conn,
            now: clock.now(),
            events: Vec::new(),
        };
        tokio::spawn(run_writer(ctx, rx, events, clock.clone()));
        Ok(SqliteStore {
            read,
            writer: tx,
            clock,
        })
    }

    /// Runs `op` on the writer inside a savepoint of the next batch and returns its
    /// result once the batch's commit is durable.
    async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut WriteCtx) -> BoxFuture<'c, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |ctx| {
            Box::pin(async move {
                let outcome = op(ctx).await;
                let ok = outcome.is_ok();
                let finish: Finish = Box::new(move |commit| {
                    let _ = tx.send(match commit {
                        Ok(()) => outcome,
                        Err(e) => Err(StoreError::Corrupt(format!("commit failed: {e}"))),
                    });
                });
                (ok, finish)
            })
        });
        self.writer
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable)?;
        rx.await.map_err(|_| StoreError::Unavailable)?
    }
}

async fn run_writer(
    mut ctx: WriteCtx,
    mut jobs: mpsc::Receiver<Job>,
    events: broadcast::Sender<QuestEvent>,
    clock: Arc<dyn Clock>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        ctx.now = clock.now();
        ctx.events.clear();
        if let Err(e) = exec(&mut ctx.conn, "BEGIN IMMEDIATE").await {
            tracing::error!(error = %e, "cannot begin a write transaction");
            batch.clear(); // dropping a job drops its reply channel: the caller sees Unavailable
            continue;
        }
        let mut finishers = Vec::with_capacity(batch.len());
        let mut broken: Option<String> = None;
        for job in batch.drain(..) {
            let mark = ctx.events.len();
            if let Err(e) = exec(&mut ctx.conn, "SAVEPOINT job").await {
                broken.get_or_insert(e.to_string());
            }
            let (ok, finish) = job(&mut ctx).await;
            if !ok {
                ctx.events.truncate(mark);
                if let Err(e) = exec(&mut ctx.conn, "ROLLBACK TO job").await {
                    broken.get_or_insert(e.to_string());
                }
            }
            if let Err(e) = exec(&mut ctx.conn, "RELEASE job").await {
                broken.get_or_insert(e.to_string());
            }
            finishers.push(finish);
        }
        let outcome = match broken {
            None => exec(&mut ctx.conn, "COMMIT")
                .await
                .map_err(|e| e.to_string()),
            Some(e) => Err(e),
        };
        if let Err(e) = &outcome {
            tracing::error!(error = %e, "write batch failed; rolling back");
            let _ = exec(&mut ctx.conn, "ROLLBACK").await;
        } else {
            for event in ctx.events.drain(..) {
                let _ = events.send(event);
            }
        }
        for finish in finishers {
            finish(outcome.clone());
        }
    }
    let _ = ctx.conn.close().await;
}

async fn exec(conn: &mut SqliteConnection, sql: &'static str) -> Result<(), sqlx::Error> {
    sqlx::query(sql).execute(conn).await.map(|_| ())
}

// Encoding ----------------------------------------------------------------------

/// Times are stored as fixed-width RFC 3339 text, so text order is time order.
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time `{s}`: {e}")))
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("serialising plain data cannot fail")
}

fn from_json<T: DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("json: {e}")))
}

fn uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("uuid `{s}`: {e}")))
}

fn text<T: FromStr>(s: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .map_err(|e: T::Err| StoreError::Corrupt(e.to_string()))
}

/// Typed access to a row's columns.
trait RowExt {
    fn str(&self, col: &str) -> Result<String, StoreError>;
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, col: &str) -> Result<i64, StoreError>;
}

impl RowExt for SqliteRow {
    fn str(&self, col: &str) -> Result<String, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn opt_str(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }
    fn int(&self, col: &str) -> Result<i64, StoreError> {
        Ok(self.try_get(col)?)
    }
}

fn opt<T>(
    v: Option<String>,
    f: impl FnOnce(&str) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    v.as_deref().map(f).transpose()
}

const SESSION_COLUMNS: &str =
    "id, name, key_column, config, columns, source_name, total, created_by, created_at";

fn session_row(r: &SqliteRow) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: uuid(&r.str("id")?)?,
        name: r.str("name")?,
        key_column: r.str("key_column")?,
        config: from_json(&r.str("config")?)?,
        columns: from_json(&r.str("columns")?)?,
        source_name: r.str("source_name")?,
        total: r.int("total")? as u64,
        created_by: r.str("created_by")?,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}

fn quest_row(r: &SqliteRow) -> Result<QuestRow, StoreError> {
    Ok(QuestRow {
        id: uuid(&r.str("id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        row_index: r.int("row_index")? as u64,
        key: r.str("key")?,
        input: from_json(&r.str("input")?)?,
        state: text(&r.str("state")?)?,
        phase: opt(r.opt_str("phase")?, text)?,
        tries: r.int("tries")? as u32,
        lapses: r.int("lapses")? as u32,
        lease_id: opt(r.opt_str("lease_id")?, uuid)?,
        last_facts: from_json(&r.str("last_facts")?)?,
        result: opt(r.opt_str("result")?, from_json)?,
        submission_id: opt(r.opt_str("submission_id")?, uuid)?,
        receipt: r.opt_str("receipt")?,
        decided_by: r.opt_str("decided_by")?,
        review_claimed_by: r.opt_str("review_claimed_by")?,
        review_claim_expires_at: opt(r.opt_str("review_claim_expires_at")?, parse_ts)?,
        updated_at: parse_ts(&r.str("updated_at")?)?,
    })
}

fn lease_row(r: &SqliteRow) -> Result<LeaseRow, StoreError> {
    Ok(LeaseRow {
        id: uuid(&r.str("id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        agent: r.str("agent")?,
        expires_at: parse_ts(&r.str("expires_at")?)?,
    })
}

fn submission_row(r: &SqliteRow) -> Result<SubmissionRow, StoreError> {
    Ok(SubmissionRow {
        id: uuid(&r.str("id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        lease_id: uuid(&r.str("lease_id")?)?,
        agent: r.str("agent")?,
        result: from_json(&r.str("result")?)?,
        verdict: text(&r.str("verdict")?)?,
        facts: from_json(&r.str("facts")?)?,
        evidence: from_json(&r.str("evidence")?)?,
        gate: r.opt_str("gate")?,
        gate_version: r.opt_str("gate_version")?,
        receipt: r.opt_str("receipt")?,
        state_after: opt(r.opt_str("state_after")?, text)?,
        tries_after: r
            .try_get::<Option<i64>, _>("tries_after")?
            .map(|n| n as u32),
        created_at: parse_ts(&r.str("created_at")?)?,
        decided_at: opt(r.opt_str("decided_at")?, parse_ts)?,
    })
}

fn token_row(r: &SqliteRow) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        id: uuid(&r.str("id")?)?,
        name: r.str("name")?,
        role: text(&r.str("role")?)?,
        hash: r.str("hash")?,
        created_at: parse_ts(&r.str("created_at")?)?,
        revoked_at: opt(r.opt_str("revoked_at")?, parse_ts)?,
    })
}

fn status_of(q: &QuestRow) -> QuestStatus {
    QuestStatus {
        state: q.state,
        phase: q.phase,
        tries: q.tries,
        lapses: q.lapses,
    }
}

fn transition(q: &QuestRow, t: Transition) -> Result<QuestStatus, StoreError> {
    status_of(q)
        .apply(t)
        .map_err(|e| StoreError::conflict("illegal_transition", e.to_string()))
}

// Queries shared by reads and writes ---------------------------------------------

async fn fetch_quest(conn: &mut SqliteConnection, id: Uuid) -> Result<QuestRow, StoreError> {
    let row = sqlx::query("SELECT * FROM quests WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_submission(
    conn: &mut SqliteConnection,
    id: Uuid,
) -> Result<SubmissionRow, StoreError> {
    let row = sqlx::query("SELECT * FROM submissions WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    submission_row(&row)
}

async fn fetch_session(conn: &mut SqliteConnection, id: Uuid) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    session_row(&row)
}

/// Writes a quest's state, phase, tries, lapses and lease pointer.
async fn save_status(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    next: QuestStatus,
    lease_id: Option<Uuid>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE quests SET state = ?, phase = ?, tries = ?, lapses = ?, lease_id = ?, updated_at = ? WHERE id = ?",
    )
    .bind(next.state.as_str())
    .bind(next.phase.map(|p| p.as_str()))
    .bind(next.tries as i64)
    .bind(next.lapses as i64)
    .bind(lease_id.map(|l| l.to_string()))
    .bind(ts(ctx.now))
    .bind(quest_id.to_string())
    .execute(&mut ctx.conn)
    .await?;
    Ok(())
}

async fn end_lease(ctx: &mut WriteCtx, lease_id: Uuid, reason: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE leases SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL")
        .bind(ts(ctx.now))
        .bind(reason)
        .bind(lease_id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    Ok(())
}

impl WriteCtx {
    fn event(
        &mut self,
        kind: EventKind,
        q: &QuestRow,
        next: QuestStatus,
        submission: Option<&SubmissionRow>,
    ) {
        self.events.push(QuestEvent {
            kind,
            session_id: q.session_id,
            quest_id: Some(q.id),
            submission_id: submission.map(|s| s.id),
            state: Some(next.state),
            phase: next.phase,
            verdict: submission.and_then(|s| match s.verdict {
                SubmissionVerdict::Pass => Some(Verdict::Pass),
                SubmissionVerdict::Fail => Some(Verdict::Fail),
                SubmissionVerdict::Review => Some(Verdict::Review),
                SubmissionVerdict::Pending => None,
            }),
            at: self.now,
        });
    }
}

/// Returns every expired lease of `session` (or of all sessions) to `open`, or
/// ends its quest in DONE once `max_lapses` is reached.
async fn sweep(ctx: &mut WriteCtx, session: Option<Uuid>) -> Result<u64, StoreError> {
    let rows = sqlx::query(
        // Driven by the partial index of live leases by expiry; quests by primary key.
        "SELECT q.*, s.max_lapses FROM leases l INDEXED BY leases_live_by_expiry
         JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id AND q.phase = 'leased'
         JOIN sessions s ON s.id = q.session_id
         WHERE l.ended_at IS NULL AND l.expires_at <= ?1 AND (?2 IS NULL OR l.session_id = ?2)",
    )
    .bind(ts(ctx.now))
    .bind(session.map(|s| s.to_string()))
    .fetch_all(&mut ctx.conn)
    .await?;
    for row in &rows {
        let quest = quest_row(row)?;
        let max_lapses = row.int("max_lapses")? as u32;
        let next = transition(&quest, Transition::Lapse { max_lapses })?;
        let lease_id = quest
            .lease_id
            .ok_or_else(|| StoreError::Corrupt("leased quest without lease".into()))?;
        if next.state == State::Done {
            let fact = Fact::new(
                "lapses",
                "",
                format!("a submission before the lease expires (at most {max_lapses} expiries)"),
                format!("the lease expired {} times", next.lapses),
                "the quest was abandoned too often and has ended; a person can look at it in the export",
            );
            sqlx::query("UPDATE quests SET decided_by = ?, last_facts = ? WHERE id = ?")
                .bind(DecidedBy::Limit.to_string())
                .bind(json(&[fact]))
                .bind(quest.id.to_string())
                .execute(&mut ctx.conn)
                .await?;
        }
        save_status(ctx, quest.id, next, None).await?;
        end_lease(ctx, lease_id, "expired").await?;
        ctx.event(EventKind::Lapsed, &quest, next, None);
    }
    Ok(rows.len() as u64)
}

async fn live_lease(
    ctx: &mut WriteCtx,
    session_id: Uuid,
    agent: &str,
) -> Result<Option<LeaseRow>, StoreError> {
    let row = sqlx::query(
        "SELECT id, quest_id, agent, expires_at FROM leases
         WHERE session_id = ? AND agent = ? AND ended_at IS NULL LIMIT 1",
    )
    .bind(session_id.to_string())
    .bind(agent)
    .fetch_optional(&mut ctx.conn)
    .await?;
    row.as_ref().map(lease_row).transpose()
}

/// Whether the last two FAILs of a quest carried the same facts.
async fn repeated_failure(conn: &mut SqliteConnection, quest_id: Uuid) -> Result<bool, StoreError> {
    let facts: Vec<String> = sqlx::query_scalar(
        "SELECT facts FROM submissions WHERE quest_id = ? AND verdict = 'FAIL' ORDER BY created_at DESC, id DESC LIMIT 2",
    )
    .bind(quest_id.to_string())
    .fetch_all(conn)
    .await?;
    Ok(facts.len() == 2 && facts[0] == facts[1])
}

async fn assigned(ctx: &mut WriteCtx, lease: LeaseRow) -> Result<LeaseOutcome, StoreError> {
    let quest = fetch_quest(&mut ctx.conn, lease.quest_id).await?;
    let repeated_failure = repeated_failure(&mut ctx.conn, quest.id).await?;
    Ok(LeaseOutcome::Assigned {
        quest,
        lease,
        repeated_failure,
    })
}

async fn lease_next(
    ctx: &mut WriteCtx,
    session_id: Uuid,
    agent: String,
) -> Result<LeaseOutcome, StoreError> {
    let lease_seconds = session_lease_seconds(ctx, session_id).await?;
    sweep(ctx, Some(session_id)).await?;
    if let Some(lease) = live_lease(ctx, session_id, &agent).await? {
        return assigned(ctx, lease).await;
    }
    let lease_id = Uuid::now_v7();
    // The claim is one statement; the phase it writes comes from the transition function.
    let leased = QuestStatus::new()
        .apply(Transition::Lease)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let claimed = sqlx::query(
        "UPDATE quests SET phase = ?4, lease_id = ?1, updated_at = ?2
         WHERE id = (SELECT id FROM quests WHERE session_id = ?3 AND phase = 'open' ORDER BY row_index LIMIT 1)
         RETURNING *",
    )
    .bind(lease_id.to_string())
    .bind(ts(ctx.now))
    .bind(session_id.to_string())
    .bind(leased.phase.map(|p| p.as_str()))
    .fetch_optional(&mut ctx.conn)
    .await?;
    if let Some(row) = claimed {
        let quest = quest_row(&row)?;
        let expires_at = ctx.now + chrono::Duration::seconds(lease_seconds);
        sqlx::query(
            "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(lease_id.to_string())
        .bind(quest.id.to_string())
        .bind(session_id.to_string())
        .bind(&agent)
        .bind(ts(ctx.now))
        .bind(ts(expires_at))
        .execute(&mut ctx.conn)
        .await?;
        let status = status_of(&quest);
        ctx.event(EventKind::Leased, &quest, status, None);
        let repeated_failure = repeated_failure(&mut ctx.conn, quest.id).await?;
        let lease = LeaseRow {
            id: lease_id,
            quest_id: quest.id,
            agent,
            expires_at,
        };
        return Ok(LeaseOutcome::Assigned {
            quest,
            lease,
            repeated_failure,
        });
    }
    let counts = counts(&mut ctx.conn, session_id).await?;
    if counts.remaining() == 0 {
        return Ok(LeaseOutcome::Finished);
    }
    let next_expiry: Option<String> = sqlx::query_scalar(
        "SELECT MIN(expires_at) FROM leases WHERE session_id = ? AND ended_at IS NULL",
    )
    .bind(session_id.to_string())
    .fetch_one(&mut ctx.conn)
    .await?;
    let until_expiry =
        opt(next_expiry, parse_ts)?.map(|t| (t - ctx.now).num_seconds().max(1) as u32);
    let retry_after_seconds = until_expiry.unwrap_or(5).clamp(1, 30);
    Ok(LeaseOutcome::Wait {
        retry_after_seconds,
    })
}

/// Whether an agent (`<token id>/<name>`) belongs to a token.
fn belongs_to(agent: &str, token_id: Uuid) -> bool {
    agent
        .split_once('/')
        .is_some_and(|(token, _)| token == token_id.to_string())
}

/// Loads the lease `lease_id` of `quest` and checks that an agent of `token_id` holds it now.
async fn held_lease(
    ctx: &mut WriteCtx,
    quest: &QuestRow,
    lease_id: Uuid,
    token_id: Uuid,
) -> Result<LeaseRow, StoreError> {
    if quest.state.is_terminal() {
        return Err(StoreError::conflict(
            "quest_locked",
            format!(
                "the quest is {} and can no longer change; call next for another quest",
                quest.state
            ),
        ));
    }
    if quest.phase == Some(Phase::Verifying) {
        return Err(StoreError::conflict(
            "quest_verifying",
            "the gate passed this quest and AI verifiers are checking it; it is no longer yours: call next for another quest",
        ));
    }
    let row = sqlx::query("SELECT id, quest_id, agent, expires_at, end_reason FROM leases WHERE id = ? AND quest_id = ?")
        .bind(lease_id.to_string())
        .bind(quest.id.to_string())
        .fetch_optional(&mut ctx.conn)
        .await?;
    let lost = || {
        StoreError::conflict(
            "lease_lost",
            "you do not hold this quest's lease (it was released, expired and re-leased, or belongs to another agent); call next",
        )
    };
    let Some(row) = row else { return Err(lost()) };
    let lease = lease_row(&row)?;
    let expired = || {
        StoreError::conflict(
            "lease_expired",
            "the lease expired before this request; call next to lease a quest again",
        )
    };
    if row.opt_str("end_reason")?.as_deref() == Some("expired") {
        return Err(expired());
    }
    if quest.lease_id != Some(lease_id) || !belongs_to(&lease.agent, token_id) {
        return Err(lost());
    }
    if lease.expires_at <= ctx.now && quest.phase == Some(Phase::Leased) {
        return Err(expired());
    }
    Ok(lease)
}

/// A session's lease time: the one column the claim and heartbeat need, read
/// without parsing the session's whole config on the writer's hottest path.
async fn session_lease_seconds(ctx: &mut WriteCtx, session_id: Uuid) -> Result<i64, StoreError> {
    sqlx::query_scalar("SELECT lease_seconds FROM sessions WHERE id = ?")
        .bind(session_id.to_string())
        .fetch_optional(&mut ctx.conn)
        .await?
        .ok_or(StoreError::NotFound("session"))
}

async fn heartbeat(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    lease_id: Uuid,
    token_id: Uuid,
) -> Result<LeaseRow, StoreError> {
    let quest = fetch_quest(&mut ctx.conn, quest_id).await?;
    let mut lease = held_lease(ctx, &quest, lease_id, token_id).await?;
    let seconds = session_lease_seconds(ctx, quest.session_id).await?;
    lease.expires_at = ctx.now + chrono::Duration::seconds(seconds);
    sqlx::query("UPDATE leases SET expires_at = ? WHERE id = ?")
        .bind(ts(lease.expires_at))
        .bind(lease_id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    Ok(lease)
}

async fn release(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    lease_id: Uuid,
    token_id: Uuid,
) -> Result<(), StoreError> {
    let quest = fetch_quest(&mut ctx.conn, quest_id).await?;
    held_lease(ctx, &quest, lease_id, token_id).await?;
    if quest.phase == Some(Phase::Checking) {
        return Err(StoreError::conflict(
            "quest_checking",
            "the gate is checking your submission; wait for its verdict",
        ));
    }
    let next = transition(&quest, Transition::Release)?;
    save_status(ctx, quest.id, next, None).await?;
    end_lease(ctx, lease_id, "released").await?;
    ctx.event(EventKind::Released, &quest, next, None);
    Ok(())
}

async fn submit(ctx: &mut WriteCtx, new: NewSubmission) -> Result<SubmitOutcome, StoreError> {
    let quest = fetch_quest(&mut ctx.conn, new.quest_id).await?;
    let latest = sqlx::query(
        "SELECT * FROM submissions WHERE quest_id = ? ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(quest.id.to_string())
    .fetch_optional(&mut ctx.conn)
    .await?;
    if let Some(row) = latest {
        let latest = submission_row(&row)?;
        let hash: String = row.try_get("result_hash")?;
        if latest.lease_id == new.lease_id
            && hash == new.result_hash
            && belongs_to(&latest.agent, new.token_id)
        {
            return Ok(SubmitOutcome::Replayed(latest));
        }
    }
    let lease = held_lease(ctx, &quest, new.lease_id, new.token_id).await?;
    if quest.phase == Some(Phase::Checking) {
        return Err(StoreError::conflict(
            "submission_in_progress",
            "the gate is still checking your previous submission; poll it or wait for its verdict",
        ));
    }
    let next = transition(&quest, Transition::Submit)?;
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(id.to_string())
    .bind(quest.id.to_string())
    .bind(quest.session_id.to_string())
    .bind(new.lease_id.to_string())
    .bind(&lease.agent)
    .bind(json(&new.result))
    .bind(&new.result_hash)
    .bind(ts(ctx.now))
    .execute(&mut ctx.conn)
    .await?;
    save_status(ctx, quest.id, next, Some(new.lease_id)).await?;
    let submission = fetch_submission(&mut ctx.conn, id).await?;
    ctx.event(EventKind::Submitted, &quest, next, Some(&submission));
    Ok(SubmitOutcome::Recorded(submission))
}

async fn apply_verdict(
    ctx: &mut WriteCtx,
    submission_id: Uuid,
    d: GateDecision,
) -> Result<Decided, StoreError> {
    let submission = fetch_submission(&mut ctx.conn, submission_id).await?;
    let quest = fetch_quest(&mut ctx.conn, submission.quest_id).await?;
    if submission.verdict != SubmissionVerdict::Pending {
        return Ok(Decided {
            submission,
            quest,
            l2_jobs: Vec::new(),
        });
    }
    if quest.lease_id != Some(submission.lease_id) || quest.phase != Some(Phase::Checking) {
        return Err(StoreError::Corrupt(format!(
            "pending submission {submission_id} whose quest is not checking it"
        )));
    }
    let session = fetch_session(&mut ctx.conn, quest.session_id).await?;
    // Only an L1 PASS goes on to the verifiers; FAIL and REVIEW never reach them.
    let verify = session
        .config
        .verify
        .as_ref()
        .filter(|_| d.verdict == Verdict::Pass);
    let next = transition(
        &quest,
        Transition::Decide {
            verdict: d.verdict,
            max_tries: session.config.max_tries,
            verify: verify.is_some(),
        },
    )?;
    sqlx::query(
        "UPDATE submissions SET verdict = ?, facts = ?, evidence = ?, gate = ?, gate_version = ?, receipt = ?,
         state_after = ?, tries_after = ?, decided_at = ? WHERE id = ?",
    )
    .bind(d.verdict.as_str())
    .bind(json(&d.facts))
    .bind(json(&d.evidence))
    .bind(&d.gate)
    .bind(&d.gate_version)
    .bind(&d.receipt)
    .bind(next.state.as_str())
    .bind(next.tries as i64)
    .bind(ts(ctx.now))
    .bind(submission_id.to_string())
    .execute(&mut ctx.conn)
    .await?;

    let keeps_lease = next.phase == Some(Phase::Leased);
    let (result, receipt, decided_by) = match (next.state, next.phase) {
        (State::Pass, _) => (
            Some(json(&submission.result)),
            Some(d.receipt.clone()),
            Some(DecidedBy::Gate.to_string()),
        ),
        // REVIEW, or verifying: the result under review is kept, not yet accepted.
        (State::Review, _) | (State::Todo, Some(Phase::Verifying)) => {
            (Some(json(&submission.result)), None, None)
        }
        (State::Done, _) => (None, None, Some(DecidedBy::Limit.to_string())),
        (State::Todo, _) => (None, None, None),
    };
    // Terminal fields first, while the quest is still TODO: the triggers freeze them after.
    sqlx::query("UPDATE quests SET last_facts = ?, result = ?, submission_id = ?, receipt = ?, decided_by = ? WHERE id = ?")
        .bind(json(&d.facts))
        .bind(result)
        .bind(submission_id.to_string())
        .bind(receipt)
        .bind(decided_by)
        .bind(quest.id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    save_status(
        ctx,
        quest.id,
        next,
        keeps_lease.then_some(submission.lease_id),
    )
    .await?;
    if keeps_lease {
        let seconds = session.config.lease_seconds as i64;
        sqlx::query("UPDATE leases SET expires_at = ? WHERE id = ?")
            .bind(ts(ctx.now + chrono::Duration::seconds(seconds)))
            .bind(submission.lease_id.to_string())
            .execute(&mut ctx.conn)
            .await?;
    } else {
        // Verifying too: the agent's part is over and the quest is no longer its own.
        end_lease(ctx, submission.lease_id, "decided").await?;
    }
    let mut l2_jobs = Vec::new();
    if let (Some(verify), Some(Phase::Verifying)) = (verify, next.phase) {
        let request = d.verify.as_ref().ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the PASS of submission {submission_id} came without what its verifiers may see"
            ))
        })?;
        let request = json(request);
        for verifier in &verify.verifiers {
            for (index, question) in verify.questions.iter().enumerate() {
                let id = Uuid::now_v7();
                sqlx::query(
                    "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index, question, flag_on, request, created_at)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(id.to_string())
                .bind(submission_id.to_string())
                .bind(quest.id.to_string())
                .bind(quest.session_id.to_string())
                .bind(verifier)
                .bind(index as i64)
                .bind(&question.text)
                .bind(question.flag_on.as_str())
                .bind(&request)
                .bind(ts(ctx.now))
                .execute(&mut ctx.conn)
                .await?;
                l2_jobs.push(id);
            }
        }
    }
    let submission = fetch_submission(&mut ctx.conn, submission_id).await?;
    let quest = fetch_quest(&mut ctx.conn, quest.id).await?;
    ctx.event(EventKind::Decided, &quest, next, Some(&submission));
    Ok(Decided {
        submission,
        quest,
        l2_jobs,
    })
}

fn l2_job_row(r: &SqliteRow) -> Result<L2Job, StoreError> {
    Ok(L2Job {
        id: uuid(&r.str("id")?)?,
        submission_id: uuid(&r.str("submission_id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        verifier: r.str("verifier")?,
        question_index: r.int("question_index")? as u32,
        question: r.str("question")?,
        flag_on: flag_on(&r.str("flag_on")?)?,
        request: from_json(&r.str("request")?)?,
        answered: r.str("status")? == "answered",
    })
}

fn flag_on(s: &str) -> Result<verify::FlagOn, StoreError> {
    s.parse()
        .map_err(|e: crate::domain::UnknownValue| StoreError::Corrupt(e.to_string()))
}

fn l2_answer_row(r: &SqliteRow) -> Result<L2AnswerRow, StoreError> {
    Ok(L2AnswerRow {
        job_id: uuid(&r.str("job_id")?)?,
        submission_id: uuid(&r.str("submission_id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        verifier: r.str("verifier")?,
        model: r.str("model")?,
        question_index: r.int("question_index")? as u32,
        question: r.str("question")?,
        flag_on: flag_on(&r.str("flag_on")?)?,
        raw_reply: r.opt_str("raw_reply")?,
        answer: opt(r.opt_str("answer")?, |a| {
            a.parse::<verify::Answer>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))
        })?,
        detail: r.str("detail")?,
        flagged: r.int("flagged")? != 0,
        attempts: r.int("attempts")? as u32,
        latency_ms: r.int("latency_ms")? as u64,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}

async fn fetch_l2_job(conn: &mut SqliteConnection, id: Uuid) -> Result<L2Job, StoreError> {
    let row = sqlx::query("SELECT * FROM l2_jobs WHERE id = ?")
        .bind(id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

async fn fetch_l2_answer(
    conn: &mut SqliteConnection,
    job_id: Uuid,
) -> Result<L2AnswerRow, StoreError> {
    let row = sqlx::query("SELECT * FROM l2_answers WHERE job_id = ?")
        .bind(job_id.to_string())
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("L2 answer"))?;
    l2_answer_row(&row)
}

async fn record_l2_answer(ctx: &mut WriteCtx, new: NewL2Answer) -> Result<L2Recorded, StoreError> {
    let job = fetch_l2_job(&mut ctx.conn, new.job_id).await?;
    if job.answered {
        return Ok(L2Recorded {
            answer: fetch_l2_answer(&mut ctx.conn, job.id).await?,
            compared: Vec::new(),
            verified: None,
            replayed: true,
        });
    }
    let quest = fetch_quest(&mut ctx.conn, job.quest_id).await?;
    if quest.phase != Some(Phase::Verifying) || quest.submission_id != Some(job.submission_id) {
        return Err(StoreError::conflict(
            "not_verifying",
            format!("quest {} is not being verified for this job", quest.id),
        ));
    }
    let mut compared = Vec::new();
    if let Some(mine) = new.answer {
        let others = sqlx::query(
            "SELECT verifier, answer FROM l2_answers
             WHERE submission_id = ? AND question_index = ? AND verifier <> ? AND answer IS NOT NULL",
        )
        .bind(job.submission_id.to_string())
        .bind(job.question_index as i64)
        .bind(&job.verifier)
        .fetch_all(&mut ctx.conn)
        .await?;
        for row in others {
            let other = row.str("verifier")?;
            let agreed = row.str("answer")? == mine.as_str();
            let (a, b) = if other < job.verifier {
                (other, job.verifier.clone())
            } else {
                (job.verifier.clone(), other)
            };
            compared.push((a, b, agreed));
        }
    }
    let flagged = new.answer.is_some_and(|a| a.flags(job.flag_on));
    sqlx::query(
        "INSERT INTO l2_answers (job_id, submission_id, quest_id, session_id, verifier, model, question_index, question,
         flag_on, raw_reply, answer, detail, flagged, attempts, latency_ms, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(job.id.to_string())
    .bind(job.submission_id.to_string())
    .bind(job.quest_id.to_string())
    .bind(job.session_id.to_string())
    .bind(&job.verifier)
    .bind(&new.model)
    .bind(job.question_index as i64)
    .bind(&job.question)
    .bind(job.flag_on.as_str())
    .bind(&new.raw_reply)
    .bind(new.answer.map(|a| a.as_str()))
    .bind(&new.detail)
    .bind(flagged as i64)
    .bind(new.attempts as i64)
    .bind(new.latency_ms.min(i64::MAX as u64) as i64)
    .bind(ts(ctx.now))
    .execute(&mut ctx.conn)
    .await?;
    sqlx::query("UPDATE l2_jobs SET status = 'answered', answered_at = ? WHERE id = ?")
        .bind(ts(ctx.now))
        .bind(job.id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    let queued: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM l2_jobs WHERE submission_id = ? AND status = 'queued'",
    )
    .bind(job.submission_id.to_string())
    .fetch_one(&mut ctx.conn)
    .await?;
    let verified = if queued == 0 {
        Some(finish_verification(ctx, &quest, job.submission_id).await?)
    } else {
        None
    };
    Ok(L2Recorded {
        answer: fetch_l2_answer(&mut ctx.conn, job.id).await?,
        compared,
        verified,
        replayed: false,
    })
}

/// Every verifier has answered (or given up): apply the decision. L2 may only
/// pass the quest on or send it to REVIEW; tries and the result stay as they are.
async fn finish_verification(
    ctx: &mut WriteCtx,
    quest: &QuestRow,
    submission_id: Uuid,
) -> Result<QuestRow, StoreError> {
    let session = fetch_session(&mut ctx.conn, quest.session_id).await?;
    let verify = session
        .config
        .verify
        .ok_or_else(|| StoreError::Corrupt(format!("session {} has no verifiers", session.id)))?;
    // The questions as they were asked, from the jobs themselves.
    let asked = sqlx::query(
        "SELECT question_index, question, flag_on FROM l2_jobs WHERE submission_id = ?
         GROUP BY question_index ORDER BY question_index",
    )
    .bind(submission_id.to_string())
    .fetch_all(&mut ctx.conn)
    .await?;
    let mut questions = Vec::with_capacity(asked.len());
    for row in &asked {
        if row.int("question_index")? as usize != questions.len() {
            return Err(StoreError::Corrupt(format!(
                "the L2 questions of submission {submission_id} have a gap"
            )));
        }
        questions.push(Question {
            text: row.str("question")?,
            flag_on: flag_on(&row.str("flag_on")?)?,
        });
    }
    let outcomes = sqlx::query(
        "SELECT * FROM l2_answers WHERE submission_id = ? ORDER BY question_index, verifier",
    )
    .bind(submission_id.to_string())
    .fetch_all(&mut ctx.conn)
    .await?
    .iter()
    .map(|r| {
        let a = l2_answer_row(r)?;
        Ok(verify::Outcome {
            verifier: a.verifier,
            question_index: a.question_index as usize,
            answer: a.answer,
            reason: a.detail,
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    let decision = verify::decide(
        &questions,
        &outcomes,
        verify.flag_threshold,
        verify.quorum(),
    );
    let next = transition(
        quest,
        Transition::Verified {
            flagged: decision.flagged,
        },
    )?;
    let submission = fetch_submission(&mut ctx.conn, submission_id).await?;
    sqlx::query(
        "INSERT INTO l2_decisions (submission_id, quest_id, session_id, state_after, facts, decided_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(submission_id.to_string())
    .bind(quest.id.to_string())
    .bind(quest.session_id.to_string())
    .bind(next.state.as_str())
    .bind(json(&decision.facts))
    .bind(ts(ctx.now))
    .execute(&mut ctx.conn)
    .await?;
    let mut facts = submission.facts.clone();
    facts.extend(decision.facts);
    let (receipt, decided_by) = match next.state {
        State::Pass => (
            submission.receipt.clone(),
            Some(DecidedBy::Gate.to_string()),
        ),
        _ => (None, None),
    };
    sqlx::query("UPDATE quests SET last_facts = ?, receipt = ?, decided_by = ? WHERE id = ?")
        .bind(json(&facts))
        .bind(receipt)
        .bind(decided_by)
        .bind(quest.id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    save_status(ctx, quest.id, next, None).await?;
    ctx.event(EventKind::Verified, quest, next, Some(&submission));
    fetch_quest(&mut ctx.conn, quest.id).await
}

async fn release_review(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    reviewer: String,
) -> Result<(), StoreError> {
    let quest = fetch_quest(&mut ctx.conn, quest_id).await?;
    check_reviewable(ctx, &quest, &reviewer)?;
    sqlx::query(
        "UPDATE quests SET review_claimed_by = NULL, review_claim_expires_at = NULL
         WHERE id = ? AND review_claimed_by = ?",
    )
    .bind(quest_id.to_string())
    .bind(&reviewer)
    .execute(&mut ctx.conn)
    .await?;
    Ok(())
}

async fn claim_review(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    reviewer: String,
    seconds: u32,
) -> Result<QuestRow, StoreError> {
    let quest = fetch_quest(&mut ctx.conn, quest_id).await?;
    check_reviewable(ctx, &quest, &reviewer)?;
    sqlx::query(
        "UPDATE quests SET review_claimed_by = ?, review_claim_expires_at = ? WHERE id = ?",
    )
    .bind(&reviewer)
    .bind(ts(ctx.now + chrono::Duration::seconds(seconds as i64)))
    .bind(quest_id.to_string())
    .execute(&mut ctx.conn)
    .await?;
    fetch_quest(&mut ctx.conn, quest_id).await
}

fn check_reviewable(ctx: &WriteCtx, quest: &QuestRow, reviewer: &str) -> Result<(), StoreError> {
    if quest.state != State::Review {
        return Err(StoreError::conflict(
            "not_in_review",
            format!(
                "the quest is {}, not REVIEW; only REVIEW quests can be claimed or decided",
                quest.state
            ),
        ));
    }
    let claimed_by_other = quest
        .review_claimed_by
        .as_deref()
        .is_some_and(|r| r != reviewer)
        && quest.review_claim_expires_at.is_some_and(|t| t > ctx.now);
    if claimed_by_other {
        return Err(StoreError::conflict(
            "review_claimed",
            format!(
                "{} is reviewing this quest until {}; pick another one",
                quest.review_claimed_by.as_deref().unwrap_or_default(),
                quest.review_claim_expires_at.map(ts).unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

async fn decide_review(
    ctx: &mut WriteCtx,
    quest_id: Uuid,
    reviewer: String,
    decision: Decision,
    note: String,
) -> Result<QuestRow, StoreError> {
    let quest = fetch_quest(&mut ctx.conn, quest_id).await?;
    check_reviewable(ctx, &quest, &reviewer)?;
    let next = transition(&quest, Transition::Reviewed(decision))?;
    let receipt: Option<String> = match (decision, quest.submission_id) {
        (Decision::Approve, Some(sub)) => fetch_submission(&mut ctx.conn, sub).await?.receipt,
        _ => None,
    };
    sqlx::query("UPDATE quests SET receipt = ?, decided_by = ?, review_claimed_by = NULL, review_claim_expires_at = NULL WHERE id = ?")
        .bind(receipt)
        .bind(DecidedBy::Reviewer(reviewer.clone()).to_string())
        .bind(quest_id.to_string())
        .execute(&mut ctx.conn)
        .await?;
    save_status(ctx, quest_id, next, None).await?;
    sqlx::query("INSERT INTO review_decisions (id, quest_id, reviewer, decision, note, created_at) VALUES (?, ?, ?, ?, ?, ?)")
        .bind(Uuid::now_v7().to_string())
        .bind(quest_id.to_string())
        .bind(&reviewer)
        .bind(decision.as_str())
        .bind(&note)
        .bind(ts(ctx.now))
        .execute(&mut ctx.conn)
        .await?;
    ctx.event(EventKind::Reviewed, &quest, next, None);
    fetch_quest(&mut ctx.conn, quest_id).await
}

async fn create_session(ctx: &mut WriteCtx, s: NewSession) -> Result<Uuid, StoreError> {
    sqlx::query(
        "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name, source_type,
         total, max_tries, max_lapses, lease_seconds, created_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(s.id.to_string())
    .bind(&s.name)
    .bind(&s.key_column)
    .bind(&s.config.gate.kind)
    .bind(json(&s.config))
    .bind(json(&s.columns))
    .bind(&s.source_name)
    .bind(&s.source_type)
    .bind(s.rows.len() as i64)
    .bind(s.config.max_tries as i64)
    .bind(s.config.max_lapses as i64)
    .bind(s.config.lease_seconds as i64)
    .bind(&s.created_by)
    .bind(ts(ctx.now))
    .execute(&mut ctx.conn)
    .await?;
    // The file lives apart from the session row, which every lease and submit reads.
    sqlx::query("INSERT INTO session_sources (session_id, source) VALUES (?, ?)")
        .bind(s.id.to_string())
        .bind(&s.source)
        .execute(&mut ctx.conn)
        .await?;
    let now = ts(ctx.now);
    let session_id = s.id.to_string();
    // Many rows per statement: a large scan holds the writer for far less time.
    const ROWS_PER_INSERT: usize = 200;
    let rows: Vec<(usize, &(String, Map<String, Value>))> = s.rows.iter().enumerate().collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let values = vec!["(?, ?, ?, ?, ?, 'TODO', 'open', ?)"; chunk.len()].join(", ");
        let sql = format!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at) VALUES {values}"
        );
        let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (index, (key, input)) in chunk {
            insert = insert
                .bind(Uuid::now_v7().to_string())
                .bind(&session_id)
                .bind(*index as i64)
                .bind(key)
                .bind(json(input))
                .bind(&now);
        }
        insert.execute(&mut ctx.conn).await?;
    }
    ctx.events.push(QuestEvent {
        kind: EventKind::SessionCreated,
        session_id: s.id,
        quest_id: None,
        submission_id: None,
        state: None,
        phase: None,
        verdict: None,
        at: ctx.now,
    });
    Ok(s.id)
}

/// The session's counters; `total` is the number of rows the scan stored, so a
/// counter that drifted shows as a broken sum instead of hiding in it.
async fn counts(conn: &mut SqliteConnection, session_id: Uuid) -> Result<Counts, StoreError> {
    let rows = sqlx::query("SELECT bucket, n FROM session_counts WHERE session_id = ?")
        .bind(session_id.to_string())
        .fetch_all(&mut *conn)
        .await?;
    let total: i64 = sqlx::query_scalar("SELECT total FROM sessions WHERE id = ?")
        .bind(session_id.to_string())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    let mut c = Counts {
        total: total as u64,
        ..Counts::default()
    };
    for row in rows {
        let n = row.int("n")? as u64;
        match row.str("bucket")?.as_str() {
            "TODO/open" => c.open = n,
            "TODO/leased" => c.leased = n,
            "TODO/checking" => c.checking = n,
            "TODO/verifying" => c.verifying = n,
            "PASS" => c.pass = n,
            "REVIEW" => c.review = n,
            "DONE" => c.done = n,
            "submissions" => c.submissions = n,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "unknown count bucket `{other}`"
                )));
            }
        }
    }
    Ok(c)
}

/// Runs a write closure through the writer: `write!(self, |ctx| body)`.
macro_rules! write {
    ($store:expr, |$ctx:ident| $body:expr) => {
        $store
            .write(move |$ctx: &mut WriteCtx| Box::pin(async move { $body }))
            .await
    };
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        // The writer must answer too: a server that cannot write is not ready.
        write!(self, |ctx| {
            sqlx::query("SELECT 1").execute(&mut ctx.conn).await?;
            Ok(())
        })
    }

    async fn create_session(&self, session: NewSession) -> Result<SessionRow, StoreError> {
        let id = write!(self, |ctx| create_session(ctx, session).await)?;
        self.get_session(id).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        let sql =
            format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC, id DESC");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(session_row).collect()
    }

    async fn get_session(&self, id: Uuid) -> Result<SessionRow, StoreError> {
        fetch_session(&mut *self.read.acquire().await?, id).await
    }

    async fn session_source(&self, id: Uuid) -> Result<(String, String, Vec<u8>), StoreError> {
        let row = sqlx::query(
            "SELECT s.source_name, s.source_type, f.source FROM sessions s
             JOIN session_sources f ON f.session_id = s.id WHERE s.id = ?",
        )
        .bind(id.to_string())
        .fetch_optional(&self.read)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
        Ok((
            row.str("source_name")?,
            row.str("source_type")?,
            row.try_get("source")?,
        ))
    }

    async fn session_status(&self, id: Uuid) -> Result<SessionStatus, StoreError> {
        // One read transaction: every figure comes from the same snapshot.
        let mut tx = self.read.begin().await?;
        fetch_session(&mut tx, id).await?;
        let counts = counts(&mut tx, id).await?;
        let now = self.clock.now();
        let agents_active: i64 = sqlx::query_scalar(
            "SELECT COUNT(DISTINCT agent) FROM leases WHERE session_id = ? AND ended_at IS NULL AND expires_at > ?",
        )
        .bind(id.to_string())
        .bind(ts(now))
        .fetch_one(&mut *tx)
        .await?;
        let window_minutes = 5;
        // Quests finished by their gate, plus those the AI verifiers finished.
        let finished: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM submissions WHERE session_id = ?1 AND decided_at > ?2 AND state_after <> 'TODO')
                  + (SELECT COUNT(*) FROM l2_decisions WHERE session_id = ?1 AND decided_at > ?2)",
        )
        .bind(id.to_string())
        .bind(ts(now - chrono::Duration::minutes(window_minutes)))
        .fetch_one(&mut *tx)
        .await?;
        let verifiers =
            sqlx::query("SELECT * FROM l2_verifier_stats WHERE session_id = ? ORDER BY verifier")
                .bind(id.to_string())
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| {
                    Ok(VerifierStats {
                        verifier: r.str("verifier")?,
                        model: r.str("model")?,
                        answers: r.int("answers")? as u64,
                        yes: r.int("yes")? as u64,
                        no: r.int("no")? as u64,
                        flags: r.int("flags")? as u64,
                        no_answers: r.int("no_answers")? as u64,
                        latency_ms_sum: r.int("latency_ms_sum")? as u64,
                        latency_ms_max: r.int("latency_ms_max")? as u64,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
        let agreement = sqlx::query(
            "SELECT * FROM l2_pair_stats WHERE session_id = ? ORDER BY verifier_a, verifier_b",
        )
        .bind(id.to_string())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(PairStats {
                a: r.str("verifier_a")?,
                b: r.str("verifier_b")?,
                compared: r.int("compared")? as u64,
                agreed: r.int("agreed")? as u64,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        tx.commit().await?;
        Ok(SessionStatus {
            counts,
            agents_active: agents_active as u64,
            rate_per_minute: finished as f64 / window_minutes as f64,
            verifiers,
            agreement,
        })
    }

    async fn lease_next(&self, session_id: Uuid, agent: &str) -> Result<LeaseOutcome, StoreError> {
        let agent = agent.to_owned();
        write!(self, |ctx| lease_next(ctx, session_id, agent).await)
    }

    async fn heartbeat(
        &self,
        quest_id: Uuid,
        lease_id: Uuid,
        token_id: Uuid,
    ) -> Result<LeaseRow, StoreError> {
        write!(self, |ctx| heartbeat(ctx, quest_id, lease_id, token_id)
            .await)
    }

    async fn release(
        &self,
        quest_id: Uuid,
        lease_id: Uuid,
        token_id: Uuid,
    ) -> Result<(), StoreError> {
        write!(self, |ctx| release(ctx, quest_id, lease_id, token_id).await)
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        write!(self, |ctx| sweep(ctx, None).await)
    }

    async fn submit(&self, submission: NewSubmission) -> Result<SubmitOutcome, StoreError> {
        write!(self, |ctx| submit(ctx, submission).await)
    }

    async fn apply_verdict(
        &self,
        submission_id: Uuid,
        decision: GateDecision,
    ) -> Result<Decided, StoreError> {
        write!(self, |ctx| apply_verdict(ctx, submission_id, decision)
            .await)
    }

    async fn pending_submissions(&self) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM submissions WHERE verdict = 'PENDING' ORDER BY created_at",
        )
        .fetch_all(&self.read)
        .await?;
        ids.iter().map(|s| uuid(s)).collect()
    }

    async fn gate_job(&self, submission_id: Uuid) -> Result<GateJob, StoreError> {
        let mut conn = self.read.acquire().await?;
        let submission = fetch_submission(&mut conn, submission_id).await?;
        let quest = fetch_quest(&mut conn, submission.quest_id).await?;
        let session = fetch_session(&mut conn, quest.session_id).await?;
        Ok(GateJob {
            submission,
            key: quest.key,
            input: quest.input,
            config: session.config,
        })
    }

    async fn result_holders(
        &self,
        session_id: Uuid,
        except: Uuid,
        field: &str,
        value: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        if !super::is_plain_field(field) {
            return Err(StoreError::Corrupt(format!(
                "`{field}` is not a plain result field name"
            )));
        }
        // The path is written out (not bound) so that the expression matches
        // an index on it, such as quests_result_email.
        let held = format!("lower(json_extract(result, '$.{field}'))");
        // `field` was checked above to be a plain name: safe to write into SQL.
        let keys: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT key FROM (
                 SELECT row_index, key FROM quests
                 WHERE session_id = ?1 AND id <> ?2 AND {held} = lower(?3)
                   AND (state IN ('PASS', 'REVIEW') OR phase = 'verifying')
                 UNION
                 SELECT q.row_index, q.key FROM submissions s JOIN quests q ON q.id = s.quest_id
                 WHERE s.verdict = 'PENDING' AND s.session_id = ?1 AND s.quest_id <> ?2
                   AND lower(json_extract(s.result, '$.{field}')) = lower(?3)
             ) ORDER BY row_index LIMIT ?4"
        )))
        .bind(session_id.to_string())
        .bind(except.to_string())
        .bind(value)
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        Ok(keys)
    }

    async fn get_submission(&self, id: Uuid) -> Result<SubmissionRow, StoreError> {
        fetch_submission(&mut *self.read.acquire().await?, id).await
    }

    async fn submission_view(&self, id: Uuid) -> Result<SubmissionView, StoreError> {
        let mut tx = self.read.begin().await?;
        let submission = fetch_submission(&mut tx, id).await?;
        let quest = fetch_quest(&mut tx, submission.quest_id).await?;
        let max_tries: i64 = sqlx::query_scalar("SELECT max_tries FROM sessions WHERE id = ?")
            .bind(quest.session_id.to_string())
            .fetch_one(&mut *tx)
            .await?;
        let remaining = counts(&mut tx, quest.session_id).await?.remaining();
        let lease = match quest.lease_id {
            Some(lease_id) => {
                sqlx::query("SELECT id, quest_id, agent, expires_at FROM leases WHERE id = ?")
                    .bind(lease_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?
                    .as_ref()
                    .map(lease_row)
                    .transpose()?
            }
            None => None,
        };
        tx.commit().await?;
        Ok(SubmissionView {
            submission,
            quest,
            max_tries: max_tries as u32,
            remaining,
            lease,
        })
    }

    async fn pending_l2_jobs(&self) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM l2_jobs WHERE status = 'queued' ORDER BY created_at, id",
        )
        .fetch_all(&self.read)
        .await?;
        ids.iter().map(|s| uuid(s)).collect()
    }

    async fn l2_job(&self, id: Uuid) -> Result<L2Job, StoreError> {
        fetch_l2_job(&mut *self.read.acquire().await?, id).await
    }

    async fn record_l2_answer(&self, answer: NewL2Answer) -> Result<L2Recorded, StoreError> {
        write!(self, |ctx| record_l2_answer(ctx, answer).await)
    }

    async fn l2_answers(&self, quest_id: Uuid) -> Result<Vec<L2AnswerRow>, StoreError> {
        sqlx::query(
            "SELECT * FROM l2_answers WHERE quest_id = ? ORDER BY created_at, question_index, verifier",
        )
        .bind(quest_id.to_string())
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(l2_answer_row)
        .collect()
    }

    async fn get_quest(&self, id: Uuid) -> Result<QuestRow, StoreError> {
        fetch_quest(&mut *self.read.acquire().await?, id).await
    }

    async fn quest_history(
        &self,
        id: Uuid,
    ) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
        let mut tx = self.read.begin().await?;
        fetch_quest(&mut tx, id).await?;
        let submissions =
            sqlx::query("SELECT * FROM submissions WHERE quest_id = ? ORDER BY created_at, id")
                .bind(id.to_string())
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(submission_row)
                .collect::<Result<Vec<_>, _>>()?;
        let decisions =
            sqlx::query("SELECT * FROM review_decisions WHERE quest_id = ? ORDER BY created_at")
                .bind(id.to_string())
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| {
                    Ok(ReviewDecisionRow {
                        reviewer: r.str("reviewer")?,
                        decision: text(&r.str("decision")?)?,
                        note: r.str("note")?,
                        created_at: parse_ts(&r.str("created_at")?)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
        tx.commit().await?;
        Ok((submissions, decisions))
    }

    async fn review_queue(
        &self,
        session_id: Option<Uuid>,
        check: Option<&str>,
        limit: u32,
    ) -> Result<Vec<QuestRow>, StoreError> {
        let (exact, prefix) = match check {
            Some(c) => match c.strip_suffix('*') {
                Some(prefix) => (None, Some(prefix)),
                None => (Some(c), None),
            },
            None => (None, None),
        };
        // Every L2 answer is a fact of check `l2:<verifier>`, a clear one too; such
        // a fact matches only when that verifier raised a doubt (a flag or no
        // answer) about the quest's submission, as its recorded answers say.
        let rows = sqlx::query(
            "SELECT * FROM quests q WHERE state = 'REVIEW' AND (?1 IS NULL OR session_id = ?1)
             AND ((?3 IS NULL AND ?4 IS NULL) OR EXISTS (
                 SELECT 1 FROM json_each(q.last_facts) f
                 WHERE (json_extract(f.value, '$.check') = ?3
                        OR substr(json_extract(f.value, '$.check'), 1, length(?4)) = ?4)
                   AND (substr(json_extract(f.value, '$.check'), 1, 3) <> 'l2:' OR EXISTS (
                       SELECT 1 FROM l2_answers a
                       WHERE a.submission_id = q.submission_id
                         AND 'l2:' || a.verifier = json_extract(f.value, '$.check')
                         AND (a.flagged = 1 OR a.answer IS NULL)))))
             ORDER BY updated_at, row_index LIMIT ?2",
        )
        .bind(session_id.map(|s| s.to_string()))
        .bind(limit as i64)
        .bind(exact)
        .bind(prefix)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(quest_row).collect()
    }

    async fn claim_review(
        &self,
        quest_id: Uuid,
        reviewer: &str,
        seconds: u32,
    ) -> Result<QuestRow, StoreError> {
        let reviewer = reviewer.to_owned();
        write!(self, |ctx| claim_review(ctx, quest_id, reviewer, seconds)
            .await)
    }

    async fn release_review(&self, quest_id: Uuid, reviewer: &str) -> Result<(), StoreError> {
        let reviewer = reviewer.to_owned();
        write!(self, |ctx| release_review(ctx, quest_id, reviewer).await)
    }

    async fn decide_review(
        &self,
        quest_id: Uuid,
        reviewer: &str,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError> {
        let (reviewer, note) = (reviewer.to_owned(), note.to_owned());
        write!(self, |ctx| decide_review(
            ctx, quest_id, reviewer, decision, note
        )
        .await)
    }

    async fn result_fields(&self, session_id: Uuid) -> Result<Vec<String>, StoreError> {
        // json_each walks each object's keys in their stored order; the first
        // row and key position at which a field appears fixes its column.
        let fields: Vec<String> = sqlx::query_scalar(
            "SELECT j.key FROM quests q, json_each(q.result) j
             WHERE q.session_id = ? AND q.state IN ('PASS', 'REVIEW') AND q.result IS NOT NULL
             GROUP BY j.key ORDER BY MIN(q.row_index * 1000000 + j.id)",
        )
        .bind(session_id.to_string())
        .fetch_all(&self.read)
        .await?;
        Ok(fields)
    }

    async fn export_page(
        &self,
        session_id: Uuid,
        after_row: Option<u64>,
        limit: u32,
    ) -> Result<Vec<ExportRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT q.row_index, q.input, q.state, q.decided_by, q.tries, q.result, q.last_facts, q.receipt,
                    s.evidence
             FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id
             WHERE q.session_id = ? AND q.row_index > ? ORDER BY q.row_index LIMIT ?",
        )
        .bind(session_id.to_string())
        .bind(after_row.map_or(-1, |r| r as i64))
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let state: State = text(&r.str("state")?)?;
                let result: Option<Map<String, Value>> = match state {
                    State::Pass | State::Review => opt(r.opt_str("result")?, from_json)?,
                    _ => None,
                };
                Ok(ExportRow {
                    row_index: r.int("row_index")? as u64,
                    input: from_json(&r.str("input")?)?,
                    state,
                    decided_by: r.opt_str("decided_by")?,
                    tries: r.int("tries")? as u32,
                    result,
                    last_facts: from_json(&r.str("last_facts")?)?,
                    last_evidence: opt(r.opt_str("evidence")?, from_json)?.unwrap_or_default(),
                    receipt: r.opt_str("receipt")?,
                })
            })
            .collect()
    }

    async fn create_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
    ) -> Result<TokenRow, StoreError> {
        let (name, hash) = (name.to_owned(), hash.to_owned());
        write!(self, |ctx| {
            let id = Uuid::now_v7();
            let inserted = sqlx::query(
                "INSERT INTO tokens (id, name, role, hash, created_at) VALUES (?, ?, ?, ?, ?)",
            )
            .bind(id.to_string())
            .bind(&name)
            .bind(role.as_str())
            .bind(&hash)
            .bind(ts(ctx.now))
            .execute(&mut ctx.conn)
            .await;
            match inserted {
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    Err(StoreError::conflict(
                        "name_taken",
                        format!(
                            "a live token is already named `{name}`: pick another name or revoke that token"
                        ),
                    ))
                }
                other => {
                    other?;
                    Ok(TokenRow {
                        id,
                        name,
                        role,
                        hash,
                        created_at: ctx.now,
                        revoked_at: None,
                    })
                }
            }
        })
    }

    async fn ensure_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        let (name, hash) = (name.to_owned(), hash.to_owned());
        write!(self, |ctx| {
            // The configured secret is the only live token of this name: a rotated
            // secret retires the old one, and a revoked bootstrap token comes back.
            sqlx::query("UPDATE tokens SET revoked_at = ? WHERE name = ? AND hash <> ? AND revoked_at IS NULL")
                .bind(ts(ctx.now))
                .bind(&name)
                .bind(&hash)
                .execute(&mut ctx.conn)
                .await?;
            sqlx::query(
                "INSERT INTO tokens (id, name, role, hash, created_at) VALUES (?, ?, ?, ?, ?)
                 ON CONFLICT (hash) DO UPDATE SET name = excluded.name, role = excluded.role, revoked_at = NULL",
            )
            .bind(Uuid::now_v7().to_string())
            .bind(&name)
            .bind(role.as_str())
            .bind(&hash)
            .bind(ts(ctx.now))
            .execute(&mut ctx.conn)
            .await?;
            Ok(())
        })
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(token_row).collect()
    }

    async fn revoke_token(&self, id: Uuid) -> Result<TokenRow, StoreError> {
        write!(self, |ctx| {
            let row = sqlx::query(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING *",
            )
            .bind(ts(ctx.now))
            .bind(id.to_string())
            .fetch_optional(&mut ctx.conn)
            .await?
            .ok_or(StoreError::NotFound("token"))?;
            token_row(&row)
        })
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        // Look up by a short prefix of the digest, then compare whole digests in
        // constant time, so no comparison of secret material exits early.
        let prefix: String = hash.chars().take(8).collect();
        let rows = sqlx::query(
            "SELECT * FROM tokens WHERE hash >= ?1 AND hash < ?1 || 'g' AND revoked_at IS NULL",
        )
        .bind(&prefix)
        .fetch_all(&self.read)
        .await?;
        let mut found = None;
        for row in &rows {
            let token = token_row(row)?;
            if bool::from(subtle::ConstantTimeEq::ct_eq(
                token.hash.as_bytes(),
                hash.as_bytes(),
            )) {
                found = Some(token);
            }
        }
        Ok(found)
    }

    async fn create_browser_session(
        &self,
        hash: &str,
        token_id: Uuid,
        csrf: &str,
        seconds: u32,
    ) -> Result<BrowserSessionRow, StoreError> {
        let (hash, csrf) = (hash.to_owned(), csrf.to_owned());
        write!(self, |ctx| console::create_browser_session(ctx, hash, token_id, csrf, seconds).await)
    }

    async fn find_browser_session(
        &self,
        hash: &str,
    ) -> Result<Option<BrowserSessionRow>, StoreError> {
        console::find_browser_session(&self.read, self.clock.now(), hash).await
    }

    async fn end_browser_session(&self, hash: &str) -> Result<(), StoreError> {
        let hash = hash.to_owned();
        write!(self, |ctx| console::end_browser_session(ctx, hash).await)
    }

    async fn agent_stats(&self, session_id: Uuid) -> Result<Vec<AgentStatsRow>, StoreError> {
        console::agent_stats(&self.read, session_id).await
    }

    async fn failing_checks(
        &self,
        session_id: Uuid,
        limit: u32,
    ) -> Result<Vec<FailingCheckRow>, StoreError> {
        console::failing_checks(&self.read, session_id, limit).await
    }

    async fn throughput(&self, session_id: Uuid, minutes: u32) -> Result<Throughput, StoreError> {
        console::throughput(&self.read, self.clock.now(), session_id, minutes).await
    }

    async fn quest_page(
        &self,
        session_id: Uuid,
        query: &QuestQuery,
    ) -> Result<QuestPage, StoreError> {
        console::quest_page(&self.read, session_id, query).await
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
}
