//! The rules of `work`, one test per rule.

use super::*;

fn status(state: State, phase: Option<Phase>, tries: u32) -> QuestStatus {
    QuestStatus {
        state,
        phase,
        tries,
        lapses: 0,
    }
}

fn lease(token: TokenId, expires_in: i64, ended: Option<LeaseEnd>) -> (LeaseFacts, DateTime<Utc>) {
    let now = Utc::now();
    let facts = LeaseFacts {
        id: LeaseId::new(),
        quest_id: QuestId::new(),
        agent: AgentId::new(token, "bot"),
        granted_at: now,
        expires_at: now + chrono::Duration::seconds(expires_in),
        ended,
    };
    (facts, now)
}

#[test]
fn only_the_holders_token_passes_the_hold_check_and_each_refusal_has_its_code() {
    let token = TokenId::new();
    let (l, now) = lease(token, 60, None);
    let leased = status(State::Todo, Some(Phase::Leased), 0);
    assert_eq!(
        check_hold(leased, Some(l.id), Some(&l), l.id, token, now),
        Ok(())
    );
    let code = |r: Result<(), Refusal>| r.unwrap_err().code();
    assert_eq!(
        code(check_hold(
            leased,
            Some(l.id),
            Some(&l),
            l.id,
            TokenId::new(),
            now
        )),
        "lease_lost"
    );
    assert_eq!(
        code(check_hold(
            leased,
            Some(LeaseId::new()),
            Some(&l),
            l.id,
            token,
            now
        )),
        "lease_lost"
    );
    assert_eq!(
        code(check_hold(leased, Some(l.id), None, l.id, token, now)),
        "lease_lost"
    );
    let pass = status(State::Pass, None, 0);
    assert_eq!(
        code(check_hold(pass, None, Some(&l), l.id, token, now)),
        "quest_locked"
    );
    let verifying = status(State::Todo, Some(Phase::Verifying), 0);
    assert_eq!(
        code(check_hold(verifying, None, Some(&l), l.id, token, now)),
        "quest_verifying"
    );
    let (expired, now) = lease(token, -1, None);
    assert_eq!(
        code(check_hold(
            leased,
            Some(expired.id),
            Some(&expired),
            expired.id,
            token,
            now
        )),
        "lease_expired"
    );
    let checking = status(State::Todo, Some(Phase::Checking), 0);
    assert_eq!(
        check_hold(
            checking,
            Some(expired.id),
            Some(&expired),
            expired.id,
            token,
            now
        ),
        Ok(()),
        "a lease under a running check does not expire"
    );
    let (swept, now) = lease(token, 60, Some(LeaseEnd::Expired));
    assert_eq!(
        code(check_hold(leased, None, Some(&swept), swept.id, token, now)),
        "lease_expired"
    );
}

#[test]
fn a_fail_keeps_the_lease_and_spots_a_repeat_while_a_pass_ends_it() {
    let facts = vec![Fact::new(
        "schema",
        "/email",
        "a string",
        "a number",
        "send a string",
    )];
    let limits = Limits {
        max_tries: 3,
        verify: false,
    };
    let before = Before {
        status: status(State::Todo, Some(Phase::Leased), 1),
        last_facts: &facts,
        decided_before: true,
    };
    let fail = on_verdict(before, Verdict::Fail, &facts, limits).unwrap();
    assert_eq!(fail.status, status(State::Todo, Some(Phase::Leased), 2));
    assert_eq!(fail.lease, LeaseAfter::Renewed);
    assert!(fail.repeated_failure && !fail.keeps_result);
    let pass = on_verdict(before, Verdict::Pass, &[], limits).unwrap();
    assert_eq!(pass.status.state, State::Pass);
    assert_eq!(pass.lease, LeaseAfter::Ended(LeaseEnd::Decided));
    assert!(pass.keeps_result && pass.keeps_receipt && !pass.repeated_failure);
    assert_eq!(pass.decided_by, Some(DecidedBy::Gate));
    let first = Before {
        decided_before: false,
        ..before
    };
    assert!(
        !on_verdict(first, Verdict::Fail, &facts, limits)
            .unwrap()
            .repeated_failure
    );
}

#[test]
fn a_pass_in_a_verified_session_goes_to_the_verifiers_and_the_last_fail_ends_in_done() {
    let verify = Limits {
        max_tries: 3,
        verify: true,
    };
    let checking = Before {
        status: status(State::Todo, Some(Phase::Checking), 2),
        last_facts: &[],
        decided_before: true,
    };
    let pass = on_verdict(checking, Verdict::Pass, &[], verify).unwrap();
    assert_eq!(pass.status.phase, Some(Phase::Verifying));
    assert!(pass.asks_verifiers && pass.keeps_result && !pass.keeps_receipt);
    assert_eq!(pass.decided_by, None);
    let done = on_verdict(checking, Verdict::Fail, &[], verify).unwrap();
    assert_eq!(done.status, status(State::Done, None, 3));
    assert_eq!(done.decided_by, Some(DecidedBy::Limit));
    assert!(!done.asks_verifiers);
    let review = on_verdict(checking, Verdict::Review, &[], verify).unwrap();
    assert_eq!(review.status.state, State::Review);
    assert!(review.keeps_result && !review.asks_verifiers);
}

#[test]
fn a_verdict_on_a_quest_under_check_is_refused_when_it_comes_inline() {
    let before = Before {
        status: status(State::Todo, Some(Phase::Checking), 0),
        last_facts: &[],
        decided_before: false,
    };
    let limits = Limits {
        max_tries: 3,
        verify: false,
    };
    assert!(
        on_verdict(before, Verdict::Pass, &[], limits).is_ok(),
        "the runner's verdict"
    );
    let open = Before {
        status: status(State::Todo, Some(Phase::Open), 0),
        ..before
    };
    assert_eq!(
        on_verdict(open, Verdict::Pass, &[], limits)
            .unwrap_err()
            .code(),
        "illegal_transition"
    );
}

#[test]
fn the_last_lapse_ends_the_quest_with_a_fact_saying_so() {
    let leased = QuestStatus {
        lapses: 2,
        ..status(State::Todo, Some(Phase::Leased), 0)
    };
    let last = on_lapse(leased, 3).unwrap();
    assert_eq!(last.status.state, State::Done);
    let (by, fact) = last.decided.unwrap();
    assert_eq!(by, DecidedBy::Limit);
    assert_eq!(
        (fact.check.as_str(), fact.actual.as_str()),
        ("lapses", "the lease expired 3 times")
    );
    let early = on_lapse(
        QuestStatus {
            lapses: 0,
            ..leased
        },
        3,
    )
    .unwrap();
    assert_eq!(early.status.phase, Some(Phase::Open));
    assert!(early.decided.is_none());
}

#[test]
fn reviews_need_the_review_state_and_respect_a_live_claim() {
    let now = Utc::now();
    let later = now + chrono::Duration::seconds(60);
    let ana = ReviewerId::new(TokenId::new(), "ana");
    let bo = ReviewerId::new(TokenId::new(), "bo");
    assert_eq!(
        check_reviewable(State::Review, None, None, &ana, now),
        Ok(())
    );
    assert_eq!(
        check_reviewable(State::Review, Some(&ana), Some(later), &ana, now),
        Ok(())
    );
    let refused = check_reviewable(State::Review, Some(&bo), Some(later), &ana, now).unwrap_err();
    assert_eq!(refused.code(), "review_claimed");
    assert!(
        refused.to_string().starts_with("bo is reviewing"),
        "{refused}"
    );
    assert_eq!(
        check_reviewable(State::Review, Some(&bo), Some(now), &ana, now),
        Ok(()),
        "an expired claim"
    );
    assert_eq!(
        check_reviewable(State::Pass, None, None, &ana, now)
            .unwrap_err()
            .code(),
        "not_in_review"
    );
    let (next, receipt) = on_review(status(State::Review, None, 1), Decision::Reject).unwrap();
    assert_eq!((next.state, receipt), (State::Done, false));
}

#[test]
fn an_agent_id_round_trips_through_its_text_and_wait_times_are_bounded() {
    let agent = AgentId::new(TokenId::new(), "bot/1");
    assert_eq!(agent.to_string().parse::<AgentId>().unwrap(), agent);
    assert!("no-slash".parse::<AgentId>().is_err());
    let now = Utc::now();
    assert_eq!(wait_seconds(None, now), 5);
    assert_eq!(
        wait_seconds(Some(now + chrono::Duration::seconds(500)), now),
        30
    );
    assert_eq!(
        wait_seconds(Some(now - chrono::Duration::seconds(5)), now),
        1
    );
    assert_eq!(
        on_verified(status(State::Todo, Some(Phase::Verifying), 0), false)
            .unwrap()
            .1,
        Some(DecidedBy::Gate)
    );
}

#[test]
fn a_claim_belongs_to_its_token_not_to_the_name_it_bore() {
    let now = Utc::now();
    let later = now + chrono::Duration::seconds(60);
    let revoked_ana = ReviewerId::new(TokenId::new(), "ana");
    let new_ana = ReviewerId::new(TokenId::new(), "ana");
    let refused = check_reviewable(
        State::Review,
        Some(&revoked_ana),
        Some(later),
        &new_ana,
        now,
    )
    .unwrap_err();
    assert_eq!(
        refused.code(),
        "review_claimed",
        "the same name under another token is another reviewer"
    );
    assert!(
        refused.to_string().contains("another token named ana"),
        "{refused}"
    );
    let renamed = ReviewerId::new(revoked_ana.token, "ana-renamed");
    assert_eq!(
        check_reviewable(
            State::Review,
            Some(&revoked_ana),
            Some(later),
            &renamed,
            now
        ),
        Ok(())
    );
}

#[test]
fn a_token_at_its_lease_cap_is_refused_with_the_cap_named() {
    assert_eq!(check_lease_cap(0, Some(1)), Ok(()));
    assert_eq!(check_lease_cap(63, Some(64)), Ok(()));
    let refused = check_lease_cap(64, Some(64)).unwrap_err();
    assert_eq!(refused, Refusal::LeaseCap { cap: 64 });
    assert_eq!(refused.code(), "lease_cap");
    let message = refused.to_string();
    assert!(message.contains("64") && message.contains("release") && message.contains("admin"));
    assert_eq!(
        check_lease_cap(100, Some(64)).unwrap_err(),
        Refusal::LeaseCap { cap: 64 }
    );
    assert_eq!(
        check_lease_cap(u32::MAX, None),
        Ok(()),
        "no cap, no refusal"
    );
}

#[test]
fn agents_get_the_default_cap_admins_none_and_a_cap_for_others_is_refused() {
    assert_eq!(
        lease_cap_for(Role::Agent, None),
        Ok(Some(DEFAULT_MAX_LEASES))
    );
    assert_eq!(lease_cap_for(Role::Agent, Some(3)), Ok(Some(3)));
    assert_eq!(lease_cap_for(Role::Admin, None), Ok(None));
    assert_eq!(lease_cap_for(Role::Admin, Some(5)), Ok(Some(5)));
    assert_eq!(lease_cap_for(Role::Viewer, None), Ok(None));
    assert!(lease_cap_for(Role::Reviewer, Some(2)).is_err());
    assert!(lease_cap_for(Role::Agent, Some(0)).is_err());
    assert!(lease_cap_for(Role::Agent, Some(MAX_MAX_LEASES + 1)).is_err());
}

#[test]
fn a_renewal_extends_by_the_lease_time_but_never_past_the_most_a_lease_may_be_held() {
    let granted = Utc::now();
    let at = |s: i64| granted + chrono::Duration::seconds(s);
    assert_eq!(renewed_until(granted, at(5), 10, 100), at(15));
    assert_eq!(
        renewed_until(granted, at(95), 10, 100),
        at(100),
        "capped at max_hold_seconds from the grant"
    );
    assert_eq!(
        renewed_until(granted, at(120), 10, 100),
        at(100),
        "a renewal after the cap leaves the lease expired"
    );
}

#[test]
fn a_fail_that_repeats_the_last_facts_with_only_the_unchanged_fact_added_is_a_doom_loop() {
    let gate = vec![Fact::new("schema", "/email", "an @", "nope", "add one")];
    let repeated = super::super::replay::verdict_facts(
        gate.clone(),
        true,
        Some(crate::domain::ids::SubmissionId::new()),
    );
    let effects = on_verdict(
        Before {
            status: status(State::Todo, Some(Phase::Checking), 1),
            last_facts: &gate,
            decided_before: true,
        },
        Verdict::Fail,
        &repeated,
        Limits {
            max_tries: 3,
            verify: false,
        },
    )
    .unwrap();
    assert!(effects.repeated_failure);
    assert_eq!(effects.status.tries, 2, "the repeat costs a try");
}
