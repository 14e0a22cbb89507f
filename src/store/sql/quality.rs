//! What a session's random audits found, and the PASS rows they speak for
//! (the figures [`crate::domain::quality::Quality`] is built from); and the
//! post-hoc audits: label-only reviews of PASS quests drawn uniformly from
//! the session's unaudited machine-decided PASS rows.

use super::Tx;
use super::codec::*;
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::quality::{AUDIT_CHECK, Audits, Stratum};
use crate::domain::work::{Refusal, ReviewerId};
use crate::domain::{Decision, EventKind};
use crate::store::common::pass_event;
use crate::store::{QualityCounts, QuestRow, StoreError};

/// Whether quest `q` was decided by a person (a reviewer, several, or an adjudicator).
macro_rules! by_person {
    () => {
        "(q.decided_by LIKE 'reviewer%' OR q.decided_by LIKE 'adjudicator:%')"
    };
}

/// Draws up to `count` of the session's PASS quests that the machine
/// decided and nobody audited, uniformly, for a post-hoc audit; their ids.
pub async fn draw_audits(
    tx: &mut Tx,
    session: SessionId,
    count: u32,
) -> Result<Vec<QuestId>, StoreError> {
    let rows = tx
        .rows(
            sqlx::query(concat!(
                "INSERT INTO audit_reviews (quest_id, session_id, drawn_at)
                 SELECT q.id, q.session_id, $3 FROM quests q
                 WHERE q.session_id = $1 AND q.state = 'PASS' AND NOT ",
                by_person!(),
                " AND NOT EXISTS (SELECT 1 FROM audit_reviews a WHERE a.quest_id = q.id)
                 ORDER BY random() LIMIT $2
                 ON CONFLICT (quest_id) DO NOTHING
                 RETURNING quest_id"
            ))
            .bind(session)
            .bind(i64::from(count))
            .bind(at(tx.now)),
        )
        .await?;
    rows.iter().map(|r| r.id("quest_id")).collect()
}

/// The label-only audits (post-hoc, or of suspects) waiting for a label in
/// a session, or in every session, oldest first.
pub async fn pending_audits(
    pool: &Pool,
    session: Option<SessionId>,
    limit: u32,
) -> Result<Vec<QuestRow>, StoreError> {
    macro_rules! pending {
        ($session:literal, $limit:literal) => {
            concat!(
                "SELECT q.* FROM audit_reviews a JOIN quests q ON q.id = a.quest_id
                 WHERE a.decision IS NULL",
                $session,
                " ORDER BY a.drawn_at, a.session_id, q.row_index LIMIT ",
                $limit
            )
        };
    }
    let query = match session {
        Some(id) => sqlx::query(pending!(" AND a.session_id = $1", "$2")).bind(id),
        None => sqlx::query(pending!("", "$1")),
    };
    let rows = query.bind(i64::from(limit)).fetch_all(pool).await?;
    rows.iter().map(crate::store::decode::quest_row).collect()
}

/// Labels a label-only audit: once, by a live token; the quest's state
/// stays (a rejection is an `audit_rejected` event).
pub async fn decide_audit(
    tx: &mut Tx,
    quest: QuestId,
    reviewer: ReviewerId,
    decision: Decision,
    note: String,
) -> Result<(), StoreError> {
    super::review::live_token(tx, &reviewer).await?;
    let labelled = tx
        .exec(
            sqlx::query(
                "UPDATE audit_reviews SET decision = $2, reviewer = $3, reviewer_token = $4,
                        note = $5, decided_at = $6
                 WHERE quest_id = $1 AND decision IS NULL",
            )
            .bind(quest)
            .bind(decision.as_str())
            .bind(reviewer.name.clone())
            .bind(reviewer.token)
            .bind(note)
            .bind(at(tx.now)),
        )
        .await?;
    if labelled == 1 {
        if decision == Decision::Reject {
            let row = tx
                .row(
                    sqlx::query("SELECT session_id FROM audit_reviews WHERE quest_id = $1")
                        .bind(quest),
                )
                .await?
                .ok_or(StoreError::NotFound("audit"))?;
            let session = row.id("session_id")?;
            let event = pass_event(EventKind::AuditRejected, session, quest, tx.now);
            tx.publish(event);
        }
        return Ok(());
    }
    let drawn = tx
        .row(sqlx::query("SELECT 1 AS drawn FROM audit_reviews WHERE quest_id = $1").bind(quest))
        .await?;
    Err(match drawn {
        Some(_) => Refusal::AuditLabelled.into(),
        None => StoreError::NotFound("audit"),
    })
}

pub async fn quality_counts(pool: &Pool, session: SessionId) -> Result<QualityCounts, StoreError> {
    // An audited quest carries the audit fact in its gate's verdict (a
    // session without verifiers) or in its verification's decision; only
    // the decision that decided it is its label.
    let decided = sqlx::query(concat!(
        "SELECT d.decision,
                EXISTS (SELECT 1 FROM l2_jobs j WHERE j.submission_id = s.id) AS verified,
                COUNT(*) AS n
         FROM quests q
         JOIN submissions s ON s.id = q.submission_id
         -- A bulk decision is no label: nobody looked at the row.
         JOIN review_decisions d ON d.quest_id = q.id AND d.decides = TRUE
                                 AND (d.bulk IS NULL OR d.bulk = FALSE)
         WHERE q.session_id = $1 AND q.state IN ('PASS', 'DONE')
           AND (EXISTS (SELECT 1 FROM ",
        json_elements!("s.facts"),
        " f WHERE f.value ->> 'check' = $2)
                OR EXISTS (SELECT 1 FROM l2_decisions l, ",
        json_elements!("l.facts"),
        " f WHERE l.submission_id = s.id AND f.value ->> 'check' = $2))
         GROUP BY d.decision, verified"
    ))
    .bind(session)
    .bind(AUDIT_CHECK)
    .fetch_all(pool)
    .await?;
    // Post-hoc audits: a label on a PASS quest, the quest left as it is.
    let labelled = sqlx::query(
        "SELECT a.decision,
                EXISTS (SELECT 1 FROM l2_jobs j WHERE j.submission_id = q.submission_id) AS verified,
                COUNT(*) AS n
         FROM audit_reviews a JOIN quests q ON q.id = a.quest_id
         WHERE a.session_id = $1 AND a.decision IS NOT NULL AND a.cause = 'draw'
         GROUP BY a.decision, verified",
    )
    .bind(session)
    .fetch_all(pool)
    .await?;
    // An approved audit drawn at PASS is a PASS row a person decided.
    let mut approved_at_pass = 0;
    for r in &decided {
        if r.parsed::<Decision>("decision")? == Decision::Approve {
            approved_at_pass += r.count("n")?;
        }
    }
    let mut audits: Vec<Audits> = Vec::new();
    for r in decided.iter().chain(&labelled) {
        let stratum = match r.flag("verified")? {
            true => Stratum::GateAndVerifiers,
            false => Stratum::Gate,
        };
        let at = match audits.iter().position(|a| a.stratum == stratum) {
            Some(i) => i,
            None => {
                audits.push(Audits {
                    stratum,
                    approved: 0,
                    rejected: 0,
                });
                audits.len() - 1
            }
        };
        match r.parsed::<Decision>("decision")? {
            Decision::Approve => audits[at].approved += r.count("n")?,
            Decision::Reject => audits[at].rejected += r.count("n")?,
        }
    }
    audits.sort_by_key(|a| a.stratum != Stratum::Gate);
    let row = sqlx::query(concat!(
        "SELECT COALESCE(SUM(CASE WHEN q.state = 'REVIEW' AND EXISTS (SELECT 1 FROM ",
        json_elements!("q.last_facts"),
        " f WHERE f.value ->> 'check' = $2) THEN 1 ELSE 0 END), 0) AS pending,
                COALESCE(SUM(CASE WHEN q.state = 'PASS' THEN 1 ELSE 0 END), 0) AS pass,
                COALESCE(SUM(CASE WHEN q.state = 'PASS' AND ",
        by_person!(),
        " THEN 1 ELSE 0 END), 0) AS by_person,
                COALESCE(SUM(CASE WHEN q.state = 'PASS' AND NOT ",
        by_person!(),
        " AND NOT EXISTS (SELECT 1 FROM audit_reviews a WHERE a.quest_id = q.id)
                              THEN 1 ELSE 0 END), 0) AS unaudited,
                (SELECT COUNT(*) FROM audit_reviews a
                 WHERE a.session_id = $1 AND a.decision IS NULL AND a.cause = 'draw') AS pending_post_hoc,
                -- Known errors: PASS rows an audit found wrong, and suspect
                -- ones no audit approved.
                COALESCE(SUM(CASE WHEN q.state = 'PASS' AND (
                    EXISTS (SELECT 1 FROM audit_reviews a WHERE a.quest_id = q.id AND a.decision = 'reject')
                    OR (EXISTS (SELECT 1 FROM suspect_marks m WHERE m.quest_id = q.id)
                        AND NOT EXISTS (SELECT 1 FROM audit_reviews a
                                        WHERE a.quest_id = q.id AND a.decision = 'approve')))
                    THEN 1 ELSE 0 END), 0) AS known_errors
         FROM quests q WHERE q.session_id = $1"
    ))
    .bind(session)
    .bind(AUDIT_CHECK)
    .fetch_one(pool)
    .await?;
    Ok(QualityCounts {
        audits,
        pending_audits: row.count("pending")? + row.count("pending_post_hoc")?,
        pass: row.count("pass")?,
        pass_by_person: row.count("by_person")?,
        unaudited: row.count("unaudited")?,
        approved_at_pass,
        known_errors: row.count("known_errors")?,
    })
}
