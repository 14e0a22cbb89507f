//! Pauses on PostgreSQL. Every write transaction that ended a quest in DONE
//! decides the pauses it calls for just before it commits ([`super::tx`]),
//! under an exclusive advisory lock on (session, token); every `next` takes
//! the same lock shared before it reads the token's pauses. So two
//! transactions ending the token's quests at once count each other's DONEs
//! (the second waits for the first to commit, then reads it), and a `next`
//! racing a pause either commits first (its lease is then released by the
//! pause) or waits and hears `agent_paused`.

use std::collections::HashMap;

use super::codec::*;
use super::pause_rule::{self, pause_row};
use super::saves::{end_leases, save_quests};
use super::sql::canary;
use super::tx::Tx;
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::Pause;
use crate::domain::work::{self, AgentId, LeaseEnd, Refusal};
use crate::domain::{EventKind, State};
use crate::store::StoreError;
use crate::store::common::{set_status, status_of};

/// The advisory lock of a token (`$2`) in a session (`$1`).
const LOCK_KEY: &str = pause_lock_key!();

/// Decides the pauses of the tokens whose quests this transaction ended: a
/// DONE run, or a canary that passed.
pub async fn after_endings(tx: &mut Tx) -> Result<(), StoreError> {
    after_done(tx).await?;
    let passed = crate::store::common::ended_in(&tx.events, State::Pass);
    for (session, token) in canary::after_pass(tx, passed).await? {
        release_live_leases(tx, session, token).await?;
    }
    Ok(())
}

/// Decides the pauses of the tokens whose quests this transaction ended in DONE.
async fn after_done(tx: &mut Tx) -> Result<(), StoreError> {
    let quests: Vec<uuid::Uuid> = (crate::store::common::ended_in(&tx.events, State::Done))
        .into_iter()
        .map(|(_, q)| q.into())
        .collect();
    if quests.is_empty() {
        return Ok(());
    }
    let pairs: Vec<(SessionId, TokenId)> = sqlx::query_as(
        "SELECT DISTINCT session_id, token_id FROM token_endings
         WHERE quest_id = ANY($1::uuid[]) AND done ORDER BY 1, 2",
    )
    .bind(&quests)
    .fetch_all(tx.db())
    .await?;
    for (session, token) in pairs {
        if pause_rule::pause_if_due(tx, session, token).await? {
            release_live_leases(tx, session, token).await?;
        }
    }
    Ok(())
}

/// Pauses a token under its session's gold floor (the rows are the shared
/// rule's) and releases its leases there.
pub async fn pause_unqualified(
    tx: &mut Tx,
    pause: crate::store::UnqualifiedPause,
) -> Result<bool, StoreError> {
    let token = pause.token;
    let sessions = super::sql::gold::pause_unqualified(tx, pause).await?;
    for session in &sessions {
        release_live_leases(tx, *session, token).await?;
    }
    Ok(!sessions.is_empty())
}

/// Releases the token's leased quests in the session (no try, no lapse).
async fn release_live_leases(
    tx: &mut Tx,
    session: SessionId,
    token: TokenId,
) -> Result<(), StoreError> {
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM leases l
         JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id AND q.phase = 'leased'
         WHERE l.ended_at IS NULL AND l.session_id = $1 AND left(l.agent, 36) = $2::text
         FOR UPDATE OF q, l"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .bind(token.to_string())
        .fetch_all(tx.db())
        .await?;
    let (mut quests, mut ended) = (Vec::new(), Vec::new());
    for row in &rows {
        let mut quest = quest_row(row)?;
        let lease =
            prefixed_lease(row)?.ok_or_else(|| StoreError::Corrupt("a paused lease".into()))?;
        let released = work::check_release(status_of(&quest))?;
        set_status(&mut quest, released);
        quest.lease_id = None;
        quest.updated_at = tx.now;
        tx.moved(EventKind::Released, &quest, None);
        quests.push((quest, lease.id));
        ended.push((lease.id, LeaseEnd::Released));
    }
    let fenced: Vec<_> = quests.iter().map(|(q, l)| (q, Some(*l))).collect();
    save_quests(tx, &fenced).await?;
    end_leases(tx, &ended).await
}

/// Refuses the requests (by index) whose token is paused in their session,
/// after waiting for any pause being decided for it.
pub async fn refuse_paused(
    tx: &mut Tx,
    session: SessionId,
    which: &[usize],
    reqs: &[(SessionId, AgentId)],
) -> Result<HashMap<usize, StoreError>, StoreError> {
    let mut tokens: Vec<uuid::Uuid> = which.iter().map(|&i| reqs[i].1.token.into()).collect();
    tokens.sort();
    tokens.dedup();
    // Shared: the token's pause in this session, and its pause in every
    // session (a canary's), in one statement.
    let lock = format!(
        "SELECT pg_advisory_xact_lock_shared({}), pg_advisory_xact_lock_shared({})
         FROM unnest($2::uuid[]) AS t(id) ORDER BY t.id",
        LOCK_KEY.replace("$2::text", "t.id::text"),
        token_pause_lock_key!("t.id")
    );
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .bind(session)
        .bind(&tokens)
        .execute(tx.db())
        .await?;
    let rows = sqlx::query(
        "SELECT * FROM token_pauses WHERE token_id = ANY($2::uuid[]) AND resumed_at IS NULL
           AND (session_id = $1 OR reason = 'canary')
         ORDER BY reason = 'canary'",
    )
    .bind(session)
    .bind(&tokens)
    .fetch_all(tx.db())
    .await?;
    let mut paused: HashMap<TokenId, Pause> = HashMap::new();
    for row in &rows {
        let p = pause_row(row)?;
        paused.insert(p.token_id, p);
    }
    Ok(which
        .iter()
        .filter_map(|&i| {
            paused
                .get(&reqs[i].1.token)
                .map(|p| (i, Refusal::AgentPaused(Box::new(p.clone())).into()))
        })
        .collect())
}
