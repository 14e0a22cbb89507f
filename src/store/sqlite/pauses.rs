//! Pauses on SQLite. The one writer decides them at the end of every batch
//! that ended a quest in DONE, inside the batch's transaction: the pause, and
//! the release of the token's live leases in the session, commit with the
//! DONE that made them, and every later `next` of the token (a later batch:
//! the writer is serial) finds the pause. A `next` of the same batch that ran
//! before hears `assigned`, and its lease is released here all the same.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::codec::*;
use super::leases::{end_leases, save_quests};
use super::pause_rule::{self, pause_row};
use super::sql::canary;
use super::writer::{GroupError, WriteCtx};
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::Pause;
use crate::domain::work::{self, AgentId, LeaseEnd};
use crate::domain::{EventKind, State};
use crate::store::StoreError;
use crate::store::common::{set_status, status_of};

/// Decides the pauses of the tokens whose quests this batch ended: a DONE
/// run, or a canary that passed.
pub async fn after_endings(ctx: &mut WriteCtx) -> Result<(), GroupError> {
    after_done(ctx).await?;
    let passed = ctx.ended_in(State::Pass);
    for (session, token) in canary::after_pass(ctx, passed).await? {
        release_live_leases(ctx, session, token).await?;
    }
    Ok(())
}

/// Decides the pauses of the tokens whose quests this batch ended in DONE.
async fn after_done(ctx: &mut WriteCtx) -> Result<(), GroupError> {
    let quests: Vec<String> = (ctx.ended_in(State::Done).iter())
        .map(|(_, q)| q.to_string())
        .collect();
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
        let (session, token) = (row.id("session_id")?, row.id("token_id")?);
        if pause_rule::pause_if_due(ctx, session, token).await? {
            release_live_leases(ctx, session, token).await?;
        }
    }
    Ok(())
}

/// Pauses a token under its session's gold floor (the rows are the shared
/// rule's) and releases its leases there.
pub async fn pause_unqualified(
    ctx: &mut WriteCtx,
    pause: crate::store::UnqualifiedPause,
) -> Result<bool, StoreError> {
    let token = pause.token;
    let sessions = super::sql::gold::pause_unqualified(ctx, pause).await?;
    for session in &sessions {
        release_live_leases(ctx, *session, token)
            .await
            .map_err(|e| match e {
                GroupError::Refused(e) => e,
                GroupError::Fatal(_) => StoreError::Unavailable,
            })?;
    }
    Ok(!sessions.is_empty())
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

/// The live pauses of these (session, agent) requests, by request index:
/// the token's in the session, or its canary pause from any session.
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
                   ON p.session_id = j.value->>'s' AND p.token_id = j.value->>'t'
                  AND p.resumed_at IS NULL AND p.reason <> 'canary'
                 UNION ALL
                 SELECT j.key AS i, p.* FROM json_each($1) j
                 JOIN token_pauses p INDEXED BY token_pauses_canary
                   ON p.token_id = j.value->>'t' AND p.resumed_at IS NULL AND p.reason = 'canary'",
            )
            .bind(json(&wanted)),
        )
        .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        out.insert(row.count("i")? as usize, pause_row(row)?);
    }
    Ok(out)
}
