//! The pause rule's rows, written once for both engines: whether a token is
//! due a pause in a session (its latest endings there, judged by
//! [`pause::pause_after`]), the pause it gets, its resumption and the list.
//! Where and when a pause is decided, and how the paused token's leases are
//! released, are each engine's (its `pauses` module): at the end of each
//! write batch on SQLite, before each commit on PostgreSQL.

use super::Tx;
use super::codec::*;
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::{self, Ending, Pause};
use crate::domain::work::Refusal;
use crate::store::StoreError;
use crate::store::columns::RowId;
use crate::store::common::Turn;

/// The token's latest endings in the session since its last pause, newest
/// first, at most `$3`, each with whether the token is paused there now.
/// Binds: session, token, limit.
const RECENT_ENDINGS: &str = concat!(
    "SELECT e.seq, e.done, e.agent, ",
    paused_in!("$1", "$2"),
    " AS paused
    FROM token_endings e
    WHERE e.session_id = $1 AND e.token_id = $2
      AND e.seq > COALESCE((SELECT MAX(p.through_seq) FROM token_pauses p
                            WHERE p.session_id = $1 AND p.token_id = $2), 0)
    ORDER BY e.ended_at DESC, e.seq DESC
    LIMIT $3"
);

/// A new pause. Binds: id, session, token, agent, reason, figures (JSON
/// text), the last ending it counted, now.
pub const INSERT_PAUSE: &str = "INSERT INTO token_pauses
        (id, session_id, token_id, agent, reason, figures, through_seq, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    RETURNING *";

/// Resumes the live pause. Binds: session, token, now, by.
const RESUME_PAUSE: &str = "UPDATE token_pauses SET resumed_at = $3, resumed_by = $4
    WHERE session_id = $1 AND token_id = $2 AND resumed_at IS NULL
    RETURNING *";

/// A session's pauses, newest first, with the live canary pauses of other
/// sessions of the tokens that worked here (they are paused here too).
/// Binds: session.
const SESSION_PAUSES: &str = concat!(
    "SELECT * FROM token_pauses WHERE session_id = $1
        OR (reason = 'canary' AND resumed_at IS NULL
            AND EXISTS (SELECT 1 FROM leases l WHERE l.session_id = $1 AND ",
    token_of_agent!("token_pauses.token_id", "l.agent"),
    "))
    ORDER BY created_at DESC, id DESC"
);

/// The agent name part of `<token id>/<name>`.
fn agent_name(agent: &str) -> &str {
    agent.split_once('/').map_or(agent, |(_, name)| name)
}

pub fn pause_row(r: &impl Columns) -> Result<Pause, StoreError> {
    Ok(Pause {
        id: r.id("id")?,
        session_id: r.id("session_id")?,
        token_id: r.id("token_id")?,
        agent: r.text("agent")?,
        reason: r.parsed("reason")?,
        figures: serde_json::from_str(&r.text("figures")?)
            .map_err(|e| StoreError::Corrupt(format!("a pause's figures: {e}")))?,
        created_at: r.at("created_at")?,
        resumed_at: r.opt_at("resumed_at")?,
        resumed_by: r.opt_text("resumed_by")?,
    })
}

/// Pauses the token in the session when the rule says so. Whether the token
/// is paused there now (just paused, or paused before), so that its live
/// leases there are released.
pub async fn pause_if_due(
    tx: &mut Tx,
    session: SessionId,
    token: TokenId,
) -> Result<bool, StoreError> {
    let row = tx.session(session).await?;
    let max = row.config.max_consecutive_done;
    // Endings in a gold companion (gold and canary quests) are no run: a
    // canary's DONE is its honest end, and gold is scored, not counted.
    if max == 0 || row.gold_of.is_some() {
        return Ok(false);
    }
    tx.take_turns(Turn::Pause(session, token)).await?;
    let rows = tx
        .rows(
            sqlx::query(RECENT_ENDINGS)
                .bind(session)
                .bind(token)
                .bind(i64::from(max)),
        )
        .await?;
    let Some(latest) = rows.first() else {
        return Ok(false);
    };
    if latest.flag("paused")? {
        return Ok(true);
    }
    let endings = rows
        .iter()
        .map(|r| {
            Ok(Ending {
                done: r.flag("done")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let Some(decision) = pause::pause_after(max, &endings) else {
        return Ok(false);
    };
    let agent = latest.text("agent")?;
    let row = tx
        .row(
            sqlx::query(INSERT_PAUSE)
                .bind(RowId::new())
                .bind(session)
                .bind(token)
                .bind(agent_name(&agent).to_owned())
                .bind(decision.reason.as_str())
                .bind(decision.figures.to_string())
                .bind(latest.int("seq")?)
                .bind(at(tx.now)),
        )
        .await?
        .ok_or_else(|| StoreError::Corrupt("the new pause".into()))?;
    let pause = pause_row(&row)?;
    tracing::warn!(session = %session, token = %token, agent = %pause.agent, "a token was paused: {pause}");
    Ok(true)
}

/// The token's last ending in the session (0 before any): a pause made
/// for another reason counts through it, since the DONE run that pauses a
/// token starts again after any pause.
pub async fn last_ending(
    tx: &mut Tx,
    session: SessionId,
    token: TokenId,
) -> Result<i64, StoreError> {
    let row = tx
        .row(
            sqlx::query(
                "SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) AS seq FROM token_endings
                 WHERE session_id = $1 AND token_id = $2",
            )
            .bind(session)
            .bind(token),
        )
        .await?;
    Ok(row.map(|r| r.int("seq")).transpose()?.unwrap_or(0))
}

/// Resumes the token's live pause in the session.
pub async fn resume(
    tx: &mut Tx,
    session: SessionId,
    token: TokenId,
    by: String,
) -> Result<Pause, StoreError> {
    let row = tx
        .row(
            sqlx::query(RESUME_PAUSE)
                .bind(session)
                .bind(token)
                .bind(at(tx.now))
                .bind(by),
        )
        .await?
        .ok_or(StoreError::Refused(Refusal::NotPaused))?;
    pause_row(&row)
}

/// A session's pauses, newest first.
pub async fn list(pool: &Pool, session: SessionId) -> Result<Vec<Pause>, StoreError> {
    let rows = sqlx::query(SESSION_PAUSES)
        .bind(session)
        .fetch_all(pool)
        .await?;
    rows.iter().map(pause_row).collect()
}
