//! The web console's part of the SQLite store: browser sessions (written
//! through the one writer) and the reads of a session's page. The running
//! figures behind these reads are kept by the triggers of migration 0006, so
//! each read costs the same however many quests a session holds.

use crate::domain::ids::{SessionId, TokenId};
use crate::domain::work::Refusal;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteRow;

use super::codec::*;
use super::writer::WriteCtx;
use crate::domain::Fact;
use crate::store::{
    AgentStatsRow, BrowserSessionRow, FailingCheckRow, QuestPage, QuestQuery, QuestRow, StoreError,
    Throughput,
};

/// Expired browser sessions are kept this long for the record, then deleted.
const KEEP_EXPIRED_DAYS: i64 = 30;

const BROWSER_SESSION: &str =
    "SELECT c.csrf, c.created_at AS session_created_at, c.expires_at AS session_expires_at,
            c.hash AS session_hash, t.*
     FROM console_sessions c JOIN tokens t ON t.id = c.token_id";

fn browser_session_row(r: &SqliteRow) -> Result<BrowserSessionRow, StoreError> {
    Ok(BrowserSessionRow {
        token: token_row(r)?,
        csrf: r.str("csrf")?,
        created_at: parse_ts(&r.str("session_created_at")?)?,
        expires_at: parse_ts(&r.str("session_expires_at")?)?,
    })
}

pub(super) async fn create_browser_session(
    ctx: &mut WriteCtx,
    hash: String,
    token_id: TokenId,
    csrf: String,
    seconds: u32,
) -> Result<BrowserSessionRow, StoreError> {
    let live = ctx
        .row(
            sqlx::query("SELECT id FROM tokens WHERE id = ? AND revoked_at IS NULL")
                .bind(token_id.to_string()),
        )
        .await?;
    if live.is_none() {
        return Err(Refusal::TokenRevoked.into());
    }
    ctx.exec(
        sqlx::query("DELETE FROM console_sessions WHERE expires_at < ?")
            .bind(ts(ctx.now - TimeDelta::days(KEEP_EXPIRED_DAYS))),
    )
    .await?;
    ctx.exec(
        sqlx::query(
            "INSERT INTO console_sessions (hash, token_id, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(hash.clone())
        .bind(token_id.to_string())
        .bind(csrf)
        .bind(ts(ctx.now))
        .bind(ts(ctx.now + TimeDelta::seconds(i64::from(seconds)))),
    )
    .await?;
    let row = ctx
        .row(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "{BROWSER_SESSION} WHERE c.hash = ?"
            )))
            .bind(hash),
        )
        .await?
        .ok_or(StoreError::NotFound("browser session"))?;
    browser_session_row(&row)
}

pub(super) async fn find_browser_session(
    pool: &SqlitePool,
    now: DateTime<Utc>,
    hash: &str,
) -> Result<Option<BrowserSessionRow>, StoreError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "{BROWSER_SESSION} WHERE c.hash = ? AND c.ended_at IS NULL AND c.expires_at > ? AND t.revoked_at IS NULL"
    )))
    .bind(hash)
    .bind(ts(now))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    // The digest found by the index is compared again in constant time, as tokens are.
    let stored = row.str("session_hash")?;
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        stored.as_bytes(),
        hash.as_bytes(),
    )) {
        return Ok(None);
    }
    browser_session_row(&row).map(Some)
}

pub(super) async fn end_browser_session(
    ctx: &mut WriteCtx,
    hash: String,
) -> Result<(), StoreError> {
    ctx.exec(
        sqlx::query(
            "UPDATE console_sessions SET ended_at = ?, end_reason = 'signed_out' WHERE hash = ? AND ended_at IS NULL",
        )
        .bind(ts(ctx.now))
        .bind(hash),
    )
    .await?;
    Ok(())
}

/// At most this many agents are listed.
const MAX_AGENTS: i64 = 500;

pub(super) async fn agent_stats(
    pool: &SqlitePool,
    session_id: SessionId,
) -> Result<Vec<AgentStatsRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT a.*, t.name AS token_name FROM console_agent_stats a
         LEFT JOIN tokens t ON t.id = substr(a.agent, 1, instr(a.agent, '/') - 1)
         WHERE a.session_id = ? ORDER BY a.last_seen DESC, a.agent LIMIT ?",
    )
    .bind(session_id.to_string())
    .bind(MAX_AGENTS)
    .fetch_all(pool)
    .await?;
    let count = |r: &SqliteRow, col: &str| r.int(col).map(|n| n.max(0) as u64);
    rows.iter()
        .map(|r| {
            Ok(AgentStatsRow {
                agent: r.str("agent")?,
                token_name: r.opt_str("token_name")?,
                leased: count(r, "leased")?,
                submissions: count(r, "submissions")?,
                pass: count(r, "pass")?,
                pass_first: count(r, "pass_first")?,
                fail: count(r, "fail")?,
                review: count(r, "review")?,
                done: count(r, "done")?,
                lapses: count(r, "lapses")?,
                tries_to_pass: count(r, "tries_to_pass")?,
                last_seen: parse_ts(&r.str("last_seen")?)?,
            })
        })
        .collect()
}

pub(super) async fn failing_checks(
    pool: &SqlitePool,
    session_id: SessionId,
    limit: u32,
) -> Result<Vec<FailingCheckRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT f.*, q.key FROM console_fact_counts f JOIN quests q ON q.id = f.quest_id
         WHERE f.session_id = ? ORDER BY f.fails + f.reviews DESC, f.fails DESC, f.check_name, f.field LIMIT ?",
    )
    .bind(session_id.to_string())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let (check, field) = (r.str("check_name")?, r.str("field")?);
            Ok(FailingCheckRow {
                example: Fact::new(
                    check.clone(),
                    field.clone(),
                    r.str("expected")?,
                    r.str("actual")?,
                    r.str("hint")?,
                ),
                check,
                field,
                fails: r.int("fails")?.max(0) as u64,
                reviews: r.int("reviews")?.max(0) as u64,
                quest_id: uuid(&r.str("quest_id")?)?,
                quest_key: r.str("key")?,
                submission_id: uuid(&r.str("submission_id")?)?,
            })
        })
        .collect()
}

/// The key of a minute in `console_throughput`: the first 16 characters of
/// the stored time text.
fn minute_key(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M").to_string()
}

pub(super) async fn throughput(
    pool: &SqlitePool,
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
        "SELECT minute, decided FROM console_throughput WHERE session_id = ? AND minute >= ? AND minute <= ?",
    )
    .bind(session_id.to_string())
    .bind(minute_key(from))
    .bind(minute_key(until))
    .fetch_all(pool)
    .await?;
    let mut per_minute = vec![0u64; minutes as usize];
    for r in &rows {
        let at = parse_ts(&format!("{}:00Z", r.str("minute")?))?;
        let index = (at - from).num_minutes();
        if let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| per_minute.get_mut(i))
        {
            *slot = r.int("decided")?.max(0) as u64;
        }
    }
    Ok(Throughput { until, per_minute })
}

/// The filter of a quest page as SQL, with its values in bind order. Only the
/// conditions asked for are written, so that the planner can use the state index.
fn quest_filter(session_id: SessionId, q: &QuestQuery) -> (String, Vec<String>) {
    let mut sql = String::from("q.session_id = ?");
    let mut binds = vec![session_id.to_string()];
    if let Some(state) = q.state {
        sql.push_str(" AND q.state = ?");
        binds.push(state.as_str().to_owned());
    }
    if let Some(mark) = q.mark {
        sql.push_str(" AND q.recheck_mark = ?");
        binds.push(mark.as_str().to_owned());
    }
    if let Some(search) = q.search.as_deref().filter(|s| !s.is_empty()) {
        sql.push_str(" AND instr(lower(q.key), lower(?)) > 0");
        binds.push(search.to_owned());
    }
    if let Some(check) = q.check.as_deref() {
        sql.push_str(
            " AND EXISTS (SELECT 1 FROM submissions s, json_each(s.facts) f
                 WHERE s.quest_id = q.id AND s.verdict IN ('FAIL', 'REVIEW')
                   AND json_extract(f.value, '$.check') = ?",
        );
        binds.push(check.to_owned());
        if let Some(field) = q.field.as_deref() {
            sql.push_str(" AND json_extract(f.value, '$.field') = ?");
            binds.push(field.to_owned());
        }
        sql.push(')');
    }
    (sql, binds)
}

async fn quest_rows(
    pool: &SqlitePool,
    filter: &(String, Vec<String>),
    cursor: Option<u64>,
    backwards: bool,
    limit: u32,
) -> Result<Vec<QuestRow>, StoreError> {
    let (condition, binds) = filter;
    let (compare, order) = if backwards {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    let sql = format!(
        "SELECT q.* FROM quests q WHERE {condition} AND q.row_index {compare} ? ORDER BY q.row_index {order} LIMIT ?"
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
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

pub(super) async fn quest_page(
    pool: &SqlitePool,
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
