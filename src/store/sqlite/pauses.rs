//! Pauses on SQLite. The one writer decides them at the end of every batch
//! that ended a quest in DONE, inside the batch's transaction: the pause, and
//! the release of the token's live leases in the session, commit with the
//! DONE that made them, and every later `next` of the token (a later batch:
//! the writer is serial) finds the pause. A `next` of the same batch that ran
//! before hears `assigned`, and its lease is released here all the same.

use std::collections::HashMap;

use serde_json::{Value, json};
use sqlx::sqlite::SqliteRow;

use super::codec::*;
use super::leases::{end_leases, save_quests};
use super::writer::{GroupError, WriteCtx};
use crate::domain::EventKind;
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::{self, Ending, Pause};
use crate::domain::work::{self, AgentId, LeaseEnd};
use crate::store::StoreError;
use crate::store::common::{set_status, status_of};
use crate::store::pause_sql::*;

/// Decides the pauses of the tokens whose quests this batch ended in DONE.
pub async fn after_done(ctx: &mut WriteCtx) -> Result<(), GroupError> {
    let quests: Vec<String> = ctx.ended_done().iter().map(|q| q.to_string()).collect();
    if quests.is_empty() {
        return Ok(());
    }
    let rows = ctx
        .rows(
            sqlx::query(
                "SELECT DISTINCT session_id, token_id FROM token_endings INDEXED BY token_endings_by_quest
                 WHERE quest_id IN (SELECT value FROM json_each($1)) AND done = 1",
            )
            .bind(json(&quests)),
        )
        .await?;
    for row in &rows {
        let (session, token) = (uuid(&row.str("session_id")?)?, uuid(&row.str("token_id")?)?);
        decide(ctx, session, token).await?;
    }
    Ok(())
}

/// Pauses the token in the session when the rule says so; a paused token's
/// live leases there are released.
async fn decide(ctx: &mut WriteCtx, session: SessionId, token: TokenId) -> Result<(), GroupError> {
    let max = ctx.session(session).await?.config.max_consecutive_done;
    if max == 0 {
        return Ok(());
    }
    let rows = ctx
        .rows(
            sqlx::query(RECENT_ENDINGS)
                .bind(session.to_string())
                .bind(token.to_string())
                .bind(i64::from(max)),
        )
        .await?;
    let Some(latest) = rows.first() else {
        return Ok(());
    };
    if latest.int("paused")? == 0 {
        let endings = rows
            .iter()
            .map(|r| {
                Ok(Ending {
                    done: r.int("done")? != 0,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let Some(decision) = pause::pause_after(max, &endings) else {
            return Ok(());
        };
        let agent = latest.str("agent")?;
        let row = ctx
            .row(
                sqlx::query(INSERT_PAUSE)
                    .bind(uuid::Uuid::now_v7().to_string())
                    .bind(session.to_string())
                    .bind(token.to_string())
                    .bind(agent_name(&agent).to_owned())
                    .bind(decision.reason.as_str())
                    .bind(json(&decision.figures))
                    .bind(latest.int("seq")?)
                    .bind(ts(ctx.now)),
            )
            .await?
            .ok_or_else(|| GroupError::Refused(StoreError::Corrupt("the new pause".into())))?;
        let pause = pause_row(&row)?;
        tracing::warn!(session = %session, token = %token, agent = %pause.agent, "a token was paused: {pause}");
    }
    release_live_leases(ctx, session, token).await
}

/// Releases the token's leased quests in the session (no try, no lapse);
/// quests whose submission the gate is checking keep their lease until the verdict.
async fn release_live_leases(
    ctx: &mut WriteCtx,
    session: SessionId,
    token: TokenId,
) -> Result<(), GroupError> {
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM leases l INDEXED BY leases_live_by_token
         JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id AND q.phase = 'leased'
         WHERE l.ended_at IS NULL AND l.session_id = $1 AND l.agent >= $2 || '/' AND l.agent < $2 || '0'"
    );
    let rows = ctx
        .rows(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(session.to_string())
                .bind(token.to_string()),
        )
        .await?;
    let (mut quests, mut ended) = (Vec::new(), Vec::new());
    for row in &rows {
        let mut quest = quest_row(row)?;
        let lease = prefixed_lease(row)?
            .ok_or_else(|| GroupError::Refused(StoreError::Corrupt("a paused lease".into())))?;
        let before = status_of(&quest);
        set_status(
            &mut quest,
            work::check_release(before).map_err(StoreError::from)?,
        );
        quest.lease_id = None;
        quest.updated_at = ctx.now;
        ctx.moved_from(EventKind::Released, &quest, before, None);
        quests.push(quest);
        ended.push((lease.id, LeaseEnd::Released));
    }
    save_quests(ctx, &quests).await?;
    end_leases(ctx, &ended).await
}

/// The live pauses of these (session, agent) requests, by request index.
pub async fn live_pauses(
    ctx: &mut WriteCtx,
    reqs: impl Iterator<Item = (SessionId, AgentId)>,
) -> Result<HashMap<usize, Pause>, GroupError> {
    let wanted: Vec<Value> = reqs
        .map(|(s, a)| json!({"s": s.to_string(), "t": a.token.to_string()}))
        .collect();
    let rows = ctx
        .rows(
            sqlx::query(
                "SELECT j.key AS i, p.* FROM json_each($1) j
                 JOIN token_pauses p INDEXED BY token_pauses_live
                   ON p.session_id = j.value->>'s' AND p.token_id = j.value->>'t' AND p.resumed_at IS NULL",
            )
            .bind(json(&wanted)),
        )
        .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        out.insert(row.int("i")? as usize, pause_row(row)?);
    }
    Ok(out)
}

/// Resumes the token's live pause in the session.
pub async fn resume(
    ctx: &mut WriteCtx,
    session: SessionId,
    token: TokenId,
    by: String,
) -> Result<Pause, StoreError> {
    let row = ctx
        .row(
            sqlx::query(RESUME_PAUSE)
                .bind(session.to_string())
                .bind(token.to_string())
                .bind(ts(ctx.now))
                .bind(by),
        )
        .await?
        .ok_or(StoreError::Refused(work::Refusal::NotPaused))?;
    pause_row(&row)
}

/// A session's pauses, newest first.
pub async fn list(pool: &sqlx::SqlitePool, session: SessionId) -> Result<Vec<Pause>, StoreError> {
    let rows = sqlx::query(SESSION_PAUSES)
        .bind(session.to_string())
        .fetch_all(pool)
        .await?;
    rows.iter().map(pause_row).collect()
}

fn pause_row(r: &SqliteRow) -> Result<Pause, StoreError> {
    Ok(Pause {
        id: uuid(&r.str("id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        token_id: uuid(&r.str("token_id")?)?,
        agent: r.str("agent")?,
        reason: text(&r.str("reason")?)?,
        figures: serde_json::from_str(&r.str("figures")?)
            .map_err(|e| StoreError::Corrupt(format!("a pause's figures: {e}")))?,
        created_at: parse_ts(&r.str("created_at")?)?,
        resumed_at: opt(r.opt_str("resumed_at")?, parse_ts)?,
        resumed_by: r.opt_str("resumed_by")?,
    })
}
