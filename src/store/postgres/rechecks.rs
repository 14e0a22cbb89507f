//! Re-checks of PASS quests (migration 0009): starting a run marks every PASS
//! quest of the session with it, under a lock on the session so that replicas
//! following one schedule start it once; recording a quest's re-check writes
//! its record, sets its mark and clears the marker in one transaction, so a
//! restart re-runs exactly the quests still marked.

use crate::domain::work::Refusal;
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::PgPool;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::codec::*;
use super::tx::Tx;
use crate::domain::ids::{QuestId, RecheckRunId, SessionId};
use crate::domain::recheck::Mark;
use crate::store::common::{expect_touched, recheck_event};
use crate::store::{
    AgentStalenessRow, NewRecheck, RecheckJob, RecheckRecorded, RecheckRow, RecheckRunRow,
    RecheckSummary, StoreError,
};

fn run_row(r: &PgRow) -> Result<RecheckRunRow, StoreError> {
    Ok(RecheckRunRow {
        id: r.try_get("id")?,
        session_id: r.try_get("session_id")?,
        started_by: r.try_get("started_by")?,
        started_at: r.try_get("started_at")?,
        total: r.count("total")?,
        done: r.count("done")?,
        finished_at: r.try_get("finished_at")?,
    })
}

fn recheck_row(r: &PgRow) -> Result<RecheckRow, StoreError> {
    Ok(RecheckRow {
        run_id: r.try_get("run_id")?,
        quest_id: r.try_get("quest_id")?,
        session_id: r.try_get("session_id")?,
        submission_id: r.try_get("submission_id")?,
        verdict: r.parsed("verdict")?,
        outcome: r.parsed("outcome")?,
        mark: r.opt_parsed("mark")?,
        facts: r.json("facts")?,
        evidence: r.json("evidence")?,
        gate: r.try_get("gate")?,
        gate_version: r.try_get("gate_version")?,
        passed_gate_version: r.try_get("passed_gate_version")?,
        digest: r.try_get("digest")?,
        created_at: r.try_get("created_at")?,
    })
}

pub async fn start_recheck(
    tx: &mut Tx,
    session_id: SessionId,
    by: String,
    not_since: Option<DateTime<Utc>>,
) -> Result<Option<RecheckRunRow>, StoreError> {
    // Starts of one session take turns (a lock of their own: a lock on the
    // session row would hold up every write that refers to it).
    sqlx::query("SELECT id FROM sessions WHERE id = $1")
        .bind(session_id)
        .fetch_optional(tx.db())
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('recheck ' || $1::text, 0))")
        .bind(session_id)
        .execute(tx.db())
        .await?;
    if let Some(since) = not_since {
        let recent =
            sqlx::query("SELECT 1 FROM recheck_runs WHERE session_id = $1 AND started_at >= $2")
                .bind(session_id)
                .bind(since)
                .fetch_optional(tx.db())
                .await?;
        if recent.is_some() {
            return Ok(None);
        }
    }
    let open =
        sqlx::query("SELECT 1 FROM recheck_runs WHERE session_id = $1 AND finished_at IS NULL")
            .bind(session_id)
            .fetch_optional(tx.db())
            .await?;
    if open.is_some() {
        return Err(Refusal::RecheckRunning.into());
    }
    // The run's total is what the marking touched: a count read before it
    // could miss a quest approved in between (each statement of a READ
    // COMMITTED transaction sees what committed before it began).
    let id = RecheckRunId::new();
    let marked =
        sqlx::query("UPDATE quests SET recheck_run = $1 WHERE session_id = $2 AND state = 'PASS'")
            .bind(id)
            .bind(session_id)
            .execute(tx.db())
            .await?
            .rows_affected();
    if marked == 0 {
        return Err(Refusal::NothingToRecheck.into());
    }
    // Times as stored (microseconds), so that what is returned reads back equal.
    let now = tx.now.trunc_subsecs(6);
    sqlx::query(
        "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(session_id)
    .bind(&by)
    .bind(now)
    .bind(marked as i64)
    .execute(tx.db())
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

pub async fn record_recheck(tx: &mut Tx, new: NewRecheck) -> Result<RecheckRecorded, StoreError> {
    let quest = sqlx::query("SELECT * FROM quests WHERE id = $1 FOR UPDATE")
        .bind(new.quest_id)
        .fetch_optional(tx.db())
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let due: Option<RecheckRunId> = quest.try_get("recheck_run")?;
    let quest = quest_row(&quest)?;
    let earlier = sqlx::query("SELECT * FROM rechecks WHERE run_id = $1 AND quest_id = $2")
        .bind(new.run_id)
        .bind(new.quest_id)
        .fetch_optional(tx.db())
        .await?;
    if let Some(earlier) = earlier {
        return Ok(RecheckRecorded {
            recheck: recheck_row(&earlier)?,
            replayed: true,
        });
    }
    if due != Some(new.run_id) {
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
        created_at: tx.now.trunc_subsecs(6),
    };
    let facts = json(&recheck.facts);
    sqlx::query(
        "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict, outcome, mark,
           facts, evidence, gate, gate_version, passed_gate_version, digest, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::json, $10::json, $11, $12, $13, $14, $15)",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(recheck.run_id)
    .bind(recheck.quest_id)
    .bind(recheck.session_id)
    .bind(recheck.submission_id)
    .bind(recheck.verdict.as_str())
    .bind(recheck.outcome.as_str())
    .bind(recheck.mark.map(Mark::as_str))
    .bind(&facts)
    .bind(json(&recheck.evidence))
    .bind(&recheck.gate)
    .bind(&recheck.gate_version)
    .bind(&recheck.passed_gate_version)
    .bind(&recheck.digest)
    .bind(recheck.created_at)
    .execute(tx.db())
    .await?;
    let touched = sqlx::query(
        "UPDATE quests SET recheck_mark = $1, rechecked_at = $2, recheck_facts = $3::json, recheck_run = NULL
         WHERE id = $4 AND recheck_run = $5",
    )
    .bind(recheck.mark.map(Mark::as_str))
    .bind(recheck.created_at)
    .bind(&facts)
    .bind(recheck.quest_id)
    .bind(recheck.run_id)
    .execute(tx.db())
    .await?
    .rows_affected();
    expect_touched("the quest's re-check mark", touched, 1)?;
    // The recorders of one run take turns from here, so that of two recording
    // its last quests at once the later one sees the other's and finishes it.
    sqlx::query("SELECT 1 FROM recheck_runs WHERE id = $1 FOR UPDATE")
        .bind(recheck.run_id)
        .execute(tx.db())
        .await?;
    sqlx::query(
        "UPDATE recheck_runs SET finished_at = $1
         WHERE id = $2 AND finished_at IS NULL AND NOT EXISTS (SELECT 1 FROM quests WHERE recheck_run = $2)",
    )
    .bind(recheck.created_at)
    .bind(recheck.run_id)
    .execute(tx.db())
    .await?;
    tx.events.push(recheck_event(&quest, &recheck));
    Ok(RecheckRecorded {
        recheck,
        replayed: false,
    })
}

pub async fn recheck_summary(
    pool: &PgPool,
    session_id: SessionId,
) -> Result<RecheckSummary, StoreError> {
    let mut summary = RecheckSummary::default();
    let marks = sqlx::query(
        "SELECT recheck_mark, COUNT(*) AS n FROM quests
         WHERE session_id = $1 AND recheck_mark IS NOT NULL GROUP BY recheck_mark",
    )
    .bind(session_id)
    .fetch_all(pool)
    .await?;
    for row in &marks {
        let n = row.count("n")?;
        match row.parsed::<Mark>("recheck_mark")? {
            Mark::Stale => summary.stale = n,
            Mark::Unconfirmed => summary.unconfirmed = n,
        }
    }
    summary.last_run = sqlx::query(
        "SELECT r.*, (SELECT COUNT(*) FROM rechecks c WHERE c.run_id = r.id) AS done
         FROM recheck_runs r WHERE r.session_id = $1 ORDER BY r.started_at DESC, r.id DESC LIMIT 1",
    )
    .bind(session_id)
    .fetch_optional(pool)
    .await?
    .as_ref()
    .map(run_row)
    .transpose()?;
    Ok(summary)
}

pub async fn due_rechecks(
    pool: &PgPool,
    limit: u32,
) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError> {
    let rows = sqlx::query(
        "SELECT recheck_run, id FROM quests WHERE recheck_run IS NOT NULL
         ORDER BY recheck_run, row_index LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("recheck_run")?, r.try_get("id")?)))
        .collect()
}

pub async fn recheck_job(
    pool: &PgPool,
    quest_id: QuestId,
) -> Result<Option<RecheckJob>, StoreError> {
    let row = sqlx::query(
        "SELECT q.*, s.gate_version AS passed_gate_version
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id WHERE q.id = $1",
    )
    .bind(quest_id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("quest"))?;
    let Some(run_id) = row.try_get::<Option<RecheckRunId>, _>("recheck_run")? else {
        return Ok(None);
    };
    let quest = quest_row(&row)?;
    let session = super::reads::get_session(pool, quest.session_id).await?;
    Ok(Some(RecheckJob {
        run_id,
        quest,
        config: session.config,
        passed_gate_version: row.try_get("passed_gate_version")?,
    }))
}

pub async fn rechecks(pool: &PgPool, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM rechecks WHERE quest_id = $1 ORDER BY created_at, id")
        .bind(quest_id)
        .fetch_all(pool)
        .await?;
    rows.iter().map(recheck_row).collect()
}

pub async fn agent_staleness(
    pool: &PgPool,
    session_id: SessionId,
) -> Result<Vec<AgentStalenessRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT s.agent, COUNT(*) AS pass, COUNT(*) FILTER (WHERE q.recheck_mark = 'stale') AS stale
         FROM quests q JOIN submissions s ON s.id = q.submission_id
         WHERE q.session_id = $1 AND q.state = 'PASS' GROUP BY s.agent ORDER BY s.agent",
    )
    .bind(session_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(AgentStalenessRow {
                agent: r.try_get("agent")?,
                pass: r.count("pass")?,
                stale: r.count("stale")?,
            })
        })
        .collect()
}
