//! The AI verifiers' calibration against the review queue: the confusion
//! counts of each verifier and question over its labelled answers (answers on
//! quests a person decided one by one, not in bulk), the switches of a
//! session's verifiers between voting and advisory, and the answers where
//! verifier and reviewer disagreed. The rules are in
//! [`crate::domain::verify::calibration`]; this file only counts and records.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use super::codec::*;
use super::writer::{Query, WriteCtx};
use crate::domain::ids::SessionId;
use crate::domain::verify::calibration::{Confusion, Standing};
use crate::store::{Calibration, ConfusionRow, DisagreementRow, PairStats, StoreError, SwitchRow};

/// A labelled answer: a valid answer joined to a non-bulk decision on its
/// quest made after it (so answers asked after a decision never meet it).
const LABELLED: &str = "FROM l2_answers a
     JOIN review_decisions d ON d.quest_id = a.quest_id AND d.bulk = 0 AND d.created_at >= a.created_at";

const COUNTS: &str =
    "SUM(CASE WHEN a.flagged = 1 AND d.decision = 'reject' THEN 1 ELSE 0 END) AS upheld,
     SUM(CASE WHEN a.flagged = 1 AND d.decision = 'approve' THEN 1 ELSE 0 END) AS overruled,
     SUM(CASE WHEN a.flagged = 0 AND d.decision = 'reject' THEN 1 ELSE 0 END) AS missed,
     SUM(CASE WHEN a.flagged = 0 AND d.decision = 'approve' THEN 1 ELSE 0 END) AS cleared";

fn session_confusion(session: SessionId) -> Query {
    let sql = format!(
        "SELECT a.verifier, a.question_index, MIN(a.question) AS question, {COUNTS}
         {LABELLED} WHERE a.session_id = ? AND a.answer IS NOT NULL
         GROUP BY a.verifier, a.question_index ORDER BY a.verifier, a.question_index"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(session.to_string())
}

fn server_confusion() -> Query {
    let sql = format!(
        "SELECT a.verifier, NULL AS question_index, a.question, {COUNTS}
         {LABELLED} WHERE a.answer IS NOT NULL
         GROUP BY a.verifier, a.question ORDER BY a.verifier, a.question"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
}

fn confusion_row(r: &SqliteRow) -> Result<ConfusionRow, StoreError> {
    Ok(ConfusionRow {
        verifier: r.str("verifier")?,
        question_index: r.opt_int("question_index")?.map(|i| i as u32),
        question: r.str("question")?,
        confusion: Confusion {
            upheld: r.int("upheld")? as u64,
            overruled: r.int("overruled")? as u64,
            missed: r.int("missed")? as u64,
            cleared: r.int("cleared")? as u64,
        },
    })
}

fn switch_row(r: &SqliteRow) -> Result<SwitchRow, StoreError> {
    Ok(SwitchRow {
        session_id: uuid(&r.str("session_id")?)?,
        verifier: r.str("verifier")?,
        question_index: r.int("question_index")? as u32,
        standing: text(&r.str("standing")?)?,
        confusion: Confusion {
            upheld: r.int("upheld")? as u64,
            overruled: r.int("overruled")? as u64,
            missed: r.int("missed")? as u64,
            cleared: r.int("cleared")? as u64,
        },
        kappa: r.try_get("kappa")?,
        min_kappa: r.try_get("min_kappa")?,
        min_labels: r.int("min_labels")? as u32,
        created_at: parse_ts(&r.str("created_at")?)?,
    })
}

/// The calibration of one session or of the whole server, read in one snapshot.
pub async fn calibration(
    pool: &SqlitePool,
    session: Option<SessionId>,
    limit: u32,
) -> Result<Calibration, StoreError> {
    let mut tx = pool.begin().await?;
    let confusion = match session {
        Some(id) => session_confusion(id).fetch_all(&mut *tx).await?,
        None => server_confusion().fetch_all(&mut *tx).await?,
    };
    let confusion = confusion
        .iter()
        .map(confusion_row)
        .collect::<Result<_, _>>()?;
    let scope = session.map(|s| s.to_string());
    let switches = sqlx::query(
        "SELECT * FROM verifier_switches WHERE ?1 IS NULL OR session_id = ?1 ORDER BY seq",
    )
    .bind(scope.clone())
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(switch_row)
    .collect::<Result<_, _>>()?;
    let sql = format!(
        "SELECT a.quest_id, a.session_id, q.key, a.verifier, a.question_index, a.answer, a.flagged,
                d.decision, d.reviewer, d.note, d.created_at AS decided_at
         {LABELLED} JOIN quests q ON q.id = a.quest_id
         WHERE (?1 IS NULL OR a.session_id = ?1) AND a.answer IS NOT NULL
           AND ((a.flagged = 1 AND d.decision = 'approve') OR (a.flagged = 0 AND d.decision = 'reject'))
         ORDER BY d.created_at DESC, d.id DESC, a.verifier, a.question_index LIMIT ?2"
    );
    let disagreements = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(scope.clone())
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(DisagreementRow {
                quest_id: uuid(&r.str("quest_id")?)?,
                session_id: uuid(&r.str("session_id")?)?,
                key: r.str("key")?,
                verifier: r.str("verifier")?,
                question_index: r.int("question_index")? as u32,
                answer: text(&r.str("answer")?)?,
                flagged: r.int("flagged")? == 1,
                decision: text(&r.str("decision")?)?,
                reviewer: r.str("reviewer")?,
                note: r.str("note")?,
                decided_at: parse_ts(&r.str("decided_at")?)?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    let agreement = sqlx::query(
        "SELECT verifier_a, verifier_b, SUM(compared) AS compared, SUM(agreed) AS agreed
         FROM l2_pair_stats WHERE ?1 IS NULL OR session_id = ?1
         GROUP BY verifier_a, verifier_b ORDER BY verifier_a, verifier_b",
    )
    .bind(scope)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(PairStats {
            a: r.str("verifier_a")?,
            b: r.str("verifier_b")?,
            compared: r.int("compared")? as u64,
            agreed: r.int("agreed")? as u64,
        })
    })
    .collect::<Result<_, StoreError>>()?;
    tx.commit().await?;
    Ok(Calibration {
        confusion,
        switches,
        disagreements,
        agreement,
    })
}

/// The current standing of each of a session's `(verifier, question index)`
/// that ever switched: its latest switch.
async fn standings(
    ctx: &mut WriteCtx,
    session: SessionId,
) -> Result<Vec<((String, usize), Standing)>, StoreError> {
    let rows = ctx
        .rows(
            sqlx::query(
                "SELECT verifier, question_index, standing FROM verifier_switches
                 WHERE session_id = ? ORDER BY seq",
            )
            .bind(session.to_string()),
        )
        .await?;
    let mut out: Vec<((String, usize), Standing)> = Vec::new();
    for r in rows {
        let key = (r.str("verifier")?, r.int("question_index")? as usize);
        let standing = text(&r.str("standing")?)?;
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = standing,
            None => out.push((key, standing)),
        }
    }
    Ok(out)
}

/// The `(verifier, question index)` pairs that are advisory in a session now.
pub async fn advisory(
    ctx: &mut WriteCtx,
    session: SessionId,
) -> Result<Vec<(String, usize)>, StoreError> {
    Ok(standings(ctx, session)
        .await?
        .into_iter()
        .filter(|(_, s)| *s == Standing::Advisory)
        .map(|(k, _)| k)
        .collect())
}

/// After a label (a non-bulk decision `decision_id`) in a session with a
/// floor: judges each verifier and question again and records every switch
/// with the figures that caused it.
pub async fn recalibrate(
    ctx: &mut WriteCtx,
    session: SessionId,
    decision_id: &str,
) -> Result<(), StoreError> {
    let config = ctx.session(session).await?;
    let Some(floor) = config.config.verify.as_ref().and_then(|v| v.floor()) else {
        return Ok(());
    };
    let now = standings(ctx, session).await?;
    let rows = ctx.rows(session_confusion(session)).await?;
    for row in &rows {
        let row = confusion_row(row)?;
        let index = row.question_index.unwrap_or_default() as usize;
        let current = now
            .iter()
            .find(|((v, i), _)| *v == row.verifier && *i == index)
            .map_or(Standing::Voting, |(_, s)| *s);
        let Some(judged) = floor.switch(current, &row.confusion) else {
            continue;
        };
        let c = row.confusion;
        ctx.exec(
            sqlx::query(
                "INSERT INTO verifier_switches (session_id, verifier, question_index, standing, upheld,
                 overruled, missed, cleared, kappa, min_kappa, min_labels, decision_id, created_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(session.to_string())
            .bind(row.verifier.clone())
            .bind(index as i64)
            .bind(judged.standing.as_str())
            .bind(c.upheld as i64)
            .bind(c.overruled as i64)
            .bind(c.missed as i64)
            .bind(c.cleared as i64)
            .bind(judged.kappa)
            .bind(floor.min_kappa)
            .bind(i64::from(floor.min_labels))
            .bind(decision_id.to_owned())
            .bind(ts(ctx.now)),
        )
        .await?;
    }
    Ok(())
}
