//! Claims on background work (see migration 0005): a claim is taken when
//! there is none or the last one expired, in one upsert, so of two replicas
//! claiming at once one gets it and the other is told no. Claims are short:
//! their holder renews its own claim (named by its id) while the job runs
//! and deletes it when done, so a replica that dies holds its jobs for
//! moments only.

use uuid::Uuid;

use super::tx::Tx;
use crate::store::{Job, JobClaim, StoreError};

fn key(job: Job) -> String {
    match job {
        Job::Gate(id) => format!("gate:{id}"),
        Job::Verify(id) => format!("verify:{id}"),
        Job::Recheck(run, quest) => format!("recheck:{run}:{quest}"),
    }
}

pub async fn claim(
    tx: &mut Tx,
    holder: Uuid,
    job: Job,
    seconds: u32,
) -> Result<Option<JobClaim>, StoreError> {
    let claim = JobClaim::new(job);
    let claimed = sqlx::query(
        "INSERT INTO job_claims (job, holder, claim_id, claimed_at, expires_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (job) DO UPDATE SET holder = excluded.holder, claim_id = excluded.claim_id,
           claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
         WHERE job_claims.expires_at <= excluded.claimed_at
         RETURNING job",
    )
    .bind(key(job))
    .bind(holder)
    .bind(claim.id())
    .bind(tx.now)
    .bind(until(tx, seconds))
    .fetch_optional(tx.db())
    .await?;
    Ok(claimed.map(|_| claim))
}

/// Extends a claim that still lives; a lapsed one stays lapsed, even when
/// nobody has taken it over yet, since another replica may be about to.
pub async fn renew(tx: &mut Tx, claim: JobClaim, seconds: u32) -> Result<bool, StoreError> {
    let renewed = sqlx::query(
        "UPDATE job_claims SET expires_at = $3
         WHERE job = $1 AND claim_id = $2 AND expires_at > $4
         RETURNING job",
    )
    .bind(key(claim.job))
    .bind(claim.id())
    .bind(until(tx, seconds))
    .bind(tx.now)
    .fetch_optional(tx.db())
    .await?;
    Ok(renewed.is_some())
}

/// Deletes a claim, if it is still this one.
pub async fn release(tx: &mut Tx, claim: JobClaim) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM job_claims WHERE job = $1 AND claim_id = $2")
        .bind(key(claim.job))
        .bind(claim.id())
        .execute(tx.db())
        .await?;
    Ok(())
}

fn until(tx: &Tx, seconds: u32) -> chrono::DateTime<chrono::Utc> {
    tx.now + chrono::Duration::seconds(i64::from(seconds.max(1)))
}

pub async fn orphaned(tx: &mut Tx, grace_seconds: u32) -> Result<Vec<Job>, StoreError> {
    let before = tx.now - chrono::Duration::seconds(i64::from(grace_seconds));
    let gates: Vec<Uuid> = sqlx::query_scalar(
        "SELECT s.id FROM submissions s LEFT JOIN job_claims c ON c.job = 'gate:' || s.id
         WHERE s.verdict = 'PENDING' AND s.created_at <= $1 AND (c.job IS NULL OR c.expires_at <= $2)
         ORDER BY s.created_at LIMIT 1000",
    )
    .bind(before)
    .bind(tx.now)
    .fetch_all(tx.db())
    .await?;
    let verifies: Vec<Uuid> = sqlx::query_scalar(
        "SELECT j.id FROM l2_jobs j LEFT JOIN job_claims c ON c.job = 'verify:' || j.id
         WHERE j.status = 'queued' AND j.created_at <= $1 AND (c.job IS NULL OR c.expires_at <= $2)
         ORDER BY j.created_at LIMIT 1000",
    )
    .bind(before)
    .bind(tx.now)
    .fetch_all(tx.db())
    .await?;
    Ok(gates
        .into_iter()
        .map(|id| Job::Gate(id.into()))
        .chain(verifies.into_iter().map(|id| Job::Verify(id.into())))
        .collect())
}
