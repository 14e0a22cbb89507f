use super::*;

fn check(session: SessionId, token: TokenId) -> Owner {
    Owner::Check { session, token }
}

/// Starts jobs until no worker is free or nothing may start; what started.
fn fill<J>(fair: &mut Fair<J>) -> Vec<(Owner, J)> {
    std::iter::from_fn(|| fair.pick()).collect()
}

fn count(started: &[(Owner, u32)], owner: Owner) -> usize {
    started.iter().filter(|(o, _)| *o == owner).count()
}

#[test]
fn the_caps_of_a_pool_and_of_the_smallest_pools() {
    let caps = |workers| {
        let c = Caps::of(workers);
        (c.workers, c.session, c.token, c.rechecks)
    };
    assert_eq!(caps(16), (16, 14, 8, 8));
    assert_eq!(caps(4), (4, 2, 2, 2));
    // `workers - 2` is at least one: each session may always run a check.
    assert_eq!(caps(3), (3, 1, 1, 1));
    assert_eq!(caps(2), (2, 1, 1, 1));
    assert_eq!(caps(1), (1, 1, 1, 1));
    assert_eq!(caps(0), (1, 1, 1, 1), "a pool has at least one worker");
}

#[test]
fn one_token_alone_may_use_every_worker() {
    let mut fair = Fair::new(8);
    let a = check(SessionId::new(), TokenId::new());
    for job in 0..20u32 {
        fair.push(a, job);
    }
    let started = fill(&mut fair);
    assert_eq!(count(&started, a), 8, "nothing else waits: no cap applies");
    assert_eq!(fair.running(), 8);
    assert_eq!(fair.waiting(), 12);
    assert!(fair.pick().is_none(), "every worker is busy");
}

#[test]
fn a_session_holding_every_worker_gets_none_back_before_a_waiting_session_starts() {
    let mut fair = Fair::new(8);
    let a = check(SessionId::new(), TokenId::new());
    for job in 0..72u32 {
        fair.push(a, job);
    }
    assert_eq!(fill(&mut fair).len(), 8);
    let b = check(SessionId::new(), TokenId::new());
    fair.push(b, 1000);
    fair.done(a);
    assert_eq!(
        fair.pick(),
        Some((b, 1000)),
        "64 of A's wait, but B goes first"
    );
    fair.done(a);
    assert_eq!(fair.pick().map(|(o, _)| o), Some(a), "then A again, alone");
}

#[test]
fn while_another_session_waits_a_session_starts_no_check_past_workers_minus_two() {
    let mut fair = Fair::new(8);
    let cap = 8 - 2;
    let session_a = SessionId::new();
    // One token per job: the token cap is not what holds A back.
    let a = |i: u32| {
        check(
            session_a,
            TokenId::from(uuid::Uuid::from_u128(u128::from(i) + 1)),
        )
    };
    for job in 0..100u32 {
        fair.push(a(job), job);
    }
    let mut running: Vec<Owner> = fill(&mut fair).into_iter().map(|(o, _)| o).collect();
    assert_eq!(running.len(), 8, "A was alone");
    let session_b = SessionId::new();
    for job in 0..40u32 {
        fair.push(check(session_b, TokenId::new()), 1000 + job);
    }
    let held_by_a = |running: &[Owner]| {
        running
            .iter()
            .filter(|o| matches!(o, Owner::Check { session, .. } if *session == session_a))
            .count()
    };
    for _ in 0..30 {
        // The oldest running job ends, and a free worker starts the next.
        fair.done(running.remove(0));
        let before = held_by_a(&running);
        let (owner, _) = fair.pick().expect("work waits");
        if matches!(owner, Owner::Check { session, .. } if session == session_a) {
            assert!(before < cap, "A held {before} of 8 while B waited");
        }
        running.push(owner);
    }
    assert!(held_by_a(&running) <= cap);
}

#[test]
fn while_another_token_waits_a_token_starts_no_check_past_half_the_workers() {
    let mut fair = Fair::new(8);
    let cap = 8 / 2;
    let session = SessionId::new();
    let (busy, other) = (
        check(session, TokenId::new()),
        check(session, TokenId::new()),
    );
    for job in 0..50u32 {
        fair.push(busy, job);
    }
    let mut running: Vec<Owner> = fill(&mut fair).into_iter().map(|(o, _)| o).collect();
    for job in 0..50u32 {
        fair.push(other, 1000 + job);
    }
    for _ in 0..30 {
        fair.done(running.remove(0));
        let before = running.iter().filter(|o| **o == busy).count();
        let (owner, _) = fair.pick().expect("work waits");
        if owner == busy {
            assert!(
                before < cap,
                "the busy token held {before} of 8 while another waited"
            );
        }
        running.push(owner);
    }
    assert_eq!(running.iter().filter(|o| **o == busy).count(), cap);
    assert_eq!(running.iter().filter(|o| **o == other).count(), 8 - cap);
}

#[test]
fn sessions_take_turns_and_within_a_session_its_tokens_do() {
    let mut fair = Fair::new(1);
    let (session_a, session_b) = (SessionId::new(), SessionId::new());
    let (a1, a2, b) = (
        check(session_a, TokenId::new()),
        check(session_a, TokenId::new()),
        check(session_b, TokenId::new()),
    );
    for job in 0..3u32 {
        fair.push(a1, job);
    }
    for job in 0..3u32 {
        fair.push(a2, job);
    }
    for job in 0..3u32 {
        fair.push(b, job);
    }
    let order: Vec<Owner> = std::iter::from_fn(|| {
        let (owner, _) = fair.pick()?;
        fair.done(owner);
        Some(owner)
    })
    .collect();
    assert_eq!(order, [a1, b, a2, b, a1, b, a2, a1, a2]);
}

#[test]
fn rechecks_get_at_most_half_the_workers_while_checks_wait_and_every_worker_alone() {
    let mut fair = Fair::new(8);
    let run = Owner::Recheck {
        run: RecheckRunId::new(),
    };
    for job in 0..20u32 {
        fair.push(run, job);
    }
    let started = fill(&mut fair);
    assert_eq!(count(&started, run), 8, "re-checks alone use every worker");
    for job in 0..20u32 {
        fair.push(check(SessionId::new(), TokenId::new()), 1000 + job);
    }
    let mut running: Vec<Owner> = started.into_iter().map(|(o, _)| o).collect();
    for _ in 0..16 {
        fair.done(running.remove(0));
        let before = running.iter().filter(|o| **o == run).count();
        let (owner, _) = fair.pick().expect("work waits");
        if owner == run {
            assert!(
                before < 4,
                "re-checks held {before} of 8 while checks waited"
            );
        }
        running.push(owner);
    }
    assert_eq!(running.iter().filter(|o| **o == run).count(), 4);
}

#[test]
fn checks_and_rechecks_take_turns() {
    let mut fair = Fair::new(4);
    let run = Owner::Recheck {
        run: RecheckRunId::new(),
    };
    for job in 0..4u32 {
        fair.push(run, job);
        fair.push(check(SessionId::new(), TokenId::new()), 100 + job);
    }
    let started = fill(&mut fair);
    assert_eq!(count(&started, run), 2);
    assert_eq!(started.len(), 4);
}

#[test]
fn a_free_worker_is_not_left_idle_when_every_waiting_job_is_past_a_cap() {
    // Three workers: one each for two sessions, and the third to one of them.
    let mut fair = Fair::new(3);
    let (a, b) = (
        check(SessionId::new(), TokenId::new()),
        check(SessionId::new(), TokenId::new()),
    );
    for job in 0..3u32 {
        fair.push(a, job);
        fair.push(b, 100 + job);
    }
    let started = fill(&mut fair);
    assert_eq!(started.len(), 3);
    assert_eq!((count(&started, a), count(&started, b)), (2, 1));
}

#[test]
fn a_job_that_gave_its_worker_back_starts_ahead_of_its_owners_queued_jobs() {
    let mut fair = Fair::new(1);
    let a = check(SessionId::new(), TokenId::new());
    fair.push(a, 1);
    fair.push(a, 2);
    assert_eq!(fair.pick(), Some((a, 1)));
    // Job 1 waits out a store outage without its worker, then asks again.
    fair.done(a);
    fair.push_front(a, 1);
    assert_eq!(fair.pick(), Some((a, 1)));
}

#[test]
fn draining_takes_every_waiting_job_and_leaves_the_running_ones_counted() {
    let mut fair = Fair::new(2);
    let a = check(SessionId::new(), TokenId::new());
    let run = Owner::Recheck {
        run: RecheckRunId::new(),
    };
    for job in 0..3u32 {
        fair.push(a, job);
        fair.push(run, 10 + job);
    }
    fill(&mut fair);
    let mut drained = fair.drain();
    drained.sort_unstable();
    assert_eq!(drained.len(), 4);
    assert_eq!(fair.waiting(), 0);
    assert_eq!(fair.running(), 2);
    assert!(fair.pick().is_none());
}
