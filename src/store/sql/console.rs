//! The web console's part of the store: browser sessions and the reads of a
//! session's page. The running figures behind these reads are kept by the
//! triggers (SQLite migration 0006, PostgreSQL 0003), so each read costs the
//! same however many quests a session holds.

use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::work::Refusal;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use super::Tx;
use super::codec::*;
use crate::domain::Fact;
use crate::store::common::same_digest;
use crate::store::{
    AgentStatsRow, BrowserSessionRow, FailingCheckRow, QuestPage, QuestQuery, QuestRow, StoreError,
    Tally, Throughput,
};

/// Expired browser sessions are kept this long for the record, then deleted.
const KEEP_EXPIRED_DAYS: i64 = 30;

macro_rules! browser_session {
    () => {
        "SELECT c.csrf, c.created_at AS session_created_at, c.expires_at AS session_expires_at,
                c.hash AS session_hash, t.*
         FROM console_sessions c JOIN tokens t ON t.id = c.token_id"
    };
}

fn browser_session_row(r: &impl Columns) -> Result<BrowserSessionRow, StoreError> {
    Ok(BrowserSessionRow {
        token: token_row(r)?,
        csrf: r.text("csrf")?,
        created_at: r.at("session_created_at")?,
        expires_at: r.at("session_expires_at")?,
    })
}

pub async fn create_browser_session(
    tx: &mut Tx,
    hash: String,
    token_id: TokenId,
    csrf: String,
    seconds: u32,
) -> Result<BrowserSessionRow, StoreError> {
    // Locked where replicas write, so that a revocation on another one waits or is seen.
    let live = tx
        .row(
            sqlx::query(concat!(
                "SELECT id FROM tokens WHERE id = $1 AND revoked_at IS NULL",
                for_share!()
            ))
            .bind(token_id),
        )
        .await?;
    if live.is_none() {
        return Err(Refusal::TokenRevoked.into());
    }
    let forgotten = tx.now - TimeDelta::days(KEEP_EXPIRED_DAYS);
    tx.exec(
        sqlx::query(
            "DELETE FROM review_skips WHERE browser_session IN
             (SELECT hash FROM console_sessions WHERE expires_at < $1)",
        )
        .bind(at(forgotten)),
    )
    .await?;
    tx.exec(sqlx::query("DELETE FROM console_sessions WHERE expires_at < $1").bind(at(forgotten)))
        .await?;
    tx.exec(
        sqlx::query(
            "INSERT INTO console_sessions (hash, token_id, csrf, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(hash.clone())
        .bind(token_id)
        .bind(csrf)
        .bind(at(tx.now))
        .bind(at(tx.now + TimeDelta::seconds(i64::from(seconds)))),
    )
    .await?;
    let row = tx
        .row(sqlx::query(concat!(browser_session!(), " WHERE c.hash = $1")).bind(hash))
        .await?
        .ok_or(StoreError::NotFound("browser session"))?;
    browser_session_row(&row)
}

pub async fn find_browser_session(
    pool: &Pool,
    now: DateTime<Utc>,
    hash: &str,
) -> Result<Option<BrowserSessionRow>, StoreError> {
    let row = sqlx::query(concat!(
        browser_session!(),
        " WHERE c.hash = $1 AND c.ended_at IS NULL AND c.expires_at > $2 AND t.revoked_at IS NULL"
    ))
    .bind(hash.to_owned())
    .bind(at(now))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    // The digest found by the index is compared again in constant time, as tokens are.
    if !same_digest(&row.text("session_hash")?, hash) {
        return Ok(None);
    }
    browser_session_row(&row).map(Some)
}

pub async fn skip_review(tx: &mut Tx, hash: String, quest: QuestId) -> Result<(), StoreError> {
    tx.exec(
        sqlx::query(
            "INSERT INTO review_skips (browser_session, quest_id, skipped_at) VALUES ($1, $2, $3)
             ON CONFLICT (browser_session, quest_id) DO UPDATE SET skipped_at = excluded.skipped_at",
        )
        .bind(hash)
        .bind(quest)
        .bind(at(tx.now)),
    )
    .await?;
    Ok(())
}

pub async fn review_skips(
    pool: &Pool,
    hash: &str,
) -> Result<Vec<(QuestId, DateTime<Utc>)>, StoreError> {
    sqlx::query("SELECT quest_id, skipped_at FROM review_skips WHERE browser_session = $1")
        .bind(hash.to_owned())
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok((r.id("quest_id")?, r.at("skipped_at")?)))
        .collect()
}

pub async fn end_browser_session(tx: &mut Tx, hash: String) -> Result<(), StoreError> {
    // Skips live as long as their browser session.
    tx.exec(sqlx::query("DELETE FROM review_skips WHERE browser_session = $1").bind(hash.clone()))
        .await?;
    tx.exec(
        sqlx::query(
            "UPDATE console_sessions SET ended_at = $1, end_reason = 'signed_out'
             WHERE hash = $2 AND ended_at IS NULL",
        )
        .bind(at(tx.now))
        .bind(hash),
    )
    .await?;
    Ok(())
}

/// At most this many agents are listed.
const MAX_AGENTS: i64 = 500;

pub async fn agent_stats(
    pool: &Pool,
    session_id: SessionId,
) -> Result<Vec<AgentStatsRow>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT a.*, t.name AS token_name FROM console_agent_stats a
         LEFT JOIN tokens t ON ",
        token_of_agent!("t.id", "a.agent"),
        " WHERE a.session_id = $1 ORDER BY a.last_seen DESC, a.agent LIMIT $2"
    ))
    .bind(session_id)
    .bind(MAX_AGENTS)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(AgentStatsRow {
                agent: r.text("agent")?,
                token_name: r.opt_text("token_name")?,
                leased: r.count("leased")?,
                submissions: r.count("submissions")?,
                pass: r.count("pass")?,
                pass_first: r.count("pass_first")?,
                fail: r.count("fail")?,
                review: r.count("review")?,
                done: r.count("done")?,
                lapses: r.count("lapses")?,
                tries_to_pass: r.count("tries_to_pass")?,
                last_seen: r.at("last_seen")?,
            })
        })
        .collect()
}

pub async fn failing_checks(
    pool: &Pool,
    session_id: SessionId,
    tally: Tally,
    limit: u32,
) -> Result<Vec<FailingCheckRow>, StoreError> {
    let by = tally.column();
    let sql = format!(
        "SELECT f.*, q.key FROM console_fact_counts f JOIN quests q ON q.id = f.quest_id
         WHERE f.session_id = $1 AND f.{by} > 0 ORDER BY f.{by} DESC, f.check_name, f.field LIMIT $2"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(session_id)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| {
            let (check, field) = (r.text("check_name")?, r.text("field")?);
            Ok(FailingCheckRow {
                example: Fact::new(
                    check.clone(),
                    field.clone(),
                    r.text("expected")?,
                    r.text("actual")?,
                    r.text("hint")?,
                ),
                check,
                field,
                fails: r.count("fails")?,
                reviews: r.count("reviews")?,
                quest_id: r.id("quest_id")?,
                quest_key: r.text("key")?,
                submission_id: r.id("submission_id")?,
            })
        })
        .collect()
}

pub async fn throughput(
    pool: &Pool,
    now: DateTime<Utc>,
    session_id: SessionId,
    minutes: u32,
) -> Result<Throughput, StoreError> {
    let minutes = minutes.max(1);
    let until = now
        .duration_trunc(TimeDelta::minutes(1))
        .map_err(|e| StoreError::Corrupt(format!("time {now}: {e}")))?;
    let from = until - TimeDelta::minutes(i64::from(minutes) - 1);
    let rows = sqlx::query(
        "SELECT minute, decided FROM console_throughput WHERE session_id = $1 AND minute >= $2 AND minute <= $3",
    )
    .bind(session_id)
    .bind(minute(from))
    .bind(minute(until))
    .fetch_all(pool)
    .await?;
    let mut per_minute = vec![0u64; minutes as usize];
    for r in &rows {
        let index = (read_minute(r, "minute")? - from).num_minutes();
        if let Some(decided) = usize::try_from(index)
            .ok()
            .and_then(|i| per_minute.get_mut(i))
        {
            // PostgreSQL keeps a minute in several rows (migrations/postgres/0014).
            *decided += r.count("decided")?;
        }
    }
    Ok(Throughput { until, per_minute })
}

/// The filter of a quest page as SQL with numbered placeholders from `$1`,
/// and its values in that order. Only the conditions asked for are written,
/// so that the planner can use the state index.
fn quest_filter(session_id: SessionId, q: &QuestQuery) -> (String, SessionId, Vec<String>) {
    let mut sql = String::from("q.session_id = $1");
    let mut binds = Vec::new();
    let next = |binds: &mut Vec<String>, value: String| {
        binds.push(value);
        format!("${}", binds.len() + 1)
    };
    if let Some(state) = q.state {
        let p = next(&mut binds, state.as_str().to_owned());
        sql.push_str(&format!(" AND q.state = {p}"));
    }
    if let Some(mark) = q.mark {
        let p = next(&mut binds, mark.as_str().to_owned());
        sql.push_str(&format!(" AND q.recheck_mark = {p}"));
    }
    if let Some(search) = q.search.as_deref().filter(|s| !s.is_empty()) {
        let p = next(&mut binds, search.to_owned());
        sql.push_str(&format!(
            concat!(" AND ", position!(), "(lower(q.key), lower({})) > 0"),
            p
        ));
    }
    if let Some(check) = q.check.as_deref() {
        let p = next(&mut binds, check.to_owned());
        sql.push_str(&format!(
            concat!(
                " AND EXISTS (SELECT 1 FROM submissions s, ",
                json_elements!("s.facts"),
                " f WHERE s.quest_id = q.id AND s.verdict IN ('FAIL', 'REVIEW')",
                " AND f.value ->> 'check' = {}"
            ),
            p
        ));
        if let Some(field) = q.field.as_deref() {
            let p = next(&mut binds, field.to_owned());
            sql.push_str(&format!(" AND f.value ->> 'field' = {p}"));
        }
        sql.push(')');
    }
    (sql, session_id, binds)
}

async fn quest_rows(
    pool: &Pool,
    filter: &(String, SessionId, Vec<String>),
    cursor: Option<u64>,
    backwards: bool,
    limit: u32,
) -> Result<Vec<QuestRow>, StoreError> {
    let (condition, session_id, binds) = filter;
    let (compare, order) = if backwards {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    let (c, l) = (binds.len() + 2, binds.len() + 3);
    let sql = format!(
        "SELECT q.* FROM quests q WHERE {condition} AND q.row_index {compare} ${c} ORDER BY q.row_index {order} LIMIT ${l}"
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*session_id);
    for value in binds {
        query = query.bind(value);
    }
    let bound = match (cursor, backwards) {
        (Some(c), _) => c as i64,
        (None, false) => -1,
        (None, true) => i64::MAX,
    };
    let rows = query
        .bind(bound)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.iter().map(quest_row).collect()
}

pub async fn quest_page(
    pool: &Pool,
    session_id: SessionId,
    query: &QuestQuery,
) -> Result<QuestPage, StoreError> {
    let filter = quest_filter(session_id, query);
    let limit = query.limit.clamp(1, 500);
    let mut quests = quest_rows(pool, &filter, query.cursor, query.backwards, limit + 1).await?;
    let more = quests.len() > limit as usize;
    quests.truncate(limit as usize);
    if query.backwards {
        quests.reverse();
    }
    // Whether anything matches on the other side of the cursor: nothing
    // between the cursor and the page's first row matches, by construction.
    let other_side = match query.cursor {
        None => false,
        Some(c) if query.backwards => !quest_rows(pool, &filter, c.checked_sub(1), false, 1)
            .await?
            .is_empty(),
        Some(c) => !quest_rows(pool, &filter, Some(c + 1), true, 1)
            .await?
            .is_empty(),
    };
    let (has_previous, has_next) = if query.backwards {
        (more, other_side)
    } else {
        (other_side, more)
    };
    Ok(QuestPage {
        quests,
        has_previous,
        has_next,
    })
}
