//! The AI verifiers' calibration against the review queue: the confusion
//! counts of each verifier and question over its labelled answers (answers on
//! quests a person decided one by one, not in bulk), the switches of a
//! session's verifiers between voting and advisory, and the answers where
//! verifier and reviewer disagreed. The rules are in
//! [`crate::domain::verify::calibration`]; this file only counts and records.

use super::Tx;
use super::codec::*;
use crate::domain::ids::SessionId;
use crate::domain::verify::calibration::{Confusion, Standing};
use crate::store::columns::RowId;
use crate::store::common::Turn;
use crate::store::{Calibration, ConfusionRow, DisagreementRow, StoreError, SwitchRow};

/// A labelled answer: a valid answer joined to a non-bulk decision on its
/// quest made after it (so answers asked after a decision never meet it).
macro_rules! labelled {
    () => {
        " FROM l2_answers a JOIN review_decisions d
           ON d.quest_id = a.quest_id AND d.bulk = FALSE AND d.decides = TRUE
              AND d.created_at >= a.created_at "
    };
}

/// The four confusion counts of the labelled answers of a group.
macro_rules! counts {
    () => {
        " COUNT(*) FILTER (WHERE a.flagged AND d.decision = 'reject') AS upheld,
          COUNT(*) FILTER (WHERE a.flagged AND d.decision = 'approve') AS overruled,
          COUNT(*) FILTER (WHERE NOT a.flagged AND d.decision = 'reject') AS missed,
          COUNT(*) FILTER (WHERE NOT a.flagged AND d.decision = 'approve') AS cleared "
    };
}

const SESSION_CONFUSION: &str = concat!(
    "SELECT a.verifier, a.question_index, MIN(a.question) AS question,",
    counts!(),
    labelled!(),
    "WHERE a.session_id = $1 AND a.answer IS NOT NULL
     GROUP BY a.verifier, a.question_index ORDER BY a.verifier, a.question_index"
);

const SERVER_CONFUSION: &str = concat!(
    "SELECT a.verifier, CAST(NULL AS INTEGER) AS question_index, a.question,",
    counts!(),
    labelled!(),
    "WHERE a.answer IS NOT NULL
     GROUP BY a.verifier, a.question ORDER BY a.verifier, a.question"
);

fn confusion_of(r: &impl Columns) -> Result<Confusion, StoreError> {
    Ok(Confusion {
        upheld: r.count("upheld")?,
        overruled: r.count("overruled")?,
        missed: r.count("missed")?,
        cleared: r.count("cleared")?,
    })
}

fn confusion_row(r: &impl Columns) -> Result<ConfusionRow, StoreError> {
    Ok(ConfusionRow {
        verifier: r.text("verifier")?,
        question_index: r.opt_small("question_index")?,
        question: r.text("question")?,
        confusion: confusion_of(r)?,
    })
}

fn switch_row(r: &impl Columns) -> Result<SwitchRow, StoreError> {
    Ok(SwitchRow {
        session_id: r.id("session_id")?,
        verifier: r.text("verifier")?,
        question_index: r.small("question_index")?,
        standing: r.parsed("standing")?,
        confusion: confusion_of(r)?,
        kappa: r.real("kappa")?,
        min_kappa: r.real("min_kappa")?,
        min_labels: r.small("min_labels")?,
        created_at: r.at("created_at")?,
    })
}

fn disagreement_row(r: &impl Columns) -> Result<DisagreementRow, StoreError> {
    Ok(DisagreementRow {
        quest_id: r.id("quest_id")?,
        session_id: r.id("session_id")?,
        key: r.text("key")?,
        verifier: r.text("verifier")?,
        question_index: r.small("question_index")?,
        answer: r.parsed("answer")?,
        flagged: r.flag("flagged")?,
        decision: r.parsed("decision")?,
        reviewer: r.text("reviewer")?,
        note: r.text("note")?,
        decided_at: r.at("decided_at")?,
    })
}

/// The calibration of one session or of the whole server, read in one snapshot.
pub async fn calibration(
    pool: &Pool,
    scope: Option<SessionId>,
    limit: u32,
) -> Result<Calibration, StoreError> {
    let mut tx = super::reads::snapshot(pool).await?;
    let confusion = match scope {
        Some(id) => {
            sqlx::query(SESSION_CONFUSION)
                .bind(id)
                .fetch_all(&mut *tx)
                .await?
        }
        None => sqlx::query(SERVER_CONFUSION).fetch_all(&mut *tx).await?,
    };
    let confusion = confusion
        .iter()
        .map(confusion_row)
        .collect::<Result<_, _>>()?;
    let switches = sqlx::query(
        "SELECT * FROM verifier_switches WHERE $1 IS NULL OR session_id = $1 ORDER BY seq",
    )
    .bind(scope)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(switch_row)
    .collect::<Result<_, _>>()?;
    let disagreements = sqlx::query(concat!(
        "SELECT a.quest_id, a.session_id, q.key, a.verifier, a.question_index, a.answer, a.flagged,
                d.decision, d.reviewer, d.note, d.created_at AS decided_at",
        labelled!(),
        "JOIN quests q ON q.id = a.quest_id
         WHERE ($1 IS NULL OR a.session_id = $1) AND a.answer IS NOT NULL
           AND ((a.flagged AND d.decision = 'approve') OR (NOT a.flagged AND d.decision = 'reject'))
         ORDER BY d.created_at DESC, d.id DESC, a.verifier, a.question_index LIMIT $2"
    ))
    .bind(scope)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(disagreement_row)
    .collect::<Result<_, _>>()?;
    let agreement = sqlx::query(
        "SELECT verifier_a, verifier_b,
                CAST(SUM(compared) AS BIGINT) AS compared, CAST(SUM(agreed) AS BIGINT) AS agreed
         FROM l2_pair_stats WHERE $1 IS NULL OR session_id = $1
         GROUP BY verifier_a, verifier_b ORDER BY verifier_a, verifier_b",
    )
    .bind(scope)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(pair_stats_row)
    .collect::<Result<_, _>>()?;
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
    session: SessionId,
) -> Result<Vec<((String, usize), Standing)>, StoreError> {
    let rows = tx
        .rows(
            sqlx::query(
                "SELECT verifier, question_index, standing FROM verifier_switches
                 WHERE session_id = $1 ORDER BY seq",
            )
            .bind(session),
        )
        .await?;
    let mut out: Vec<((String, usize), Standing)> = Vec::new();
    for r in rows {
        let key = (r.text("verifier")?, r.small("question_index")? as usize);
        let standing = r.parsed("standing")?;
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = standing,
            None => out.push((key, standing)),
        }
    }
    Ok(out)
}

/// The `(verifier, question index)` pairs that are advisory in a session now.
pub async fn advisory(tx: &mut Tx, session: SessionId) -> Result<Vec<(String, usize)>, StoreError> {
    Ok(standings(tx, session)
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
    session: SessionId,
    decision_id: RowId,
) -> Result<(), StoreError> {
    let config = tx.session(session).await?;
    let Some(floor) = config.config.verify.as_ref().and_then(|v| v.floor()) else {
        return Ok(());
    };
    // One judgement at a time per session, so that two labels recorded at
    // once on two replicas cannot both record the same switch.
    tx.take_turns(Turn::Calibration(session)).await?;
    let now = standings(tx, session).await?;
    let rows = tx
        .rows(sqlx::query(SESSION_CONFUSION).bind(session))
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
        tx.exec(
            sqlx::query(
                "INSERT INTO verifier_switches (session_id, verifier, question_index, standing, upheld,
                 overruled, missed, cleared, kappa, min_kappa, min_labels, decision_id, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(session)
            .bind(row.verifier.clone())
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
            .bind(at(tx.now)),
        )
        .await?;
    }
    Ok(())
}
