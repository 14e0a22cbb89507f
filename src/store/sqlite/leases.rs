//! Leases: `next` (claims), heartbeats, releases and lapses, each kind a
//! group of a few multi-row statements (see [`super::writer`]).

use std::collections::HashMap;

use crate::domain::ids::{LeaseId, QuestId, SessionId, TokenId};
use serde_json::{Value, json};

use super::codec::*;
use super::pauses::live_pauses;
use super::writer::{GroupError, GroupResult, Kind, Ranked, WriteCtx, expect_rows};
use crate::domain::work::{self, AgentId, LeaseEnd, LeaseFacts, Refusal};
use crate::domain::{EventKind, QuestStatus, Transition};
use crate::store::common::{Cap, FOLDED_AGENTS, admit, renewal};
use crate::store::{LeaseOutcome, LeaseRow, QuestRow, StoreError};

/// `next`: the agent's held quest, or the first open one in upload order.
pub struct Lease {
    pub session: SessionId,
    pub agent: AgentId,
}

/// A request on a held lease (heartbeat, release).
pub struct Hold {
    pub quest: QuestId,
    pub lease: LeaseId,
    pub token: TokenId,
}

/// Extends a live lease by the session's lease time.
pub struct Heartbeat(pub Hold);
/// Gives a leased quest back, free of tries and lapses.
pub struct Release(pub Hold);

impl Ranked for Release {
    const RANK: u8 = 1;
}
impl Ranked for Heartbeat {
    const RANK: u8 = 2;
}
impl Ranked for Lease {
    const RANK: u8 = 6;
}

impl Kind for Lease {
    type Out = LeaseOutcome;
    type Key = (SessionId, AgentId);
    fn key(&self) -> Self::Key {
        (self.session, self.agent.clone())
    }
    async fn run<'a>(ctx: &'a mut WriteCtx, reqs: &'a [Self]) -> GroupResult<LeaseOutcome> {
        // Expired leases are reclaimed inside the claim: correctness needs no sweeper.
        sweep(ctx).await?;
        let mut out: Vec<Option<Result<LeaseOutcome, StoreError>>> =
            (0..reqs.len()).map(|_| None).collect();
        // A paused token leases nothing in that session (its held leases were released).
        let pauses = live_pauses(ctx, reqs.iter().map(|r| (r.session, r.agent.clone()))).await?;
        for (i, pause) in pauses {
            out[i] = Some(Err(Refusal::AgentPaused(Box::new(pause)).into()));
        }
        let wanted: Vec<Value> = reqs
            .iter()
            .map(|r| json!({"s": r.session.to_string(), "a": r.agent.to_string()}))
            .collect();
        let sql = format!(
            "SELECT j.key AS i, q.*, {LEASE_PREFIXED} FROM json_each(?1) j
             JOIN leases l INDEXED BY leases_live_by_agent
               ON l.session_id = j.value->>'s' AND l.agent = j.value->>'a' AND l.ended_at IS NULL
             JOIN quests q ON q.id = l.quest_id"
        );
        for row in ctx
            .rows(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(json(&wanted)))
            .await?
        {
            let i = row.int("i")? as usize;
            if out[i].is_some() {
                continue;
            }
            let lease = prefixed_lease(&row)?.ok_or_else(|| corrupt("held lease"))?;
            out[i] = Some(Ok(LeaseOutcome::Assigned {
                quest: quest_row(&row)?,
                lease: lease_of(&lease),
            }));
        }
        let mut sessions: Vec<SessionId> = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            if out[i].is_none() && !sessions.contains(&r.session) {
                sessions.push(r.session);
            }
        }
        let idle_tokens = (0..reqs.len())
            .filter(|&i| out[i].is_none())
            .map(|i| reqs[i].agent.token);
        let mut caps = lease_caps(ctx, idle_tokens).await?;
        for session in sessions {
            let idle: Vec<usize> = (0..reqs.len())
                .filter(|&i| out[i].is_none() && reqs[i].session == session)
                .collect();
            // The cap holds across the whole group, as if its requests ran one by one.
            let (admitted, capped) = admit(idle.iter().map(|&i| (i, reqs[i].agent.token)), &caps);
            let claimed = if admitted.is_empty() {
                Vec::new()
            } else {
                claim(ctx, session, &admitted, reqs).await?
            };
            for (i, outcome) in claimed {
                if let Ok(LeaseOutcome::Assigned { .. }) = &outcome {
                    caps.entry(reqs[i].agent.token).or_default().held += 1;
                }
                out[i] = Some(outcome);
            }
            if capped.is_empty() {
                continue;
            }
            // The cap refuses only a lease it would stop: with nothing open,
            // a capped request hears `finished` or `wait` like any other
            // (agents stop on `finished`).
            let unleased = match ctx.session(session).await {
                Ok(_) => unleased(ctx, session).await?.map(Ok),
                Err(StoreError::NotFound(what)) => Some(Err(what)),
                Err(e) => return Err(e.into()),
            };
            for (i, refusal) in capped {
                out[i] = Some(match &unleased {
                    None => Err(refusal.into()),
                    Some(Ok(outcome)) => Ok(outcome.clone()),
                    Some(Err(what)) => Err(StoreError::NotFound(what)),
                });
            }
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or(Err(StoreError::Unavailable)))
            .collect())
    }
}

/// The caps of these tokens and their live leases, in one statement (a token
/// without a cap is not counted).
async fn lease_caps(
    ctx: &mut WriteCtx,
    tokens: impl Iterator<Item = TokenId>,
) -> Result<HashMap<TokenId, Cap>, GroupError> {
    let mut wanted: Vec<String> = tokens.map(|t| t.to_string()).collect();
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    // Agents are `<token id>/<name>`: a token's leases are the range ['<id>/', '<id>0').
    let rows = ctx
        .rows(
            sqlx::query(
                "SELECT t.id, t.max_leases,
                        CASE WHEN t.max_leases IS NULL THEN 0 ELSE (
                            SELECT COUNT(*) FROM leases INDEXED BY leases_live_by_token
                            WHERE ended_at IS NULL AND agent >= t.id || '/' AND agent < t.id || '0')
                        END AS held
                 FROM tokens t WHERE t.id IN (SELECT value FROM json_each(?1))",
            )
            .bind(json(&wanted)),
        )
        .await?;
    let mut caps = HashMap::with_capacity(rows.len());
    for row in &rows {
        caps.insert(
            uuid(&row.str("id")?)?,
            Cap {
                max: row.opt_int("max_leases")?.map(|n| n as u32),
                held: row.int("held")? as u32,
            },
        );
    }
    Ok(caps)
}

/// Claims up to one open quest for each of `idle` (agents of `session` that
/// hold nothing), in one statement; the rest are told to wait or that the
/// session is finished.
async fn claim(
    ctx: &mut WriteCtx,
    session: SessionId,
    idle: &[usize],
    reqs: &[Lease],
) -> Result<Vec<(usize, Result<LeaseOutcome, StoreError>)>, GroupError> {
    let s = match ctx.session(session).await {
        Ok(s) => s,
        Err(StoreError::NotFound(what)) => {
            return Ok(idle
                .iter()
                .map(|&i| (i, Err(StoreError::NotFound(what))))
                .collect());
        }
        Err(e) => return Err(e.into()),
    };
    let leased = work::step(QuestStatus::new(), Transition::Lease)
        .map_err(|e| GroupError::Refused(StoreError::Corrupt(e.to_string())))?;
    let ids: Vec<LeaseId> = idle.iter().map(|_| LeaseId::new()).collect();
    let wanted: Vec<Value> = ids.iter().map(|id| json!({"l": id.to_string()})).collect();
    let claimed = ctx
        .rows(
            sqlx::query(
                "UPDATE quests SET phase = ?3, lease_id = w.value->>'l', leases = leases + 1, updated_at = ?4
                 FROM (SELECT row_number() OVER (ORDER BY row_index) - 1 AS n, id FROM (
                         SELECT id, row_index FROM quests INDEXED BY quests_open
                         WHERE session_id = ?1 AND phase = 'open' ORDER BY row_index LIMIT ?5)) c
                 JOIN json_each(?2) w ON w.key = c.n
                 WHERE quests.id = c.id
                 RETURNING *",
            )
            .bind(session.to_string())
            .bind(json(&wanted))
            .bind(leased.phase.map(|p| p.as_str()))
            .bind(ts(ctx.now))
            .bind(idle.len() as i64),
        )
        .await?;
    let expires_at = ctx.now + chrono::Duration::seconds(s.config.lease_seconds as i64);
    let mut out = Vec::with_capacity(idle.len());
    let mut rows = Vec::with_capacity(claimed.len());
    let mut long_history = Vec::new();
    for row in &claimed {
        let quest = quest_row(row)?;
        if quest.leases > work::ENDED_LEASES_KEPT + 1 {
            long_history.push(quest.id.to_string());
        }
        let lease_id = quest
            .lease_id
            .ok_or_else(|| corrupt("claimed quest without its lease"))?;
        let n = ids
            .iter()
            .position(|id| *id == lease_id)
            .ok_or_else(|| corrupt("claim"))?;
        let lease = LeaseRow {
            id: lease_id,
            quest_id: quest.id,
            agent: reqs[idle[n]].agent.clone(),
            expires_at,
        };
        rows.push(json!({"id": lease.id.to_string(), "q": quest.id.to_string(), "a": lease.agent.to_string()}));
        ctx.moved_from(EventKind::Leased, &quest, QuestStatus::new(), None);
        out.push((idle[n], Ok(LeaseOutcome::Assigned { quest, lease })));
    }
    if !rows.is_empty() {
        let inserted = ctx
            .exec(
                sqlx::query(
                    "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at)
                     SELECT j.value->>'id', j.value->>'q', ?1, j.value->>'a', ?2, ?3 FROM json_each(?4) j",
                )
                .bind(session.to_string())
                .bind(ts(ctx.now))
                .bind(ts(expires_at))
                .bind(json(&rows)),
            )
            .await?;
        expect_rows("the new leases", inserted, rows.len())?;
    }
    prune_leases(ctx, &long_history).await?;
    if out.len() < idle.len() {
        // The claim took every open quest: the rest wait or are done.
        let outcome = unleased(ctx, session)
            .await?
            .ok_or_else(|| corrupt("wait"))?;
        for &i in &idle[out.len()..] {
            out.push((i, Ok(outcome.clone())));
        }
    }
    Ok(out)
}

/// What a `next` in `session` hears when no quest is open: `finished` when
/// none is left in TODO, else `wait` until the next lease runs out. `None`:
/// a quest is open, a `next` would be assigned one.
async fn unleased(
    ctx: &mut WriteCtx,
    session: SessionId,
) -> Result<Option<LeaseOutcome>, GroupError> {
    let row = ctx
        .row(
            sqlx::query(
                "SELECT (SELECT MIN(expires_at) FROM leases WHERE session_id = ?1 AND ended_at IS NULL) AS next_expiry,
                        EXISTS (SELECT 1 FROM quests WHERE session_id = ?1 AND state = 'TODO') AS todo,
                        EXISTS (SELECT 1 FROM quests INDEXED BY quests_open
                                WHERE session_id = ?1 AND phase = 'open') AS open",
            )
            .bind(session.to_string()),
        )
        .await?
        .ok_or_else(|| corrupt("wait"))?;
    if row.int("open")? != 0 {
        return Ok(None);
    }
    let next_expiry = opt(row.opt_str("next_expiry")?, parse_ts)?;
    Ok(Some(if row.int("todo")? == 0 {
        LeaseOutcome::Finished
    } else {
        LeaseOutcome::Wait {
            retry_after_seconds: work::wait_seconds(next_expiry, ctx.now),
        }
    }))
}

/// Keeps the lease history of these quests bounded, so that a `next`/`release`
/// loop cannot grow the table: their last [`work::ENDED_LEASES_KEPT`] ended
/// leases stay, with the live one and every lease a submission was made under.
///
/// An explicit statement per claim group rather than a trigger: a trigger on
/// the lease insert would run once per row, where this is one statement for
/// the whole group, and only for quests whose count says they have more.
async fn prune_leases(ctx: &mut WriteCtx, quests: &[String]) -> Result<(), GroupError> {
    if quests.is_empty() {
        return Ok(());
    }
    ctx.exec(
        sqlx::query(
            "DELETE FROM leases WHERE id IN (
               SELECT id FROM (
                 SELECT l.id, row_number() OVER (PARTITION BY l.quest_id ORDER BY l.id DESC) AS n
                 FROM leases l INDEXED BY leases_by_quest
                 WHERE l.quest_id IN (SELECT value FROM json_each(?1)) AND l.ended_at IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM submissions s WHERE s.lease_id = l.id))
               WHERE n > ?2)",
        )
        .bind(json(&quests))
        .bind(work::ENDED_LEASES_KEPT as i64),
    )
    .await?;
    Ok(())
}

fn corrupt(what: &str) -> GroupError {
    GroupError::Refused(StoreError::Corrupt(format!("inconsistent rows in {what}")))
}

/// The quests and leases that hold requests name, in request order
/// (`None`: no such quest).
async fn read_holds(
    ctx: &mut WriteCtx,
    holds: impl Iterator<Item = &Hold>,
) -> Result<Vec<Option<(QuestRow, Option<LeaseFacts>)>>, GroupError> {
    let wanted: Vec<Value> = holds
        .map(|h| json!({"q": h.quest.to_string(), "l": h.lease.to_string()}))
        .collect();
    let sql = format!(
        "SELECT j.key AS i, q.*, {LEASE_PREFIXED} FROM json_each(?1) j
         JOIN quests q ON q.id = j.value->>'q'
         LEFT JOIN leases l ON l.id = j.value->>'l' AND l.quest_id = q.id"
    );
    let mut out = vec![None; wanted.len()];
    for row in ctx
        .rows(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(json(&wanted)))
        .await?
    {
        let i = row.int("i")? as usize;
        out[i] = Some((quest_row(&row)?, prefixed_lease(&row)?));
    }
    Ok(out)
}

/// Reads what the hold requests name and checks each hold: the held quests
/// and leases, or why not.
async fn held<'r>(
    ctx: &mut WriteCtx,
    holds: impl Iterator<Item = &'r Hold> + Clone,
) -> Result<Vec<Result<(QuestRow, LeaseFacts), StoreError>>, GroupError> {
    let read = read_holds(ctx, holds.clone()).await?;
    Ok(read
        .into_iter()
        .zip(holds)
        .map(|(found, h)| {
            let (quest, lease) = found.ok_or(StoreError::NotFound("quest"))?;
            work::check_hold(
                status_of(&quest),
                quest.lease_id,
                lease.as_ref(),
                h.lease,
                h.token,
                ctx.now,
            )?;
            Ok((quest, lease.ok_or(StoreError::NotFound("lease"))?))
        })
        .collect())
}

impl Kind for Heartbeat {
    type Out = LeaseRow;
    type Key = QuestId;
    fn key(&self) -> QuestId {
        self.0.quest
    }
    async fn run<'a>(ctx: &'a mut WriteCtx, reqs: &'a [Self]) -> GroupResult<LeaseRow> {
        let mut out = Vec::with_capacity(reqs.len());
        let mut renewed = Vec::new();
        for found in held(ctx, reqs.iter().map(|r| &r.0)).await? {
            out.push(match found {
                Ok((quest, lease)) => match ctx.session(quest.session_id).await {
                    Ok(s) => {
                        let mut row = lease_of(&lease);
                        row.expires_at = renewal(&lease, &s, ctx.now);
                        renewed.push((row.id, row.expires_at));
                        Ok(row)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            });
        }
        renew_leases(ctx, &renewed).await?;
        Ok(out)
    }
}

impl Kind for Release {
    type Out = ();
    type Key = QuestId;
    fn key(&self) -> QuestId {
        self.0.quest
    }
    async fn run<'a>(ctx: &'a mut WriteCtx, reqs: &'a [Self]) -> GroupResult<()> {
        let mut out = Vec::with_capacity(reqs.len());
        let (mut quests, mut ended, mut idle) = (Vec::new(), Vec::new(), Vec::new());
        for found in held(ctx, reqs.iter().map(|r| &r.0)).await? {
            let released = found.and_then(|(mut quest, lease)| {
                let before = status_of(&quest);
                let next = work::check_release(before)?;
                set_status(&mut quest, next);
                quest.lease_id = None;
                quest.updated_at = ctx.now;
                Ok((quest, before, lease))
            });
            out.push(match released {
                Ok((quest, before, lease)) => {
                    ctx.moved_from(EventKind::Released, &quest, before, None);
                    idle.push(
                        json!({"s": quest.session_id.to_string(), "a": lease.agent.to_string()}),
                    );
                    quests.push(quest);
                    ended.push((lease.id, LeaseEnd::Released));
                    Ok(())
                }
                Err(e) => Err(e),
            });
        }
        save_quests(ctx, &quests).await?;
        end_leases(ctx, &ended).await?;
        forget_idle_agents(ctx, &idle).await?;
        Ok(out)
    }
}

/// Folds the console's figures of agents that, after a release, hold nothing
/// and never submitted or let a lease lapse into one row per token and
/// session (agent `<token id>/*`: their leases summed, the latest last seen):
/// a `next`/`release` loop under invented agent names adds no row, so the
/// agents table grows only with work done (submissions and lapses, which
/// tries and `max_lapses` bound), and no figure is lost.
async fn forget_idle_agents(ctx: &mut WriteCtx, agents: &[Value]) -> Result<(), GroupError> {
    if agents.is_empty() {
        return Ok(());
    }
    let idle = "SELECT session_id, agent FROM console_agent_stats
             WHERE (session_id, agent) IN (SELECT j.value->>'s', j.value->>'a' FROM json_each(?1) j)
               AND substr(agent, instr(agent, '/') + 1) <> ?2
               AND submissions = 0 AND lapses = 0
               AND NOT EXISTS (SELECT 1 FROM leases l INDEXED BY leases_live_by_agent
                               WHERE l.session_id = console_agent_stats.session_id
                                 AND l.agent = console_agent_stats.agent AND l.ended_at IS NULL)";
    // Only `leased` and `last_seen` can be other than their defaults in such a row.
    let fold = format!(
        "INSERT INTO console_agent_stats (session_id, agent, leased, last_seen)
         SELECT session_id, substr(agent, 1, instr(agent, '/')) || ?2, SUM(leased), MAX(last_seen)
         FROM console_agent_stats WHERE (session_id, agent) IN ({idle})
         GROUP BY 1, 2
         ON CONFLICT (session_id, agent) DO UPDATE
         SET leased = leased + excluded.leased, last_seen = MAX(last_seen, excluded.last_seen)"
    );
    ctx.exec(
        sqlx::query(sqlx::AssertSqlSafe(fold))
            .bind(json(&agents))
            .bind(FOLDED_AGENTS),
    )
    .await?;
    let forget = format!("DELETE FROM console_agent_stats WHERE (session_id, agent) IN ({idle})");
    ctx.exec(
        sqlx::query(sqlx::AssertSqlSafe(forget))
            .bind(json(&agents))
            .bind(FOLDED_AGENTS),
    )
    .await?;
    Ok(())
}

/// Returns every expired lease to `open`, or ends its quest in DONE after
/// `max_lapses`; the number of leases swept.
pub async fn sweep(ctx: &mut WriteCtx) -> Result<u64, GroupError> {
    let sql = format!(
        // Driven by the partial index of live leases by expiry; quests by primary key.
        "SELECT q.*, {LEASE_PREFIXED}, s.max_lapses FROM leases l INDEXED BY leases_live_by_expiry
         JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id AND q.phase = 'leased'
         JOIN sessions s ON s.id = q.session_id
         WHERE l.ended_at IS NULL AND l.expires_at <= ?1"
    );
    let rows = ctx
        .rows(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(ts(ctx.now)))
        .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let (mut quests, mut ended) = (Vec::new(), Vec::new());
    for row in &rows {
        let mut quest = quest_row(row)?;
        let lease = prefixed_lease(row)?.ok_or_else(|| corrupt("an expired lease"))?;
        let before = status_of(&quest);
        let lapse = work::on_lapse(before, row.int("max_lapses")? as u32)
            .map_err(|e| GroupError::Refused(e.into()))?;
        set_status(&mut quest, lapse.status);
        if let Some((by, fact)) = lapse.decided {
            quest.decided_by = Some(by.to_string());
            quest.last_facts = vec![fact];
        }
        quest.lease_id = None;
        quest.updated_at = ctx.now;
        ctx.moved_from(EventKind::Lapsed, &quest, before, None);
        quests.push(quest);
        ended.push((lease.id, LeaseEnd::Expired));
    }
    save_quests(ctx, &quests).await?;
    end_leases(ctx, &ended).await?;
    Ok(rows.len() as u64)
}

/// Saves one quest through the shared statement, as a store error (a
/// verifier's or a reviewer's write, which no lease fences).
pub async fn save(ctx: &mut WriteCtx, quest: &QuestRow) -> Result<(), StoreError> {
    save_quests(ctx, std::slice::from_ref(quest))
        .await
        .map_err(|e| match e {
            GroupError::Refused(e) => e,
            // The writer fails the batch on Unavailable, as on any failure of the database.
            GroupError::Fatal(e) => {
                tracing::error!(error = %e, "the database failed");
                StoreError::Unavailable
            }
        })
}

/// Writes every changeable column of these quests, in one statement.
pub async fn save_quests(ctx: &mut WriteCtx, quests: &[QuestRow]) -> Result<(), GroupError> {
    if quests.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = quests.iter().map(quest_patch).collect();
    let touched = ctx
        .exec(
            sqlx::query(
                "UPDATE quests SET state = j.value->>'state', phase = j.value->>'phase',
                   tries = j.value->>'tries', lapses = j.value->>'lapses', lease_id = j.value->>'lease_id',
                   last_facts = j.value->>'last_facts', result = j.value->>'result',
                   submission_id = j.value->>'submission_id', receipt = j.value->>'receipt',
                   decided_by = j.value->>'decided_by', review_claimed_by = j.value->>'review_claimed_by',
                   review_claim_expires_at = j.value->>'review_claim_expires_at',
                   repeated_failure = j.value->>'repeated_failure', updated_at = j.value->>'updated_at'
                 FROM json_each(?1) j WHERE quests.id = j.value->>'id'",
            )
            .bind(json(&rows)),
        )
        .await?;
    expect_rows("the quest update", touched, quests.len())
}

/// Ends live leases, each for its reason.
pub async fn end_leases(
    ctx: &mut WriteCtx,
    leases: &[(LeaseId, LeaseEnd)],
) -> Result<(), GroupError> {
    if leases.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = leases
        .iter()
        .map(|(id, end)| json!({"id": id.to_string(), "r": end.as_str()}))
        .collect();
    let touched = ctx
        .exec(
            sqlx::query(
                "UPDATE leases SET ended_at = ?1, end_reason = j.value->>'r'
                 FROM json_each(?2) j WHERE leases.id = j.value->>'id' AND leases.ended_at IS NULL",
            )
            .bind(ts(ctx.now))
            .bind(json(&rows)),
        )
        .await?;
    expect_rows("the ended leases", touched, leases.len())
}

/// Moves the expiry of live leases.
pub async fn renew_leases(
    ctx: &mut WriteCtx,
    leases: &[(LeaseId, chrono::DateTime<chrono::Utc>)],
) -> Result<(), GroupError> {
    if leases.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = leases
        .iter()
        .map(|(id, until)| json!({"id": id.to_string(), "e": ts(*until)}))
        .collect();
    let touched = ctx
        .exec(
            sqlx::query(
                "UPDATE leases SET expires_at = j.value->>'e'
                 FROM json_each(?1) j WHERE leases.id = j.value->>'id' AND leases.ended_at IS NULL",
            )
            .bind(json(&rows)),
        )
        .await?;
    expect_rows("the renewed leases", touched, leases.len())
}
