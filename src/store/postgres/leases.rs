//! Leases: `next` (claims), heartbeats, releases and lapses. A claim is one
//! statement (`FOR UPDATE SKIP LOCKED` in a materialized CTE feeding the
//! quest's `UPDATE ... FROM` and the lease's insert), so replicas claiming
//! at once pass over each other's rows instead of waiting or colliding.

use crate::domain::ids::{LeaseId, QuestId, SessionId, TokenId};
use sqlx::postgres::PgRow;

use super::codec::*;
use super::tx::{Tx, expect_rows};
use crate::domain::work::{self, AgentId, LeaseEnd, LeaseFacts, Refusal};
use crate::domain::{EventKind, QuestStatus, Transition};
use crate::store::common::{FOLDED_AGENTS, lease_of, set_status, status_of};
use crate::store::{LeaseOutcome, LeaseRow, QuestRow, SessionRow, StoreError};

pub async fn session(tx: &mut Tx, id: SessionId) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(tx.db())
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    session_row(&row)
}

fn lease_seconds(s: &SessionRow) -> chrono::Duration {
    chrono::Duration::seconds(i64::from(s.config.lease_seconds))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("inconsistent rows in {what}"))
}

/// The agent's held quest, or the first open one in upload order; expired
/// leases of the session are reclaimed first, in the same transaction.
pub async fn lease_next(
    tx: &mut Tx,
    session_id: SessionId,
    agent: AgentId,
) -> Result<LeaseOutcome, StoreError> {
    let s = session(tx, session_id).await?;
    sweep(tx, Some(session_id)).await?;
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM leases l JOIN quests q ON q.id = l.quest_id
         WHERE l.session_id = $1 AND l.agent = $2 AND l.ended_at IS NULL"
    );
    if let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(session_id)
        .bind(agent.to_string())
        .fetch_optional(tx.db())
        .await?
    {
        let lease = prefixed_lease(&row)?.ok_or_else(|| corrupt("held lease"))?;
        return Ok(LeaseOutcome::Assigned {
            quest: quest_row(&row)?,
            lease: lease_of(&lease),
        });
    }
    if let Err(refusal) = lease_cap(tx, agent.token).await? {
        // The cap refuses only a lease it would stop: with nothing open, a
        // capped `next` hears `finished` or `wait` like any other.
        return match unleased(tx, session_id).await? {
            (false, outcome) => Ok(outcome),
            (true, _) => Err(refusal.into()),
        };
    }
    let leased = work::step(QuestStatus::new(), Transition::Lease)?;
    let lease = LeaseRow {
        id: LeaseId::new(),
        quest_id: QuestId::from(uuid::Uuid::nil()),
        agent,
        expires_at: tx.now + lease_seconds(&s),
    };
    let claimed = sqlx::query(
        "WITH c AS MATERIALIZED (
             SELECT id FROM quests WHERE session_id = $1 AND phase = 'open'
             ORDER BY row_index LIMIT 1 FOR UPDATE SKIP LOCKED),
         q AS (
             UPDATE quests SET phase = $2, lease_id = $3, leases = leases + 1, updated_at = $4
             FROM c WHERE quests.id = c.id RETURNING quests.*),
         l AS (
             INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at)
             SELECT $3, q.id, $1, $5, $4, $6 FROM q RETURNING id)
         SELECT q.* FROM q, l",
    )
    .bind(session_id)
    .bind(leased.phase.map(|p| p.as_str()))
    .bind(lease.id)
    .bind(tx.now)
    .bind(lease.agent.to_string())
    .bind(lease.expires_at)
    .fetch_optional(tx.db())
    .await?;
    if let Some(row) = claimed {
        let quest = quest_row(&row)?;
        if quest.leases > work::ENDED_LEASES_KEPT + 1 {
            prune_leases(tx, quest.id).await?;
        }
        tx.moved(EventKind::Leased, &quest, None);
        let lease = LeaseRow {
            quest_id: quest.id,
            ..lease
        };
        return Ok(LeaseOutcome::Assigned { quest, lease });
    }
    // Nothing open, or every open quest held by a concurrent claim: wait or done.
    Ok(unleased(tx, session_id).await?.1)
}

/// What a `next` given no quest hears: `finished` when none is left in TODO,
/// else `wait` until the next lease runs out; and whether a quest is open all
/// the same (locked by a concurrent claim, or kept from a capped token).
async fn unleased(tx: &mut Tx, session_id: SessionId) -> Result<(bool, LeaseOutcome), StoreError> {
    let row = sqlx::query(
        "SELECT (SELECT MIN(expires_at) FROM leases WHERE session_id = $1 AND ended_at IS NULL) AS next_expiry,
                EXISTS (SELECT 1 FROM quests WHERE session_id = $1 AND state = 'TODO') AS todo,
                EXISTS (SELECT 1 FROM quests WHERE session_id = $1 AND phase = 'open') AS open",
    )
    .bind(session_id)
    .fetch_one(tx.db())
    .await?;
    let todo: bool = sqlx::Row::try_get(&row, "todo")?;
    let outcome = if todo {
        LeaseOutcome::Wait {
            retry_after_seconds: work::wait_seconds(
                sqlx::Row::try_get(&row, "next_expiry")?,
                tx.now,
            ),
        }
    } else {
        LeaseOutcome::Finished
    };
    Ok((sqlx::Row::try_get(&row, "open")?, outcome))
}

/// The quest `quest` with the lease `lease` (if it is the quest's), the quest
/// row locked until commit.
pub async fn lock_quest_with_lease(
    tx: &mut Tx,
    quest: QuestId,
    lease: LeaseId,
) -> Result<Option<PgRow>, StoreError> {
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM quests q
         LEFT JOIN leases l ON l.id = $2 AND l.quest_id = q.id
         WHERE q.id = $1 FOR UPDATE OF q"
    );
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(quest)
        .bind(lease)
        .fetch_optional(tx.db())
        .await?)
}

/// The quest and lease a request on a held lease names, checked by the domain.
async fn held(
    tx: &mut Tx,
    quest: QuestId,
    lease: LeaseId,
    token: TokenId,
) -> Result<(QuestRow, LeaseFacts), StoreError> {
    let row = lock_quest_with_lease(tx, quest, lease)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let (q, l) = (quest_row(&row)?, prefixed_lease(&row)?);
    work::check_hold(status_of(&q), q.lease_id, l.as_ref(), lease, token, tx.now)?;
    Ok((q, l.ok_or(StoreError::NotFound("lease"))?))
}

pub async fn heartbeat(
    tx: &mut Tx,
    quest: QuestId,
    lease: LeaseId,
    token: TokenId,
) -> Result<LeaseRow, StoreError> {
    let (q, l) = held(tx, quest, lease, token).await?;
    let s = session(tx, q.session_id).await?;
    let mut renewed = lease_of(&l);
    renewed.expires_at = tx.now + lease_seconds(&s);
    renew_lease(tx, renewed.id, renewed.expires_at).await?;
    Ok(renewed)
}

pub async fn release(
    tx: &mut Tx,
    quest: QuestId,
    lease: LeaseId,
    token: TokenId,
) -> Result<(), StoreError> {
    let (mut q, l) = held(tx, quest, lease, token).await?;
    let next = work::check_release(status_of(&q))?;
    set_status(&mut q, next);
    q.lease_id = None;
    q.updated_at = tx.now;
    save_quest(tx, &q, Some(l.id)).await?;
    end_lease(tx, l.id, LeaseEnd::Released).await?;
    forget_idle_agent(tx, q.session_id, &l.agent).await?;
    tx.moved(EventKind::Released, &q, None);
    Ok(())
}

/// Refuses a claim past the token's lease cap. The token's claims take turns
/// (a lock on the token until commit), so that concurrent claims on several
/// replicas cannot together pass the cap; a token without a cap is not counted.
async fn lease_cap(tx: &mut Tx, token: TokenId) -> Result<Result<(), Refusal>, StoreError> {
    let max: Option<i32> = sqlx::query_scalar("SELECT max_leases FROM tokens WHERE id = $1")
        .bind(token)
        .fetch_optional(tx.db())
        .await?
        .flatten();
    let Some(max) = max else {
        return Ok(Ok(()));
    };
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))")
        .bind(token)
        .execute(tx.db())
        .await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM leases WHERE left(agent, 36) = $1::text AND ended_at IS NULL",
    )
    .bind(token)
    .fetch_one(tx.db())
    .await?;
    Ok(work::check_lease_cap(held as u32, Some(max as u32)))
}

/// Keeps a quest's lease history bounded, so that a `next`/`release` loop
/// cannot grow the table: its last [`work::ENDED_LEASES_KEPT`] ended leases
/// stay, with the live one and every lease a submission was made under.
async fn prune_leases(tx: &mut Tx, quest: QuestId) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM leases WHERE id IN (
           SELECT id FROM (
             SELECT l.id, row_number() OVER (ORDER BY l.id DESC) AS n
             FROM leases l
             WHERE l.quest_id = $1 AND l.ended_at IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM submissions s WHERE s.lease_id = l.id)) old
           WHERE n > $2)",
    )
    .bind(quest)
    .bind(i64::from(work::ENDED_LEASES_KEPT))
    .execute(tx.db())
    .await?;
    Ok(())
}

/// Folds the console's figures of an agent that, after a release, holds
/// nothing and never submitted or let a lease lapse into its token's row of
/// the session (agent `<token id>/*`: leases summed, the latest last seen): a
/// `next`/`release` loop under invented agent names adds no row, and no
/// figure is lost.
async fn forget_idle_agent(
    tx: &mut Tx,
    session_id: SessionId,
    agent: &AgentId,
) -> Result<(), StoreError> {
    if agent.name == FOLDED_AGENTS {
        return Ok(());
    }
    let folded = AgentId::new(agent.token, FOLDED_AGENTS);
    sqlx::query(
        "WITH idle AS (
           DELETE FROM console_agent_stats a
           WHERE a.session_id = $1 AND a.agent = $2 AND a.submissions = 0 AND a.lapses = 0
             AND NOT EXISTS (SELECT 1 FROM leases l
                             WHERE l.session_id = a.session_id AND l.agent = a.agent AND l.ended_at IS NULL)
           RETURNING a.leased, a.last_seen)
         INSERT INTO console_agent_stats (session_id, agent, leased, last_seen)
         SELECT $1, $3, leased, last_seen FROM idle
         ON CONFLICT (session_id, agent) DO UPDATE
         SET leased = console_agent_stats.leased + excluded.leased,
             last_seen = GREATEST(console_agent_stats.last_seen, excluded.last_seen)",
    )
    .bind(session_id)
    .bind(agent.to_string())
    .bind(folded.to_string())
    .execute(tx.db())
    .await?;
    Ok(())
}

/// Returns every expired lease (of one session, or of all) to `open`, or ends
/// its quest in DONE after `max_lapses`; the number swept. Quests another
/// transaction holds are skipped: their holder is acting on them right now.
pub async fn sweep(tx: &mut Tx, session_id: Option<SessionId>) -> Result<u64, StoreError> {
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED}, s.max_lapses FROM leases l
         JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id AND q.phase = 'leased'
         JOIN sessions s ON s.id = q.session_id
         WHERE l.ended_at IS NULL AND l.expires_at <= $1 AND ($2::uuid IS NULL OR l.session_id = $2)
         FOR UPDATE OF q SKIP LOCKED"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tx.now)
        .bind(session_id)
        .fetch_all(tx.db())
        .await?;
    for row in &rows {
        let mut quest = quest_row(row)?;
        let lease = prefixed_lease(row)?.ok_or_else(|| corrupt("an expired lease"))?;
        let max_lapses: i32 = sqlx::Row::try_get(row, "max_lapses")?;
        let lapse = work::on_lapse(status_of(&quest), max_lapses as u32)?;
        set_status(&mut quest, lapse.status);
        if let Some((by, fact)) = lapse.decided {
            quest.decided_by = Some(by.to_string());
            quest.last_facts = vec![fact];
        }
        quest.lease_id = None;
        quest.updated_at = tx.now;
        save_quest(tx, &quest, Some(lease.id)).await?;
        end_lease(tx, lease.id, LeaseEnd::Expired).await?;
        tx.moved(EventKind::Lapsed, &quest, None);
    }
    Ok(rows.len() as u64)
}

/// Writes every changeable column of a quest, fenced: only while the quest
/// still carries the lease `fence` (or none, for `None`).
pub async fn save_quest(
    tx: &mut Tx,
    q: &QuestRow,
    fence: Option<LeaseId>,
) -> Result<(), StoreError> {
    let touched = sqlx::query(
        "UPDATE quests SET state = $3, phase = $4, tries = $5, lapses = $6, lease_id = $7,
           last_facts = $8::json, result = $9::json, submission_id = $10, receipt = $11,
           decided_by = $12, review_claimed_by = $13, review_claim_expires_at = $14,
           repeated_failure = $15, updated_at = $16
         WHERE id = $1 AND lease_id IS NOT DISTINCT FROM $2",
    )
    .bind(q.id)
    .bind(fence)
    .bind(q.state.as_str())
    .bind(q.phase.map(|p| p.as_str()))
    .bind(q.tries as i32)
    .bind(q.lapses as i32)
    .bind(q.lease_id)
    .bind(json(&q.last_facts))
    .bind(q.result.as_ref().map(json))
    .bind(q.submission_id)
    .bind(q.receipt.as_deref())
    .bind(q.decided_by.as_deref())
    .bind(q.review_claimed_by.as_ref().map(|r| r.to_string()))
    .bind(q.review_claim_expires_at)
    .bind(q.repeated_failure)
    .bind(q.updated_at)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the quest update", touched, 1)
}

pub async fn end_lease(tx: &mut Tx, id: LeaseId, end: LeaseEnd) -> Result<(), StoreError> {
    let touched = sqlx::query(
        "UPDATE leases SET ended_at = $2, end_reason = $3 WHERE id = $1 AND ended_at IS NULL",
    )
    .bind(id)
    .bind(tx.now)
    .bind(end.as_str())
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_rows("the ended lease", touched, 1)
}

pub async fn renew_lease(
    tx: &mut Tx,
    id: LeaseId,
    until: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    let touched =
        sqlx::query("UPDATE leases SET expires_at = $2 WHERE id = $1 AND ended_at IS NULL")
            .bind(id)
            .bind(until)
            .execute(tx.db())
            .await?
            .rows_affected();
    expect_rows("the renewed lease", touched, 1)
}
