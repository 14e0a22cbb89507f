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
const RECENT_ENDINGS: &str = "SELECT e.seq, e.done, e.agent,
        EXISTS (SELECT 1 FROM token_pauses p
                WHERE p.session_id = $1 AND p.token_id = $2 AND p.resumed_at IS NULL) AS paused
    FROM token_endings e
    WHERE e.session_id = $1 AND e.token_id = $2
      AND e.seq > COALESCE((SELECT MAX(p.through_seq) FROM token_pauses p
                            WHERE p.session_id = $1 AND p.token_id = $2), 0)
    ORDER BY e.ended_at DESC, e.seq DESC
    LIMIT $3";

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

/// A session's pauses, newest first. Binds: session.
const SESSION_PAUSES: &str =
    "SELECT * FROM token_pauses WHERE session_id = $1 ORDER BY created_at DESC, id DESC";

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
    let max = tx.session(session).await?.config.max_consecutive_done;
    if max == 0 {
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
