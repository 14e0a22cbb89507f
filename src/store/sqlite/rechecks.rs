//! Re-checks of PASS quests (migration 0010): starting a run marks every PASS
//! quest of the session with it; recording a quest's re-check writes its
//! record, sets its mark and clears the marker in one write, so a restart
//! re-runs exactly the quests still marked. Writes run alone on the writer.

use crate::domain::work::Refusal;
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteRow;

use super::codec::*;
use super::writer::WriteCtx;
use crate::domain::ids::{QuestId, RecheckRunId, SessionId};
use crate::domain::recheck::Mark;
use crate::store::common::recheck_event;
use crate::store::{
    AgentStalenessRow, NewRecheck, RecheckJob, RecheckRecorded, RecheckRow, RecheckRunRow,
    RecheckSummary, StoreError,
};

fn run_row(r: &SqliteRow) -> Result<RecheckRunRow, StoreError> {
    Ok(RecheckRunRow {
        id: uuid(&r.str("id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        started_by: r.str("started_by")?,
        started_at: parse_ts(&r.str("started_at")?)?,
        total: r.int("total")? as u64,
        done: r.int("done")? as u64,
        finished_at: opt(r.opt_str("finished_at")?, parse_ts)?,
    })
}

fn recheck_row(r: &SqliteRow) -> Result<RecheckRow, StoreError> {
    Ok(RecheckRow {
        run_id: uuid(&r.str("run_id")?)?,
        quest_id: uuid(&r.str("quest_id")?)?,
        session_id: uuid(&r.str("session_id")?)?,
        submission_id: opt(r.opt_str("submission_id")?, uuid)?,
        verdict: text(&r.str("verdict")?)?,
        outcome: text(&r.str("outcome")?)?,
        mark: opt(r.opt_str("mark")?, text)?,
        facts: from_json(&r.str("facts")?)?,
        evidence: from_json(&r.str("evidence")?)?,
        gate: r.str("gate")?,
        gate_version: r.str("gate_version")?,
        passed_gate_version: r.opt_str("passed_gate_version")?,
        digest: r.str("digest")?,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}

const RUN_COLUMNS: &str =
    "r.*, (SELECT COUNT(*) FROM rechecks c WHERE c.run_id = r.id) AS done FROM recheck_runs r";

pub async fn start_recheck(
    ctx: &mut WriteCtx,
    session_id: SessionId,
    by: String,
    not_since: Option<DateTime<Utc>>,
) -> Result<Option<RecheckRunRow>, StoreError> {
    ctx.session(session_id).await?;
    let sid = session_id.to_string();
    if let Some(since) = not_since {
        let recent = ctx
            .row(
                sqlx::query("SELECT 1 FROM recheck_runs WHERE session_id = ? AND started_at >= ?")
                    .bind(sid.clone())
                    .bind(ts(since)),
            )
            .await?;
        if recent.is_some() {
            return Ok(None);
        }
    }
    let open = ctx
        .row(
            sqlx::query("SELECT 1 FROM recheck_runs WHERE session_id = ? AND finished_at IS NULL")
                .bind(sid.clone()),
        )
        .await?;
    if open.is_some() {
        return Err(Refusal::RecheckRunning.into());
    }
    // The run's total is what the marking touched, as on PostgreSQL (where
    // a count read before it could miss a quest approved in between).
    let id = RecheckRunId::new();
    let marked = ctx
        .exec(
            sqlx::query(
                "UPDATE quests SET recheck_run = ? WHERE session_id = ? AND state = 'PASS'",
            )
            .bind(id.to_string())
            .bind(sid.clone()),
        )
        .await?;
    if marked == 0 {
        return Err(Refusal::NothingToRecheck.into());
    }
    // Times as stored (microseconds), so that what is returned reads back equal.
    let now = ctx.now.trunc_subsecs(6);
    ctx.exec(
        sqlx::query(
            "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(id.to_string())
        .bind(sid)
        .bind(by.clone())
        .bind(ts(now))
        .bind(marked as i64),
    )
    .await?;
    Ok(Some(RecheckRunRow {
        id,
        session_id,
        started_by: by,
        started_at: now,
        total: marked,
        done: 0,
        finished_at: None,
    }))
}

pub async fn record_recheck(
    ctx: &mut WriteCtx,
    new: NewRecheck,
) -> Result<RecheckRecorded, StoreError> {
    let (run, quest_id) = (new.run_id.to_string(), new.quest_id.to_string());
    let earlier = ctx
        .row(
            sqlx::query("SELECT * FROM rechecks WHERE run_id = ? AND quest_id = ?")
                .bind(run.clone())
                .bind(quest_id.clone()),
        )
        .await?;
    if let Some(earlier) = earlier {
        return Ok(RecheckRecorded {
            recheck: recheck_row(&earlier)?,
            replayed: true,
        });
    }
    let quest = ctx
        .row(sqlx::query("SELECT * FROM quests WHERE id = ?").bind(quest_id.clone()))
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let due = quest.opt_str("recheck_run")?;
    let quest = quest_row(&quest)?;
    if due.as_deref() != Some(run.as_str()) {
        return Err(Refusal::RecheckNotDue.into());
    }
    let recheck = RecheckRow {
        run_id: new.run_id,
        quest_id: new.quest_id,
        session_id: quest.session_id,
        submission_id: quest.submission_id,
        verdict: new.verdict,
        outcome: new.outcome,
        mark: new.outcome.mark(),
        facts: new.facts,
        evidence: new.evidence,
        gate: new.gate,
        gate_version: new.gate_version,
        passed_gate_version: new.passed_gate_version,
        digest: new.digest,
        created_at: ctx.now.trunc_subsecs(6),
    };
    let facts = json(&recheck.facts);
    ctx.exec(
        sqlx::query(
            "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict, outcome, mark,
               facts, evidence, gate, gate_version, passed_gate_version, digest, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(run.clone())
        .bind(quest_id.clone())
        .bind(recheck.session_id.to_string())
        .bind(recheck.submission_id.map(|s| s.to_string()))
        .bind(recheck.verdict.as_str())
        .bind(recheck.outcome.as_str())
        .bind(recheck.mark.map(Mark::as_str))
        .bind(facts.clone())
        .bind(json(&recheck.evidence))
        .bind(recheck.gate.clone())
        .bind(recheck.gate_version.clone())
        .bind(recheck.passed_gate_version.clone())
        .bind(recheck.digest.clone())
        .bind(ts(recheck.created_at)),
    )
    .await?;
    let touched = ctx
        .exec(
            sqlx::query(
                "UPDATE quests SET recheck_mark = ?, rechecked_at = ?, recheck_facts = ?, recheck_run = NULL
                 WHERE id = ? AND recheck_run = ?",
            )
            .bind(recheck.mark.map(Mark::as_str))
            .bind(ts(recheck.created_at))
            .bind(facts)
            .bind(quest_id)
            .bind(run.clone()),
        )
        .await?;
    crate::store::common::expect_touched("the quest's re-check mark", touched, 1)?;
    ctx.exec(
        sqlx::query(
            "UPDATE recheck_runs SET finished_at = ?
             WHERE id = ? AND finished_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM quests WHERE recheck_run = ?)",
        )
        .bind(ts(recheck.created_at))
        .bind(run.clone())
        .bind(run),
    )
    .await?;
    ctx.publish(recheck_event(&quest, &recheck));
    Ok(RecheckRecorded {
        recheck,
        replayed: false,
    })
}

pub async fn recheck_summary(
    pool: &SqlitePool,
    session_id: SessionId,
) -> Result<RecheckSummary, StoreError> {
    let mut summary = RecheckSummary::default();
    let marks = sqlx::query(
        "SELECT recheck_mark, COUNT(*) AS n FROM quests INDEXED BY quests_recheck_mark
         WHERE session_id = ? AND recheck_mark IS NOT NULL GROUP BY recheck_mark",
    )
    .bind(session_id.to_string())
    .fetch_all(pool)
    .await?;
    for row in &marks {
        let n = row.int("n")? as u64;
        match text::<Mark>(&row.str("recheck_mark")?)? {
            Mark::Stale => summary.stale = n,
            Mark::Unconfirmed => summary.unconfirmed = n,
        }
    }
    let sql = format!(
        "SELECT {RUN_COLUMNS} WHERE r.session_id = ? ORDER BY r.started_at DESC, r.id DESC LIMIT 1"
    );
    summary.last_run = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(session_id.to_string())
        .fetch_optional(pool)
        .await?
        .as_ref()
        .map(run_row)
        .transpose()?;
    Ok(summary)
}

pub async fn due_rechecks(
    pool: &SqlitePool,
    limit: u32,
) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError> {
    let rows = sqlx::query(
        "SELECT recheck_run, id FROM quests INDEXED BY quests_recheck_due
         WHERE recheck_run IS NOT NULL ORDER BY recheck_run, row_index LIMIT ?",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((uuid(&r.str("recheck_run")?)?, uuid(&r.str("id")?)?)))
        .collect()
}

pub async fn recheck_job(
    pool: &SqlitePool,
    quest_id: QuestId,
) -> Result<Option<RecheckJob>, StoreError> {
    let row = sqlx::query(
        "SELECT q.*, s.gate_version AS passed_gate_version
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id WHERE q.id = ?",
    )
    .bind(quest_id.to_string())
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("quest"))?;
    let Some(run) = row.opt_str("recheck_run")? else {
        return Ok(None);
    };
    let quest = quest_row(&row)?;
    let session = super::reads::get_session(pool, quest.session_id).await?;
    Ok(Some(RecheckJob {
        run_id: uuid(&run)?,
        quest,
        config: session.config,
        passed_gate_version: row.opt_str("passed_gate_version")?,
    }))
}

pub async fn rechecks(pool: &SqlitePool, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM rechecks WHERE quest_id = ? ORDER BY created_at, id")
        .bind(quest_id.to_string())
        .fetch_all(pool)
        .await?;
    rows.iter().map(recheck_row).collect()
}

pub async fn agent_staleness(
    pool: &SqlitePool,
    session_id: SessionId,
) -> Result<Vec<AgentStalenessRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT s.agent, COUNT(*) AS pass, COALESCE(SUM(q.recheck_mark = 'stale'), 0) AS stale
         FROM quests q JOIN submissions s ON s.id = q.submission_id
         WHERE q.session_id = ? AND q.state = 'PASS' GROUP BY s.agent ORDER BY s.agent",
    )
    .bind(session_id.to_string())
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(AgentStalenessRow {
                agent: r.str("agent")?,
                pass: r.int("pass")? as u64,
                stale: r.int("stale")? as u64,
            })
        })
        .collect()
}
