//! The store's contract on job claims (gate runs, L2 questions): claimed by
//! one holder at a time, renewed while held, given up when done, and fenced:
//! a holder whose claim lapsed can neither renew it nor release the claim that
//! took it over. The worker side ([`quest::workers::claims::hold`]) stops a
//! job whose claim is lost.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use quest::domain::Verdict;
use quest::domain::ids::TokenId;
use quest::store::postgres::{PgStore, TimeSource};
use quest::store::{Job, Store, SubmitOutcome};
use quest::testing::ManualClock;
use quest::workers::claims::{self, CLAIM_SECONDS, Held};
use tokio::sync::broadcast;

use crate::contract::{backends, decision, lease_all, result, session};
use crate::postgres::TestDatabase;

/// A PENDING submission's gate job, recorded through `store`.
async fn pending_gate_job(store: &dyn Store) -> Job {
    let s = session(store, 1).await;
    let token = TokenId::new();
    let [(quest, lease)] = lease_all(store, s, token, 1).await[..] else {
        panic!("one quest leased")
    };
    let SubmitOutcome::Recorded { view, .. } = store
        .submit(result(quest, lease, token, "a@b.test"), None)
        .await
        .unwrap()
    else {
        panic!("recorded")
    };
    Job::Gate(view.submission.id)
}

#[tokio::test]
async fn a_job_claim_is_renewed_while_held_and_once_released_may_be_claimed_again() {
    let test = "a_job_claim_is_renewed_while_held_and_once_released_may_be_claimed_again";
    for b in backends(test).await {
        let store = b.store.as_ref();
        let job = pending_gate_job(store).await;
        let claim = store.claim_job(job, 60).await.unwrap();
        let claim = claim.unwrap_or_else(|| panic!("{}: the first claim is granted", b.name));
        assert_eq!(claim.job, job);
        assert!(
            store.renew_job(&claim, 60).await.unwrap(),
            "{}: the holder renews its live claim",
            b.name
        );
        store.release_job(&claim).await.unwrap();
        let again = store.claim_job(job, 60).await.unwrap();
        let again = again.unwrap_or_else(|| panic!("{}: a released job is free at once", b.name));
        assert_ne!(again.id(), claim.id(), "{}: each claim is its own", b.name);
    }
}

async fn replica(db: &TestDatabase, clock: &Arc<ManualClock>) -> PgStore {
    PgStore::open(
        &db.url,
        TimeSource::Clock(clock.clone()),
        broadcast::channel(1024).0,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn on_postgres_a_job_claimed_by_one_replica_is_left_alone_by_the_others_until_its_claim_expires()
 {
    let test = "on_postgres_a_job_claimed_by_one_replica_is_left_alone_by_the_others_until_its_claim_expires";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let clock = Arc::new(ManualClock::new());
    let (a, b) = (replica(&db, &clock).await, replica(&db, &clock).await);
    let job = pending_gate_job(&a).await;
    assert_eq!(
        b.orphaned_jobs(0).await.unwrap(),
        [job],
        "nobody holds the PENDING submission yet"
    );
    assert!(
        b.orphaned_jobs(60).await.unwrap().is_empty(),
        "within the grace its own replica is about to claim it"
    );
    assert!(a.claim_job(job, 60).await.unwrap().is_some(), "A claims it");
    assert!(
        b.claim_job(job, 60).await.unwrap().is_none(),
        "B may not while A's claim lives"
    );
    assert!(
        a.claim_job(job, 60).await.unwrap().is_none(),
        "nor A a second time"
    );
    assert!(b.orphaned_jobs(0).await.unwrap().is_empty());
    // A dies; its claim runs out.
    clock.advance(Duration::from_secs(61));
    assert_eq!(b.orphaned_jobs(0).await.unwrap(), [job]);
    let claims = join_all((0..8).map(|_| b.claim_job(job, 60))).await;
    assert_eq!(
        claims
            .into_iter()
            .filter(|c| c.as_ref().unwrap().is_some())
            .count(),
        1,
        "of concurrent claims exactly one gets the job"
    );
}

#[tokio::test]
async fn on_postgres_a_renewed_claim_outlives_its_first_term_and_a_lapsed_one_is_fenced_off() {
    let test = "on_postgres_a_renewed_claim_outlives_its_first_term_and_a_lapsed_one_is_fenced_off";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let clock = Arc::new(ManualClock::new());
    let (a, b) = (replica(&db, &clock).await, replica(&db, &clock).await);
    let job = pending_gate_job(&a).await;
    let first = a.claim_job(job, 15).await.unwrap().expect("A claims it");

    // Renewed every 10 s, A's 15 s claim holds for 30 s and more.
    for _ in 0..3 {
        clock.advance(Duration::from_secs(10));
        assert!(a.renew_job(&first, 15).await.unwrap(), "A renews in time");
        assert!(
            b.claim_job(job, 15).await.unwrap().is_none(),
            "B may not take a renewed claim"
        );
        assert!(b.orphaned_jobs(0).await.unwrap().is_empty());
    }

    // A stops renewing (it hangs, or died): 16 s later its claim is gone,
    // and a late renewal does not bring it back, even before anyone took it.
    clock.advance(Duration::from_secs(16));
    assert!(
        !a.renew_job(&first, 15).await.unwrap(),
        "a lapsed claim is not renewed"
    );
    assert_eq!(b.orphaned_jobs(0).await.unwrap(), [job]);
    let taken = b
        .claim_job(job, 15)
        .await
        .unwrap()
        .expect("B takes it over");
    assert!(
        !a.renew_job(&first, 15).await.unwrap(),
        "nor once B holds it"
    );
    a.release_job(&first).await.unwrap();
    assert!(
        a.claim_job(job, 15).await.unwrap().is_none(),
        "A's release of its lapsed claim leaves B's alone"
    );
    assert!(b.renew_job(&taken, 15).await.unwrap(), "B still holds it");

    // The same replica claiming again gets a claim of its own: the old one
    // (of an earlier runner of A) stays fenced off.
    b.release_job(&taken).await.unwrap();
    let second = a.claim_job(job, 15).await.unwrap().expect("A claims anew");
    assert!(
        !a.renew_job(&first, 15).await.unwrap(),
        "the first claim of A is not the second"
    );
    assert!(a.renew_job(&second, 15).await.unwrap());
}

#[tokio::test]
async fn on_postgres_work_under_a_claim_that_another_replica_took_over_is_dropped() {
    let test = "on_postgres_work_under_a_claim_that_another_replica_took_over_is_dropped";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let clock = Arc::new(ManualClock::new());
    let (a, b) = (replica(&db, &clock).await, replica(&db, &clock).await);
    let job = pending_gate_job(&a).await;
    let claim = a
        .claim_job(job, CLAIM_SECONDS)
        .await
        .unwrap()
        .expect("A claims it");
    // A stalls past its claim (a pause of the process, a partition) and B
    // takes the job over before A's next renewal.
    clock.advance(Duration::from_secs(u64::from(CLAIM_SECONDS) + 1));
    let taken = b
        .claim_job(job, CLAIM_SECONDS)
        .await
        .unwrap()
        .expect("B takes it over");
    let outcome = tokio::time::timeout(
        claims::RENEW_EVERY * 4,
        claims::hold(&a, &claim, std::future::pending::<()>()),
    )
    .await
    .expect("the first renewal stops the work");
    assert_eq!(outcome, Held::Lost);

    // B's claim is untouched by A's attempt, and B's work runs to its end.
    assert!(
        a.claim_job(job, CLAIM_SECONDS).await.unwrap().is_none(),
        "B's claim lives on"
    );
    assert_eq!(
        claims::hold(&b, &taken, async { "decided" }).await,
        Held::Done("decided")
    );
}

#[tokio::test]
async fn on_postgres_a_holder_whose_claim_was_taken_over_records_no_verdict() {
    let test = "on_postgres_a_holder_whose_claim_was_taken_over_records_no_verdict";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let clock = Arc::new(ManualClock::new());
    let (a, b) = (replica(&db, &clock).await, replica(&db, &clock).await);
    let job = pending_gate_job(&a).await;
    let Job::Gate(submission) = job else {
        unreachable!()
    };
    let claim = a
        .claim_job(job, CLAIM_SECONDS)
        .await
        .unwrap()
        .expect("A claims it");
    // A's gate ran longer than the claim, unrenewed, and B took the job over.
    clock.advance(Duration::from_secs(u64::from(CLAIM_SECONDS) + 1));
    let taken = b
        .claim_job(job, CLAIM_SECONDS)
        .await
        .unwrap()
        .expect("B takes it over");

    let late = a.apply_verdict(submission, decision(Verdict::Fail));
    assert!(
        claims::record_if_held(&a, &claim, late)
            .await
            .unwrap()
            .is_none(),
        "A's verdict is not recorded"
    );
    let stored = a.get_submission(submission).await.unwrap();
    assert_eq!(
        stored.verdict,
        quest::domain::SubmissionVerdict::Pending,
        "the submission waits for B"
    );

    let record = b.apply_verdict(submission, decision(Verdict::Pass));
    let decided = claims::record_if_held(&b, &taken, record)
        .await
        .unwrap()
        .expect("B records its verdict");
    assert_eq!(decided.quest.state, quest::domain::State::Pass);
}
