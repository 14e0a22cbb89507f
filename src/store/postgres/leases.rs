//! Leases: `next` (claims), heartbeats, releases and lapses. A claim is one
//! statement (`FOR UPDATE SKIP LOCKED` in a materialized CTE feeding the
//! quest's `UPDATE ... FROM` and the lease's insert), so replicas claiming
//! at once pass over each other's rows instead of waiting or colliding.

use crate::domain::ids::{LeaseId, QuestId, SessionId, TokenId};
use std::collections::HashMap;

use sqlx::postgres::PgRow;

use super::batch::{Answers, Keyed};

use super::codec::*;
use super::tx::{Tx, expect_rows};
use crate::domain::work::{self, AgentId, LeaseEnd, LeaseFacts};
use crate::domain::{EventKind, QuestStatus, Transition};
use crate::store::common::{Cap, FOLDED_AGENTS, admit, lease_of, renewal, set_status, status_of};
use crate::store::{LeaseOutcome, LeaseRow, QuestRow, SessionRow, StoreError};

fn lease_seconds(s: &SessionRow) -> chrono::Duration {
    chrono::Duration::seconds(i64::from(s.config.lease_seconds))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("inconsistent rows in {what}"))
}

impl Keyed for (SessionId, AgentId) {
    type Key = (SessionId, AgentId);
    fn key(&self) -> Self::Key {
        self.clone()
    }
}

/// `next` for each request (session, agent): the agent's held quest, or the
/// first open one in upload order. Expired leases of the session are
/// reclaimed first; then a few statements serve every request of a session
/// together (one claim for all its idle agents).
pub async fn lease_many(
    tx: &mut Tx,
    reqs: &[(SessionId, AgentId)],
) -> Result<Answers<LeaseOutcome>, StoreError> {
    let mut out: Vec<Option<Result<LeaseOutcome, StoreError>>> =
        (0..reqs.len()).map(|_| None).collect();
    let mut sessions: Vec<SessionId> = reqs.iter().map(|r| r.0).collect();
    sessions.sort();
    sessions.dedup();
    for session_id in sessions {
        let of_session: Vec<usize> = (0..reqs.len())
            .filter(|&i| reqs[i].0 == session_id)
            .collect();
        let s = match tx.session(session_id).await {
            Ok(s) => s,
            Err(StoreError::NotFound(what)) => {
                for &i in &of_session {
                    out[i] = Some(Err(StoreError::NotFound(what)));
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        sweep(tx, Some(session_id)).await?;
        let refused = super::pauses::refuse_paused(tx, session_id, &of_session, reqs).await?;
        let of_session: Vec<usize> = of_session
            .into_iter()
            .filter(|i| !refused.contains_key(i))
            .collect();
        for (i, e) in refused {
            out[i] = Some(Err(e));
        }
        for (i, outcome) in held_leases(tx, session_id, &of_session, reqs).await? {
            out[i] = Some(Ok(outcome));
        }
        let idle: Vec<usize> = of_session
            .into_iter()
            .filter(|&i| out[i].is_none())
            .collect();
        if idle.is_empty() {
            continue;
        }
        let caps = lease_caps(tx, idle.iter().map(|&i| reqs[i].1.token)).await?;
        let (admitted, capped) = admit(idle.iter().map(|&i| (i, reqs[i].1.token)), &caps);
        let agents: Vec<&AgentId> = admitted.iter().map(|&i| &reqs[i].1).collect();
        // Granted after every lease this claim can see ended (see Tx::catch_up).
        tx.catch_up().await?;
        let claimed = claim(tx, &s, &agents).await?;
        let served = claimed.len();
        for (n, outcome) in claimed {
            out[admitted[n]] = Some(Ok(outcome));
        }
        if served == admitted.len() && capped.is_empty() {
            continue;
        }
        // Every open quest taken (or held by a concurrent claim): the rest
        // wait or are done. The cap refuses only a lease it would stop: with
        // nothing open, a capped `next` hears `finished` or `wait` like any other.
        let (open, outcome) = unleased(tx, session_id).await?;
        for &i in &admitted {
            out[i].get_or_insert_with(|| Ok(outcome.clone()));
        }
        for (i, refusal) in capped {
            out[i] = Some(if open {
                Err(refusal.into())
            } else {
                Ok(outcome.clone())
            });
        }
    }
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or(Err(StoreError::Unavailable)))
        .collect())
}

/// The quests the agents `which` of `reqs` already hold in `session_id`.
async fn held_leases(
    tx: &mut Tx,
    session_id: SessionId,
    which: &[usize],
    reqs: &[(SessionId, AgentId)],
) -> Result<Vec<(usize, LeaseOutcome)>, StoreError> {
    let agents: Vec<String> = which.iter().map(|&i| reqs[i].1.to_string()).collect();
    let sql = format!(
        "SELECT a.n, q.*, {LEASE_PREFIXED} FROM unnest($2::text[]) WITH ORDINALITY AS a(agent, n)
         JOIN leases l ON l.session_id = $1 AND l.agent = a.agent AND l.ended_at IS NULL
         JOIN quests q ON q.id = l.quest_id"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(session_id)
        .bind(&agents)
        .fetch_all(tx.db())
        .await?;
    let mut held = Vec::with_capacity(rows.len());
    for row in &rows {
        let n: i64 = sqlx::Row::try_get(row, "n")?;
        let lease = prefixed_lease(row)?.ok_or_else(|| corrupt("held lease"))?;
        let i = *which
            .get(n as usize - 1)
            .ok_or_else(|| corrupt("held lease"))?;
        held.push((
            i,
            LeaseOutcome::Assigned {
                quest: quest_row(row)?,
                lease: lease_of(&lease),
            },
        ));
    }
    Ok(held)
}

/// Claims up to one open quest for each of `agents` (that hold nothing in
/// the session `s`), in one statement: the first open quests in upload
/// order that no concurrent claim holds, with a lease each. Returns the
/// position in `agents` of each agent served, with its quest and lease.
async fn claim(
    tx: &mut Tx,
    s: &SessionRow,
    agents: &[&AgentId],
) -> Result<Vec<(usize, LeaseOutcome)>, StoreError> {
    if agents.is_empty() {
        return Ok(Vec::new());
    }
    let leased = work::step(QuestStatus::new(), Transition::Lease)?;
    let ids: Vec<LeaseId> = agents.iter().map(|_| LeaseId::new()).collect();
    let names: Vec<String> = agents.iter().map(|a| a.to_string()).collect();
    let expires_at = tx.now + lease_seconds(s);
    let claimed = sqlx::query(
        "WITH c AS MATERIALIZED (
             SELECT id, row_index FROM quests WHERE session_id = $1 AND phase = 'open'
             ORDER BY row_index LIMIT $2 FOR UPDATE SKIP LOCKED),
         n AS (SELECT id, row_number() OVER (ORDER BY row_index) AS n FROM c),
         w AS (SELECT * FROM unnest($3::uuid[], $4::text[]) WITH ORDINALITY AS w(lease_id, agent, n)),
         q AS (
             UPDATE quests SET phase = $5, lease_id = w.lease_id, leases = leases + 1, updated_at = $6
             FROM n JOIN w ON w.n = n.n WHERE quests.id = n.id
             RETURNING quests.*, w.agent AS lease_agent),
         l AS (
             INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at)
             SELECT q.lease_id, q.id, $1, q.lease_agent, $6, $7 FROM q)
         SELECT * FROM q",
    )
    .bind(s.id)
    .bind(agents.len() as i64)
    .bind(&ids)
    .bind(&names)
    .bind(leased.phase.map(|p| p.as_str()))
    .bind(tx.now)
    .bind(expires_at)
    .fetch_all(tx.db())
    .await?;
    let mut out = Vec::with_capacity(claimed.len());
    for row in &claimed {
        let quest = quest_row(row)?;
        let n = quest
            .lease_id
            .and_then(|id| ids.iter().position(|l| *l == id))
            .ok_or_else(|| corrupt("claim"))?;
        if quest.leases > work::ENDED_LEASES_KEPT + 1 {
            prune_leases(tx, quest.id).await?;
        }
        tx.moved(EventKind::Leased, &quest, None);
        let lease = LeaseRow {
            id: ids[n],
            quest_id: quest.id,
            agent: agents[n].clone(),
            expires_at,
        };
        out.push((n, LeaseOutcome::Assigned { quest, lease }));
    }
    Ok(out)
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
    let s = tx.session(q.session_id).await?;
    let mut renewed = lease_of(&l);
    renewed.expires_at = renewal(&l, &s, tx.now);
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

/// The caps of these tokens and the live leases each holds (a token without
/// a cap is not counted). Each capped token's claims take turns (a lock on the
/// token until commit, taken in token order), so that concurrent claims on
/// several replicas cannot together pass its cap.
async fn lease_caps(
    tx: &mut Tx,
    tokens: impl Iterator<Item = TokenId>,
) -> Result<HashMap<TokenId, Cap>, StoreError> {
    let mut tokens: Vec<TokenId> = tokens.collect();
    tokens.sort();
    tokens.dedup();
    let rows = sqlx::query("SELECT id, max_leases FROM tokens WHERE id = ANY($1) AND max_leases IS NOT NULL ORDER BY id")
        .bind(&tokens)
        .fetch_all(tx.db())
        .await?;
    let mut caps = HashMap::with_capacity(rows.len());
    for row in &rows {
        let max: i32 = sqlx::Row::try_get(row, "max_leases")?;
        let cap = Cap {
            max: Some(max as u32),
            held: 0,
        };
        caps.insert(sqlx::Row::try_get::<TokenId, _>(row, "id")?, cap);
    }
    if caps.is_empty() {
        return Ok(caps);
    }
    let capped: Vec<TokenId> = tokens
        .into_iter()
        .filter(|t| caps.contains_key(t))
        .collect();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended(t::text, 0)) FROM unnest($1::uuid[]) AS t ORDER BY t")
        .bind(&capped)
        .execute(tx.db())
        .await?;
    // Counted after the locks: a claim that held one before committed by now.
    let held = sqlx::query(
        "SELECT left(agent, 36) AS token, COUNT(*) AS n FROM leases
         WHERE left(agent, 36) = ANY($1::text[]) AND ended_at IS NULL GROUP BY 1",
    )
    .bind(capped.iter().map(|t| t.to_string()).collect::<Vec<_>>())
    .fetch_all(tx.db())
    .await?;
    for row in &held {
        let token: String = sqlx::Row::try_get(row, "token")?;
        let n: i64 = sqlx::Row::try_get(row, "n")?;
        if let Some(cap) = token.parse().ok().and_then(|t: TokenId| caps.get_mut(&t)) {
            cap.held = n as u32;
        }
    }
    Ok(caps)
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
         FOR UPDATE OF q, l SKIP LOCKED"
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
/// Saves a quest that no lease fences (a verifier's or a reviewer's write).
pub async fn save(tx: &mut Tx, q: &QuestRow) -> Result<(), StoreError> {
    save_quest(tx, q, None).await
}

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
