//! Re-checks of PASS quests (SQLite migration 0010, PostgreSQL 0009):
//! starting a run marks every PASS quest of the session with it, one start
//! of a session at a time, so that replicas following one schedule start it
//! once; recording a quest's re-check writes its record, sets its mark and
//! clears the marker in one transaction, so a restart re-runs exactly the
//! quests still marked.

use chrono::{DateTime, SubsecRound, Utc};

use super::Tx;
use super::codec::*;
use crate::domain::ids::{QuestId, RecheckRunId, SessionId};
use crate::domain::recheck::Mark;
use crate::domain::work::Refusal;
use crate::store::columns::RowId;
use crate::store::common::{Turn, expect_touched, recheck_event};
use crate::store::{
    AgentStalenessRow, NewRecheck, RecheckJob, RecheckRecorded, RecheckRow, RecheckRunRow,
    RecheckSummary, StoreError,
};

fn run_row(r: &impl Columns) -> Result<RecheckRunRow, StoreError> {
    Ok(RecheckRunRow {
        id: r.id("id")?,
        session_id: r.id("session_id")?,
        started_by: r.text("started_by")?,
        started_at: r.at("started_at")?,
        total: r.count("total")?,
        done: r.count("done")?,
        finished_at: r.opt_at("finished_at")?,
    })
}

fn recheck_row(r: &impl Columns) -> Result<RecheckRow, StoreError> {
    Ok(RecheckRow {
        run_id: r.id("run_id")?,
        quest_id: r.id("quest_id")?,
        session_id: r.id("session_id")?,
        submission_id: r.opt_id("submission_id")?,
        verdict: r.parsed("verdict")?,
        outcome: r.parsed("outcome")?,
        mark: r.opt_parsed("mark")?,
        facts: r.json("facts")?,
        evidence: r.json("evidence")?,
        gate: r.text("gate")?,
        gate_version: r.text("gate_version")?,
        passed_gate_version: r.opt_text("passed_gate_version")?,
        digest: r.text("digest")?,
        created_at: r.at("created_at")?,
    })
}

pub async fn start_recheck(
    tx: &mut Tx,
    session_id: SessionId,
    by: String,
    not_since: Option<DateTime<Utc>>,
) -> Result<Option<RecheckRunRow>, StoreError> {
    tx.row(sqlx::query("SELECT id FROM sessions WHERE id = $1").bind(session_id))
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    tx.take_turns(Turn::RecheckStart(session_id)).await?;
    if let Some(since) = not_since {
        let recent = tx
            .row(
                sqlx::query(
                    "SELECT 1 FROM recheck_runs WHERE session_id = $1 AND started_at >= $2",
                )
                .bind(session_id)
                .bind(at(since)),
            )
            .await?;
        if recent.is_some() {
            return Ok(None);
        }
    }
    let open = tx
        .row(
            sqlx::query("SELECT 1 FROM recheck_runs WHERE session_id = $1 AND finished_at IS NULL")
                .bind(session_id),
        )
        .await?;
    if open.is_some() {
        return Err(Refusal::RecheckRunning.into());
    }
    // The run's total is what the marking touched: a count read before it
    // could miss a quest approved in between (on PostgreSQL each statement
    // of a READ COMMITTED transaction sees what committed before it began).
    let id = RecheckRunId::new();
    let marked = tx
        .exec(
            sqlx::query(
                "UPDATE quests SET recheck_run = $1 WHERE session_id = $2 AND state = 'PASS'",
            )
            .bind(id)
            .bind(session_id),
        )
        .await?;
    if marked == 0 {
        return Err(Refusal::NothingToRecheck.into());
    }
    // Times as stored (microseconds), so that what is returned reads back equal.
    let now = tx.now.trunc_subsecs(6);
    tx.exec(
        sqlx::query(
            "INSERT INTO recheck_runs (id, session_id, started_by, started_at, total)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(session_id)
        .bind(by.clone())
        .bind(at(now))
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

pub async fn record_recheck(tx: &mut Tx, new: NewRecheck) -> Result<RecheckRecorded, StoreError> {
    let quest = tx
        .row(
            sqlx::query(concat!("SELECT * FROM quests WHERE id = $1", for_update!()))
                .bind(new.quest_id),
        )
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let due: Option<RecheckRunId> = quest.opt_id("recheck_run")?;
    let quest = quest_row(&quest)?;
    let earlier = tx
        .row(
            sqlx::query("SELECT * FROM rechecks WHERE run_id = $1 AND quest_id = $2")
                .bind(new.run_id)
                .bind(new.quest_id),
        )
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
    tx.exec(
        sqlx::query(
            "INSERT INTO rechecks (id, run_id, quest_id, session_id, submission_id, verdict, outcome, mark,
               facts, evidence, gate, gate_version, passed_gate_version, digest, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(RowId::new())
        .bind(recheck.run_id)
        .bind(recheck.quest_id)
        .bind(recheck.session_id)
        .bind(recheck.submission_id)
        .bind(recheck.verdict.as_str())
        .bind(recheck.outcome.as_str())
        .bind(recheck.mark.map(Mark::as_str))
        .bind(doc(&recheck.facts))
        .bind(doc(&recheck.evidence))
        .bind(recheck.gate.clone())
        .bind(recheck.gate_version.clone())
        .bind(recheck.passed_gate_version.clone())
        .bind(recheck.digest.clone())
        .bind(at(recheck.created_at)),
    )
    .await?;
    let touched = tx
        .exec(
            sqlx::query(
                "UPDATE quests
                 SET recheck_mark = $1, rechecked_at = $2, recheck_facts = $3, recheck_run = NULL
                 WHERE id = $4 AND recheck_run = $5",
            )
            .bind(recheck.mark.map(Mark::as_str))
            .bind(at(recheck.created_at))
            .bind(doc(&recheck.facts))
            .bind(recheck.quest_id)
            .bind(recheck.run_id),
        )
        .await?;
    expect_touched("the quest's re-check mark", touched, 1)?;
    // The recorders of one run take turns from here, so that of two recording
    // its last quests at once the later one sees the other's and finishes it.
    tx.take_turns(Turn::RecheckRun(recheck.run_id)).await?;
    tx.exec(
        sqlx::query(
            "UPDATE recheck_runs SET finished_at = $1
             WHERE id = $2 AND finished_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM quests WHERE recheck_run = $2)",
        )
        .bind(at(recheck.created_at))
        .bind(recheck.run_id),
    )
    .await?;
    tx.publish(recheck_event(&quest, &recheck));
    Ok(RecheckRecorded {
        recheck,
        replayed: false,
    })
}

pub async fn recheck_summary(
    pool: &Pool,
    session_id: SessionId,
) -> Result<RecheckSummary, StoreError> {
    let mut summary = RecheckSummary::default();
    let marks = sqlx::query(concat!(
        "SELECT recheck_mark, COUNT(*) AS n FROM quests",
        indexed_by!("quests_recheck_mark"),
        " WHERE session_id = $1 AND recheck_mark IS NOT NULL GROUP BY recheck_mark"
    ))
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
    pool: &Pool,
    limit: u32,
) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT recheck_run, id FROM quests",
        indexed_by!("quests_recheck_due"),
        " WHERE recheck_run IS NOT NULL ORDER BY recheck_run, row_index LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((r.id("recheck_run")?, r.id("id")?)))
        .collect()
}

pub async fn recheck_job(pool: &Pool, quest_id: QuestId) -> Result<Option<RecheckJob>, StoreError> {
    let row = sqlx::query(
        "SELECT q.*, s.gate_version AS passed_gate_version
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id WHERE q.id = $1",
    )
    .bind(quest_id)
    .fetch_optional(pool)
    .await?
    .ok_or(StoreError::NotFound("quest"))?;
    let Some(run_id) = row.opt_id("recheck_run")? else {
        return Ok(None);
    };
    let quest = quest_row(&row)?;
    let session = super::reads::get_session(pool, quest.session_id).await?;
    Ok(Some(RecheckJob {
        run_id,
        quest,
        config: session.config,
        passed_gate_version: row.opt_text("passed_gate_version")?,
    }))
}

pub async fn rechecks(pool: &Pool, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM rechecks WHERE quest_id = $1 ORDER BY created_at, id")
        .bind(quest_id)
        .fetch_all(pool)
        .await?;
    rows.iter().map(recheck_row).collect()
}

pub async fn agent_staleness(
    pool: &Pool,
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
                agent: r.text("agent")?,
                pass: r.count("pass")?,
                stale: r.count("stale")?,
            })
        })
        .collect()
}
