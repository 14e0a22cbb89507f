//! Canaries: known-answer items for which no honest result can pass. A
//! canary quest that ends PASS (by its gate, by the AI verifiers or by a
//! reviewer's approval) is recorded in `canary_passes` and pauses its token
//! in every session: one live `canary` pause per token, kept in the session
//! where it passed, which every session's `next` reads ([`paused_in!`]).
//! Each engine calls [`after_pass`] where it decides the pauses of DONE runs
//! (at the end of a write batch on SQLite, before commit on PostgreSQL), so
//! that the pause commits with the PASS that caused it, and then releases
//! the token's leases in the sessions it names.

use super::Tx;
use super::codec::*;
use crate::domain::EventKind;
use crate::domain::gold::CanaryPass;
use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::pause::PauseReason;
use crate::store::StoreError;
use crate::store::columns::RowId;
use crate::store::common::{Turn, pass_event};

/// The canaries, not yet recorded, among quests just moved to PASS.
/// Binds: the quests' ids (a JSON array).
const PASSED: &str = concat!(
    "SELECT g.quest_id, g.session_id, g.token_id, g.item_id, q.decided_by, s.agent,
            EXISTS (SELECT 1 FROM l2_jobs j WHERE j.submission_id = q.submission_id) AS verified,
            (SELECT d.reviewer_token FROM review_decisions d
             WHERE d.quest_id = q.id AND d.decision = 'approve'
             ORDER BY d.created_at DESC LIMIT 1) AS reviewer_token
     FROM gold_quests g
     JOIN gold_items i ON i.id = g.item_id
     JOIN quests q ON q.id = g.quest_id
     LEFT JOIN submissions s ON s.id = q.submission_id
     WHERE ",
    id_in_json!("g.quest_id", "$1"),
    " AND i.kind = 'canary' AND q.state = 'PASS'
       AND NOT EXISTS (SELECT 1 FROM canary_passes c WHERE c.quest_id = g.quest_id)
     ORDER BY g.session_id, g.token_id, g.quest_id"
);

/// The token's canary pause, unless it has a live one. Binds: id, session,
/// token, agent, figures (JSON text), the last ending it counts, now.
const INSERT_CANARY_PAUSE: &str = "INSERT INTO token_pauses
        (id, session_id, token_id, agent, reason, figures, through_seq, created_at)
    VALUES ($1, $2, $3, $4, 'canary', $5, $6, $7)
    ON CONFLICT (token_id) WHERE resumed_at IS NULL AND reason = 'canary' DO NOTHING
    RETURNING id";

/// Records the canaries among `passed` (the quests, by session, that the
/// transaction moved to PASS) and pauses their tokens in every session; the
/// (session, token) pairs whose live leases the engine then releases.
pub async fn after_pass(
    tx: &mut Tx,
    passed: Vec<(SessionId, QuestId)>,
) -> Result<Vec<(SessionId, TokenId)>, StoreError> {
    // Only a gold companion holds canaries: other sessions cost no query.
    let mut quests = Vec::new();
    for (session, quest) in passed {
        if tx.session(session).await?.gold_of.is_some() {
            quests.push(quest);
        }
    }
    if quests.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .rows(sqlx::query(PASSED).bind(serde_json::json!(quests).to_string()))
        .await?;
    let mut paused = Vec::new();
    for row in &rows {
        let (quest, session, token): (QuestId, SessionId, TokenId) = (
            row.id("quest_id")?,
            row.id("session_id")?,
            row.id("token_id")?,
        );
        let decided_by = match row.opt_text("decided_by")? {
            Some(by) if by.starts_with("reviewer") || by.starts_with("adjudicator:") => by,
            _ if row.flag("verified")? => "verifiers".to_owned(),
            _ => "gate".to_owned(),
        };
        let agent = row.opt_text("agent")?.unwrap_or_default();
        let agent = agent.split_once('/').map_or(agent.as_str(), |(_, n)| n);
        // Every session's `next` reads this token's canary pause under the
        // shared side of the token's lock: one racing this pause either
        // committed its lease first (released below) or waits and hears the
        // pause. The session's lock first, as every `next` takes them.
        tx.take_turns(Turn::Pause(session, token)).await?;
        tx.take_turns(Turn::TokenPause(token)).await?;
        let through = super::pause_rule::last_ending(tx, session, token).await?;
        let figures = serde_json::json!({"quest_id": quest, "decided_by": decided_by});
        let pause: Option<RowId> = tx
            .row(
                sqlx::query(INSERT_CANARY_PAUSE)
                    .bind(RowId::new())
                    .bind(session)
                    .bind(token)
                    .bind(agent.to_owned())
                    .bind(figures.to_string())
                    .bind(through)
                    .bind(at(tx.now)),
            )
            .await?
            .map(|r| r.id("id"))
            .transpose()?;
        tx.exec(
            sqlx::query(
                "INSERT INTO canary_passes (quest_id, session_id, token_id, item_id, decided_by,
                                            reviewer_token, pause_id, passed_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(quest)
            .bind(session)
            .bind(token)
            .bind(row.id::<crate::domain::ids::GoldItemId>("item_id")?)
            .bind(decided_by.clone())
            .bind(row.opt_id::<TokenId>("reviewer_token")?)
            .bind(pause)
            .bind(at(tx.now)),
        )
        .await?;
        let event = pass_event(EventKind::CanaryPassed, session, quest, tx.now);
        tx.publish(event);
        tracing::warn!(session = %session, token = %token, quest = %quest, decided_by,
            reason = PauseReason::Canary.as_str(), "a canary ended PASS: its token is paused in every session");
        if pause.is_some() {
            for leased in leased_sessions(tx, token).await? {
                paused.push((leased, token));
            }
        }
    }
    Ok(paused)
}

/// The sessions where the token holds a live lease.
async fn leased_sessions(tx: &mut Tx, token: TokenId) -> Result<Vec<SessionId>, StoreError> {
    let rows = tx
        .rows(
            sqlx::query(concat!(
                "SELECT DISTINCT session_id FROM leases WHERE ended_at IS NULL AND ",
                token_of_agent!("$1", "agent"),
                " ORDER BY session_id"
            ))
            .bind(token.to_string()),
        )
        .await?;
    rows.iter().map(|r| r.id("session_id")).collect()
}

/// A session's canaries that ended PASS, oldest first.
pub async fn canary_passes(pool: &Pool, session: SessionId) -> Result<Vec<CanaryPass>, StoreError> {
    let rows = sqlx::query(
        "SELECT * FROM canary_passes WHERE session_id = $1 ORDER BY passed_at, quest_id",
    )
    .bind(session)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CanaryPass {
                quest_id: r.id("quest_id")?,
                item_id: r.id("item_id")?,
                token_id: r.id("token_id")?,
                decided_by: r.text("decided_by")?,
                reviewer_token: r.opt_id("reviewer_token")?,
                passed_at: r.at("passed_at")?,
            })
        })
        .collect()
}
