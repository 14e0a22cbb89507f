//! What a session's random audits found, and the PASS rows they speak for
//! (the figures [`crate::domain::quality::Quality`] is built from).

use super::codec::*;
use crate::domain::Decision;
use crate::domain::ids::SessionId;
use crate::domain::quality::{AUDIT_CHECK, Audits, Stratum};
use crate::store::{QualityCounts, StoreError};

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
         JOIN review_decisions d ON d.quest_id = q.id AND d.decides = TRUE
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
    let mut audits: Vec<Audits> = Vec::new();
    for r in &decided {
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
                COALESCE(SUM(CASE WHEN q.state = 'PASS' AND (q.decided_by LIKE 'reviewer%'
                                  OR q.decided_by LIKE 'adjudicator:%') THEN 1 ELSE 0 END), 0) AS by_person
         FROM quests q WHERE q.session_id = $1"
    ))
    .bind(session)
    .bind(AUDIT_CHECK)
    .fetch_one(pool)
    .await?;
    Ok(QualityCounts {
        audits,
        pending_audits: row.count("pending")?,
        pass: row.count("pass")?,
        pass_by_person: row.count("by_person")?,
    })
}
