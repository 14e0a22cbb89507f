//! [`crate::store::sqlite`]'s calibration on PostgreSQL: the confusion counts
//! of each verifier and question over its labelled answers (non-bulk review
//! decisions), the switches between voting and advisory, and the answers
//! where verifier and reviewer disagreed. The rules are in
//! [`crate::domain::verify::calibration`].

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use super::codec::*;
use super::leases::session;
use super::tx::Tx;
use crate::domain::ids::SessionId;
use crate::domain::verify::calibration::{Confusion, Standing};
use crate::store::{Calibration, ConfusionRow, DisagreementRow, PairStats, StoreError, SwitchRow};

/// A labelled answer: a valid answer joined to a non-bulk decision on its
/// quest made after it.
const LABELLED: &str = "FROM l2_answers a
     JOIN review_decisions d ON d.quest_id = a.quest_id AND d.bulk = false AND d.created_at >= a.created_at";

const COUNTS: &str = "COUNT(*) FILTER (WHERE a.flagged AND d.decision = 'reject') AS upheld,
     COUNT(*) FILTER (WHERE a.flagged AND d.decision = 'approve') AS overruled,
     COUNT(*) FILTER (WHERE NOT a.flagged AND d.decision = 'reject') AS missed,
     COUNT(*) FILTER (WHERE NOT a.flagged AND d.decision = 'approve') AS cleared";

fn session_confusion_sql() -> String {
    format!(
        "SELECT a.verifier, a.question_index, MIN(a.question) AS question, {COUNTS}
         {LABELLED} WHERE a.session_id = $1 AND a.answer IS NOT NULL
         GROUP BY a.verifier, a.question_index ORDER BY a.verifier, a.question_index"
    )
}

fn confusion_of(r: &PgRow) -> Result<Confusion, StoreError> {
    Ok(Confusion {
        upheld: r.count("upheld")?,
        overruled: r.count("overruled")?,
        missed: r.count("missed")?,
        cleared: r.count("cleared")?,
    })
}

fn confusion_row(r: &PgRow) -> Result<ConfusionRow, StoreError> {
    Ok(ConfusionRow {
        verifier: r.try_get("verifier")?,
        question_index: r
            .try_get::<Option<i32>, _>("question_index")?
            .map(|i| i as u32),
        question: r.try_get("question")?,
        confusion: confusion_of(r)?,
    })
}

fn switch_row(r: &PgRow) -> Result<SwitchRow, StoreError> {
    Ok(SwitchRow {
        session_id: r.try_get("session_id")?,
        verifier: r.try_get("verifier")?,
        question_index: r.try_get::<i32, _>("question_index")? as u32,
        standing: r.parsed("standing")?,
        confusion: confusion_of(r)?,
        kappa: r.try_get("kappa")?,
        min_kappa: r.try_get("min_kappa")?,
        min_labels: r.try_get::<i32, _>("min_labels")? as u32,
        created_at: r.try_get("created_at")?,
    })
}

/// The calibration of one session or of the whole server, read in one snapshot.
pub async fn calibration(
    pool: &PgPool,
    scope: Option<SessionId>,
    limit: u32,
) -> Result<Calibration, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let confusion = match scope {
        Some(id) => {
            sqlx::query(sqlx::AssertSqlSafe(session_confusion_sql()))
                .bind(id)
                .fetch_all(&mut *tx)
                .await?
        }
        None => {
            let sql = format!(
                "SELECT a.verifier, NULL::integer AS question_index, a.question, {COUNTS}
                 {LABELLED} WHERE a.answer IS NOT NULL
                 GROUP BY a.verifier, a.question ORDER BY a.verifier, a.question"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut *tx)
                .await?
        }
    };
    let confusion = confusion
        .iter()
        .map(confusion_row)
        .collect::<Result<_, _>>()?;
    let switches = sqlx::query(
        "SELECT * FROM verifier_switches WHERE $1::uuid IS NULL OR session_id = $1 ORDER BY seq",
    )
    .bind(scope)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(switch_row)
    .collect::<Result<_, _>>()?;
    let sql = format!(
        "SELECT a.quest_id, a.session_id, q.key, a.verifier, a.question_index, a.answer, a.flagged,
                d.decision, d.reviewer, d.note, d.created_at AS decided_at
         {LABELLED} JOIN quests q ON q.id = a.quest_id
         WHERE ($1::uuid IS NULL OR a.session_id = $1) AND a.answer IS NOT NULL
           AND ((a.flagged AND d.decision = 'approve') OR (NOT a.flagged AND d.decision = 'reject'))
         ORDER BY d.created_at DESC, d.id DESC, a.verifier, a.question_index LIMIT $2"
    );
    let disagreements = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(scope)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(DisagreementRow {
                quest_id: r.try_get("quest_id")?,
                session_id: r.try_get("session_id")?,
                key: r.try_get("key")?,
                verifier: r.try_get("verifier")?,
                question_index: r.try_get::<i32, _>("question_index")? as u32,
                answer: r.parsed("answer")?,
                flagged: r.try_get("flagged")?,
                decision: r.parsed("decision")?,
                reviewer: r.try_get("reviewer")?,
                note: r.try_get("note")?,
                decided_at: r.try_get("decided_at")?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    let agreement = sqlx::query(
        "SELECT verifier_a, verifier_b, SUM(compared)::bigint AS compared, SUM(agreed)::bigint AS agreed
         FROM l2_pair_stats WHERE $1::uuid IS NULL OR session_id = $1
         GROUP BY verifier_a, verifier_b ORDER BY verifier_a, verifier_b",
    )
    .bind(scope)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(PairStats {
            a: r.try_get("verifier_a")?,
            b: r.try_get("verifier_b")?,
            compared: r.count("compared")?,
            agreed: r.count("agreed")?,
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
    tx: &mut Tx,
    id: SessionId,
) -> Result<Vec<((String, usize), Standing)>, StoreError> {
    let rows = sqlx::query(
        "SELECT DISTINCT ON (verifier, question_index) verifier, question_index, standing
         FROM verifier_switches WHERE session_id = $1
         ORDER BY verifier, question_index, seq DESC",
    )
    .bind(id)
    .fetch_all(tx.db())
    .await?;
    rows.iter()
        .map(|r| {
            let key = (
                r.try_get::<String, _>("verifier")?,
                r.try_get::<i32, _>("question_index")? as usize,
            );
            Ok((key, r.parsed("standing")?))
        })
        .collect()
}

/// The `(verifier, question index)` pairs that are advisory in a session now.
pub async fn advisory(tx: &mut Tx, id: SessionId) -> Result<Vec<(String, usize)>, StoreError> {
    Ok(standings(tx, id)
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
    tx: &mut Tx,
    id: SessionId,
    decision_id: uuid::Uuid,
) -> Result<(), StoreError> {
    let s = session(tx, id).await?;
    let Some(floor) = s.config.verify.as_ref().and_then(|v| v.floor()) else {
        return Ok(());
    };
    // One judgement at a time per session, so that two labels recorded at
    // once on two replicas cannot both record the same switch.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('quest calibration ' || $1::text))")
        .bind(id)
        .execute(tx.db())
        .await?;
    let now = standings(tx, id).await?;
    let rows = sqlx::query(sqlx::AssertSqlSafe(session_confusion_sql()))
        .bind(id)
        .fetch_all(tx.db())
        .await?;
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
        sqlx::query(
            "INSERT INTO verifier_switches (session_id, verifier, question_index, standing, upheld,
             overruled, missed, cleared, kappa, min_kappa, min_labels, decision_id, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(id)
        .bind(&row.verifier)
        .bind(index as i32)
        .bind(judged.standing.as_str())
        .bind(c.upheld as i64)
        .bind(c.overruled as i64)
        .bind(c.missed as i64)
        .bind(c.cleared as i64)
        .bind(judged.kappa)
        .bind(floor.min_kappa)
        .bind(floor.min_labels as i32)
        .bind(decision_id)
        .bind(tx.now)
        .execute(tx.db())
        .await?;
    }
    Ok(())
}
