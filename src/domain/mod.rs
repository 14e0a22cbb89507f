//! The pure core: quest states and their one transition function, verdicts,
//! facts, roles, events, receipts, prompts, the rules of the AI verifiers (L2),
//! the fair share of the gate workers,
//! the parsing of uploaded tables and the bounds of the text the server keeps.
//!
//! Nothing here performs I/O or knows about HTTP, SQL or gates' outside world.

use crate::domain::ids::{QuestId, SessionId, SubmissionId};
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Implements `as_str`, `Display` and `FromStr` for a closed enum stored as
/// text. Defined before the submodules, which use it too.
macro_rules! text_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// The stable text form used on the wire and in the database.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl ::std::str::FromStr for $ty {
            type Err = $crate::domain::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok(Self::$variant),)+
                    _ => Err($crate::domain::UnknownValue { kind: stringify!($ty), value: s.to_owned() }),
                }
            }
        }
    };
}

pub mod agreement;
pub mod backlog;
pub mod fair;
pub mod gold;
pub mod ids;
pub mod pause;
pub mod prompt;
pub mod quality;
pub mod receipt;
pub mod recheck;
pub mod replay;
pub mod review;
pub mod session;
pub mod table;
pub mod text;
pub mod verify;
pub mod work;

/// A text that names no variant of a closed enum.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownValue {
    kind: &'static str,
    value: String,
}

/// The public state of a quest. `Pass`, `Review` and `Done` are terminal for agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum State {
    Todo,
    Pass,
    Review,
    Done,
}
text_enum!(State { Todo => "TODO", Pass => "PASS", Review => "REVIEW", Done => "DONE" });

impl State {
    /// Whether agents can no longer change this quest.
    pub fn is_terminal(self) -> bool {
        self != State::Todo
    }
}

/// Where a `TODO` quest is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Open,
    Leased,
    Checking,
    Verifying,
}
text_enum!(Phase { Open => "open", Leased => "leased", Checking => "checking", Verifying => "verifying" });

/// A gate's answer for one submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    Review,
}
text_enum!(Verdict { Pass => "PASS", Fail => "FAIL", Review => "REVIEW" });

impl Verdict {
    /// Folds the verdicts of several checks: FAIL beats REVIEW beats PASS.
    pub fn combine(self, other: Verdict) -> Verdict {
        use Verdict::*;
        match (self, other) {
            (Fail, _) | (_, Fail) => Fail,
            (Review, _) | (_, Review) => Review,
            (Pass, Pass) => Pass,
        }
    }
}

/// A submission's verdict as stored: a gate verdict, or `Pending` while the gate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum SubmissionVerdict {
    Pending,
    Pass,
    Fail,
    Review,
}
text_enum!(SubmissionVerdict { Pending => "PENDING", Pass => "PASS", Fail => "FAIL", Review => "REVIEW" });

impl From<Verdict> for SubmissionVerdict {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Pass => Self::Pass,
            Verdict::Fail => Self::Fail,
            Verdict::Review => Self::Review,
        }
    }
}

/// A token's role. Every role reads; agents work quests; reviewers decide REVIEW quests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Agent,
    Reviewer,
    Viewer,
}
text_enum!(Role { Admin => "admin", Agent => "agent", Reviewer => "reviewer", Viewer => "viewer" });

/// What a request needs to be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Read,
    Work,
    Review,
    Administer,
}

impl Role {
    /// Whether this role grants `permission`.
    pub fn allows(self, permission: Permission) -> bool {
        match permission {
            Permission::Read => true,
            Permission::Work => matches!(self, Role::Agent | Role::Admin),
            Permission::Review => matches!(self, Role::Reviewer | Role::Admin),
            Permission::Administer => self == Role::Admin,
        }
    }
}

/// A reviewer's decision on a quest in REVIEW.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Reject,
}
text_enum!(Decision { Approve => "approve", Reject => "reject" });

/// One machine-checked finding: where a check looked, what it expected and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Fact {
    /// The check that produced the fact, e.g. `schema`, `deny`, `lease`.
    pub check: String,
    /// A JSON pointer or field name into the result.
    pub field: String,
    pub expected: String,
    pub actual: String,
    /// A concrete next step for the agent.
    pub hint: String,
    /// The world gave the check no answer (a timeout, no connection, a 5xx,
    /// no DNS answer, a gate or program that gave no verdict): the fact
    /// doubts nothing about the result, it only says it could not be
    /// confirmed now. An approval never excuses it in a later re-check.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unanswered: bool,
}

impl Fact {
    /// Builds a fact from its five parts.
    pub fn new(
        check: impl Into<String>,
        field: impl Into<String>,
        expected: impl Into<String>,
        actual: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Fact {
            check: check.into(),
            field: field.into(),
            expected: expected.into(),
            actual: actual.into(),
            hint: hint.into(),
            unanswered: false,
        }
    }

    /// The same fact, about a check the world left unanswered.
    pub fn no_answer(self) -> Self {
        Fact {
            unanswered: true,
            ..self
        }
    }
}

/// The state of a quest as far as transitions are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestStatus {
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub lapses: u32,
}

/// Everything that can happen to a quest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// An agent leases the open quest.
    Lease,
    /// The holder gives the lease back.
    Release,
    /// The lease ran out; after `max_lapses` the quest ends in DONE.
    Lapse { max_lapses: u32 },
    /// The holder submits a result; the gate starts.
    Submit,
    /// The gate decided. `verify` is true when AI verifiers must still look at a PASS.
    Decide {
        verdict: Verdict,
        max_tries: u32,
        verify: bool,
    },
    /// The AI verifiers finished: `flagged` sends the quest to REVIEW.
    Verified { flagged: bool },
    /// A reviewer decided a quest in REVIEW.
    Reviewed(Decision),
}

/// A move the state machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {transition:?} a quest in {state}{}", phase.map(|p| format!("/{p}")).unwrap_or_default())]
pub struct TransitionError {
    pub state: State,
    pub phase: Option<Phase>,
    pub transition: Transition,
}

impl QuestStatus {
    /// A fresh quest: TODO, open, no tries, no lapses.
    pub fn new() -> Self {
        QuestStatus {
            state: State::Todo,
            phase: Some(Phase::Open),
            tries: 0,
            lapses: 0,
        }
    }

    /// The one place where a quest's state changes. Every store applies the
    /// status this returns, and the database's triggers repeat its rules.
    pub fn apply(self, transition: Transition) -> Result<QuestStatus, TransitionError> {
        use Phase::*;
        use State::*;
        let todo = |phase| QuestStatus {
            state: Todo,
            phase: Some(phase),
            ..self
        };
        let end = |state| QuestStatus {
            state,
            phase: None,
            ..self
        };
        let next = match (self.state, self.phase, transition) {
            (Todo, Some(Open), Transition::Lease) => todo(Leased),
            (Todo, Some(Leased), Transition::Release) => todo(Open),
            (Todo, Some(Leased), Transition::Lapse { max_lapses }) => {
                let lapses = self.lapses + 1;
                if lapses >= max_lapses {
                    QuestStatus {
                        lapses,
                        ..end(Done)
                    }
                } else {
                    QuestStatus {
                        lapses,
                        ..todo(Open)
                    }
                }
            }
            (Todo, Some(Leased), Transition::Submit) => todo(Checking),
            (
                Todo,
                Some(Checking),
                Transition::Decide {
                    verdict,
                    max_tries,
                    verify,
                },
            ) => match verdict {
                Verdict::Pass if verify => todo(Verifying),
                Verdict::Pass => end(Pass),
                Verdict::Review => end(Review),
                Verdict::Fail => {
                    let tries = self.tries + 1;
                    if tries >= max_tries {
                        QuestStatus { tries, ..end(Done) }
                    } else {
                        QuestStatus {
                            tries,
                            ..todo(Leased)
                        }
                    }
                }
            },
            (Todo, Some(Verifying), Transition::Verified { flagged }) => {
                end(if flagged { Review } else { Pass })
            }
            (Review, None, Transition::Reviewed(Decision::Approve)) => end(Pass),
            (Review, None, Transition::Reviewed(Decision::Reject)) => end(Done),
            (state, phase, transition) => {
                return Err(TransitionError {
                    state,
                    phase,
                    transition,
                });
            }
        };
        Ok(next)
    }
}

impl Default for QuestStatus {
    fn default() -> Self {
        Self::new()
    }
}

/// Who decided a terminal quest, as shown in exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    Gate,
    /// The one reviewer a quest needed.
    Reviewer(String),
    /// Several reviewers who agreed, in the order they looked.
    Reviewers(Vec<String>),
    /// The adjudicator of reviewers who disagreed.
    Adjudicator(String),
    Limit,
}

impl DecidedBy {
    /// Whether a stored `decided_by` names people: one reviewer, several
    /// who agreed, or an adjudicator.
    pub fn names_people(stored: &str) -> bool {
        ["reviewer:", "reviewers:", "adjudicator:"]
            .iter()
            .any(|prefix| stored.starts_with(prefix))
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecidedBy::Gate => f.write_str("gate"),
            DecidedBy::Reviewer(name) => write!(f, "reviewer:{name}"),
            DecidedBy::Reviewers(names) => write!(f, "reviewers:{}", names.join(",")),
            DecidedBy::Adjudicator(name) => write!(f, "adjudicator:{name}"),
            DecidedBy::Limit => f.write_str("limit"),
        }
    }
}

/// What kind of change an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    SessionCreated,
    Leased,
    Released,
    Lapsed,
    Submitted,
    Decided,
    /// The AI verifiers finished: the quest left `verifying` for PASS or REVIEW.
    Verified,
    Reviewed,
    /// A PASS quest was re-checked: its mark may have changed, never its state.
    Rechecked,
    /// A canary (a gold quest no honest result can pass) ended PASS: its
    /// token is paused in every session.
    CanaryPassed,
    /// A PASS quest was marked suspect by the gold floor (it stays PASS).
    MarkedSuspect,
    /// An audit found a PASS quest wrong (it stays PASS, marked `audit_rejected`).
    AuditRejected,
}

/// One state change, published after it is durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QuestEvent {
    pub kind: EventKind,
    pub session_id: SessionId,
    pub quest_id: Option<QuestId>,
    pub submission_id: Option<SubmissionId>,
    pub state: Option<State>,
    pub phase: Option<Phase>,
    pub verdict: Option<Verdict>,
    /// A re-check's mark on the quest (`rechecked` events only; none: confirmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<recheck::Mark>,
    pub at: DateTime<Utc>,
}

/// Hex SHA-256 of a bearer secret: tokens are stored and looked up by it, never in clear.
pub fn token_hash(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The source of "now". Real servers read the system clock; tests fix it.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(state: State, phase: Option<Phase>, tries: u32, lapses: u32) -> QuestStatus {
        QuestStatus {
            state,
            phase,
            tries,
            lapses,
        }
    }

    #[test]
    fn a_fresh_quest_is_leased_submitted_and_passed() {
        let s = QuestStatus::new().apply(Transition::Lease).unwrap();
        let s = s.apply(Transition::Submit).unwrap();
        let s = s
            .apply(Transition::Decide {
                verdict: Verdict::Pass,
                max_tries: 3,
                verify: false,
            })
            .unwrap();
        assert_eq!(s, at(State::Pass, None, 0, 0));
    }

    #[test]
    fn a_fail_keeps_the_lease_until_the_last_try_ends_in_done() {
        let fail = Transition::Decide {
            verdict: Verdict::Fail,
            max_tries: 3,
            verify: false,
        };
        let mut s = QuestStatus::new().apply(Transition::Lease).unwrap();
        for tries in 1..=2 {
            s = s.apply(Transition::Submit).unwrap().apply(fail).unwrap();
            assert_eq!(s, at(State::Todo, Some(Phase::Leased), tries, 0));
        }
        s = s.apply(Transition::Submit).unwrap().apply(fail).unwrap();
        assert_eq!(
            s,
            at(State::Done, None, 3, 0),
            "the third FAIL ends the quest (>=, not >)"
        );
    }

    #[test]
    fn review_and_verification_paths_end_where_the_spec_says() {
        let checking = at(State::Todo, Some(Phase::Checking), 1, 0);
        let review = Transition::Decide {
            verdict: Verdict::Review,
            max_tries: 3,
            verify: false,
        };
        assert_eq!(
            checking.apply(review).unwrap(),
            at(State::Review, None, 1, 0)
        );
        let pass_verify = Transition::Decide {
            verdict: Verdict::Pass,
            max_tries: 3,
            verify: true,
        };
        let verifying = checking.apply(pass_verify).unwrap();
        assert_eq!(verifying.phase, Some(Phase::Verifying));
        assert_eq!(
            verifying
                .apply(Transition::Verified { flagged: true })
                .unwrap()
                .state,
            State::Review
        );
        assert_eq!(
            verifying
                .apply(Transition::Verified { flagged: false })
                .unwrap()
                .state,
            State::Pass
        );
        let in_review = at(State::Review, None, 1, 0);
        assert_eq!(
            in_review
                .apply(Transition::Reviewed(Decision::Approve))
                .unwrap()
                .state,
            State::Pass
        );
        assert_eq!(
            in_review
                .apply(Transition::Reviewed(Decision::Reject))
                .unwrap()
                .state,
            State::Done
        );
    }

    #[test]
    fn lapses_return_the_quest_until_the_cap_ends_it() {
        let leased = at(State::Todo, Some(Phase::Leased), 0, 1);
        assert_eq!(
            leased.apply(Transition::Lapse { max_lapses: 3 }).unwrap(),
            at(State::Todo, Some(Phase::Open), 0, 2)
        );
        let last = at(State::Todo, Some(Phase::Leased), 0, 2);
        assert_eq!(
            last.apply(Transition::Lapse { max_lapses: 3 }).unwrap(),
            at(State::Done, None, 0, 3)
        );
    }

    #[test]
    fn nothing_leaves_a_terminal_state_except_a_review_decision() {
        let every = [
            Transition::Lease,
            Transition::Release,
            Transition::Lapse { max_lapses: 3 },
            Transition::Submit,
            Transition::Decide {
                verdict: Verdict::Fail,
                max_tries: 3,
                verify: false,
            },
            Transition::Verified { flagged: false },
            Transition::Reviewed(Decision::Approve),
        ];
        for state in [State::Pass, State::Done] {
            for t in every {
                assert!(
                    at(state, None, 1, 0).apply(t).is_err(),
                    "{state} must refuse {t:?}"
                );
            }
        }
        for t in &every[..6] {
            assert!(
                at(State::Review, None, 1, 0).apply(*t).is_err(),
                "REVIEW must refuse {t:?}"
            );
        }
    }

    #[test]
    fn roles_grant_what_the_spec_says() {
        use Permission::*;
        assert!(Role::Viewer.allows(Read) && !Role::Viewer.allows(Work));
        assert!(Role::Agent.allows(Work) && !Role::Agent.allows(Review));
        assert!(Role::Reviewer.allows(Review) && !Role::Reviewer.allows(Work));
        assert!(
            [Read, Work, Review, Administer]
                .iter()
                .all(|p| Role::Admin.allows(*p))
        );
        assert!(!Role::Reviewer.allows(Administer));
    }

    #[test]
    fn verdicts_combine_fail_over_review_over_pass() {
        use Verdict::*;
        assert_eq!(Pass.combine(Review), Review);
        assert_eq!(Review.combine(Fail), Fail);
        assert_eq!(Pass.combine(Pass), Pass);
    }

    #[test]
    fn text_forms_round_trip() {
        for s in [State::Todo, State::Pass, State::Review, State::Done] {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
        }
        assert!("done".parse::<State>().is_err());
        assert_eq!(
            DecidedBy::Reviewer("ana".into()).to_string(),
            "reviewer:ana"
        );
    }
}
