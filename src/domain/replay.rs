//! When a submit is answered by a submission already recorded, and when it is
//! a new try: the one rule both stores execute (issue 18, point 1).
//!
//! A network retry is told apart from an agent repeating itself by the
//! `Idempotency-Key` the client sends, scoped to its token. Without a key, the
//! identical result of the quest's latest submission on the same lease is
//! answered by that submission only while it is PENDING or when it ended the
//! agent's part; after a FAIL it is a new try, so that an agent in a loop
//! uses up its tries and the quest ends in DONE instead of being held forever.

use crate::domain::ids::{LeaseId, QuestId, SubmissionId, TokenId};
use std::fmt;

use super::work::Refusal;
use super::{Fact, State, SubmissionVerdict};

/// The longest `Idempotency-Key` a client may send.
pub const MAX_KEY_LEN: usize = 255;

/// The check name of the fact that says a result repeats a FAIL unchanged.
pub const UNCHANGED: &str = "unchanged";

/// A client's name for one logical submit: 1 to 255 printable ASCII
/// characters (space to `~`), unique per token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header is no idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the Idempotency-Key header must be 1 to {MAX_KEY_LEN} printable ASCII characters (space to `~`), \
     e.g. a UUID; send a fresh one for each new result and the same one only to retry a request"
)]
pub struct BadKey;

impl IdempotencyKey {
    /// Reads a key from the header's bytes.
    pub fn parse(bytes: &[u8]) -> Result<IdempotencyKey, BadKey> {
        let printable = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
        if bytes.is_empty() || bytes.len() > MAX_KEY_LEN || !printable {
            return Err(BadKey);
        }
        // Every byte is ASCII, so this is the same text.
        Ok(IdempotencyKey(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A recorded submission, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded<'a> {
    pub id: SubmissionId,
    pub quest_id: QuestId,
    pub lease_id: LeaseId,
    /// The token of the agent that sent it.
    pub token: TokenId,
    /// The SHA-256 of its canonical result.
    pub result_hash: &'a str,
    pub verdict: SubmissionVerdict,
    /// The quest's state right after its verdict (none while PENDING).
    pub state_after: Option<State>,
}

/// The submit being decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incoming<'a> {
    pub quest_id: QuestId,
    pub lease_id: LeaseId,
    pub token: TokenId,
    pub result_hash: &'a str,
}

/// What a submit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// The answer is this recorded submission as it stands now; nothing is
    /// written and no try is used.
    Answer(SubmissionId),
    /// A new submission, checked by the gate. `repeats` names the FAIL whose
    /// result it repeats unchanged (the gate's facts get [`unchanged_fact`]).
    New { repeats: Option<SubmissionId> },
}

/// Decides a submit. `by_key` is the submission recorded under the caller's
/// token and the request's `Idempotency-Key` (none without a key, or when
/// the key is new); `latest` is the quest's latest submission.
pub fn decide(
    incoming: Incoming<'_>,
    by_key: Option<Recorded<'_>>,
    latest: Option<Recorded<'_>>,
) -> Result<Replay, Refusal> {
    if let Some(keyed) = by_key {
        return if keyed.quest_id == incoming.quest_id && keyed.result_hash == incoming.result_hash {
            Ok(Replay::Answer(keyed.id))
        } else {
            Err(Refusal::IdempotencyKeyReused)
        };
    }
    let Some(latest) = latest.filter(|l| {
        l.quest_id == incoming.quest_id
            && l.lease_id == incoming.lease_id
            && l.token == incoming.token
            && l.result_hash == incoming.result_hash
    }) else {
        return Ok(Replay::New { repeats: None });
    };
    Ok(match (latest.verdict, latest.state_after) {
        // A FAIL that left tries: checking the same result again is a try.
        (SubmissionVerdict::Fail, Some(State::Todo)) => Replay::New {
            repeats: Some(latest.id),
        },
        // Still checked, or the agent's part is over (terminal, or with the
        // AI verifiers): that verdict is the answer.
        _ => Replay::Answer(latest.id),
    })
}

/// The fact a FAIL gets when its result repeats the FAIL `repeats` unchanged.
pub fn unchanged_fact(repeats: SubmissionId) -> Fact {
    Fact::new(
        UNCHANGED,
        "",
        "a result changed according to the facts of the last FAIL",
        format!("the same result as submission {repeats}"),
        format!(
            "this result is identical to submission {repeats}; change it according to the facts"
        ),
    )
}

/// The facts a verdict keeps: the gate's, and first, on a FAIL of a result
/// that repeats an earlier FAIL unchanged, [`unchanged_fact`].
pub fn verdict_facts(
    gate_facts: Vec<Fact>,
    fail: bool,
    repeats: Option<SubmissionId>,
) -> Vec<Fact> {
    match repeats {
        Some(id) if fail => std::iter::once(unchanged_fact(id))
            .chain(gate_facts)
            .collect(),
        _ => gate_facts,
    }
}

/// Whether two verdicts' facts say the same, leaving out the
/// [`unchanged_fact`] (which the first of a repeated pair does not have).
pub fn same_facts(a: &[Fact], b: &[Fact]) -> bool {
    let gate = |f: &&Fact| f.check != UNCHANGED;
    a.iter().filter(gate).eq(b.iter().filter(gate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded<'a>(
        incoming: &Incoming<'a>,
        verdict: SubmissionVerdict,
        state_after: Option<State>,
    ) -> Recorded<'a> {
        Recorded {
            id: SubmissionId::new(),
            quest_id: incoming.quest_id,
            lease_id: incoming.lease_id,
            token: incoming.token,
            result_hash: incoming.result_hash,
            verdict,
            state_after,
        }
    }

    fn incoming() -> Incoming<'static> {
        Incoming {
            quest_id: QuestId::new(),
            lease_id: LeaseId::new(),
            token: TokenId::new(),
            result_hash: "aa",
        }
    }

    #[test]
    fn a_key_of_printable_ascii_up_to_255_characters_is_accepted_and_nothing_else() {
        assert_eq!(
            IdempotencyKey::parse(b"cli 0f3a-~").unwrap().as_str(),
            "cli 0f3a-~"
        );
        assert!(IdempotencyKey::parse(&[b'k'; 255]).is_ok());
        for bad in [
            &b""[..],
            &[b'k'; 256][..],
            b"a\0b",
            b"tab\there",
            b"del\x7f",
            "caf\u{e9}".as_bytes(),
        ] {
            assert_eq!(IdempotencyKey::parse(bad), Err(BadKey), "{bad:?}");
        }
    }

    #[test]
    fn a_known_key_answers_its_submission_even_after_a_fail_and_on_another_lease() {
        let new = incoming();
        let mut keyed = recorded(&new, SubmissionVerdict::Fail, Some(State::Todo));
        keyed.lease_id = LeaseId::new();
        assert_eq!(
            decide(new, Some(keyed), Some(keyed)),
            Ok(Replay::Answer(keyed.id))
        );
    }

    #[test]
    fn a_known_key_with_another_quest_or_result_is_refused() {
        let new = incoming();
        let mut other_result = recorded(&new, SubmissionVerdict::Pass, Some(State::Pass));
        other_result.result_hash = "bb";
        let mut other_quest = recorded(&new, SubmissionVerdict::Pass, Some(State::Pass));
        other_quest.quest_id = QuestId::new();
        for keyed in [other_result, other_quest] {
            assert_eq!(
                decide(new, Some(keyed), None),
                Err(Refusal::IdempotencyKeyReused)
            );
        }
    }

    #[test]
    fn without_a_key_the_same_result_after_a_fail_is_a_new_try_that_names_the_fail() {
        let new = incoming();
        let fail = recorded(&new, SubmissionVerdict::Fail, Some(State::Todo));
        assert_eq!(
            decide(new, None, Some(fail)),
            Ok(Replay::New {
                repeats: Some(fail.id)
            })
        );
    }

    #[test]
    fn without_a_key_the_same_result_of_a_pending_or_final_submission_is_answered_by_it() {
        let new = incoming();
        for (verdict, state) in [
            (SubmissionVerdict::Pending, None),
            (SubmissionVerdict::Fail, Some(State::Done)),
            (SubmissionVerdict::Pass, Some(State::Pass)),
            (SubmissionVerdict::Pass, Some(State::Todo)),
            (SubmissionVerdict::Review, Some(State::Review)),
        ] {
            let latest = recorded(&new, verdict, state);
            assert_eq!(
                decide(new, None, Some(latest)),
                Ok(Replay::Answer(latest.id)),
                "{verdict:?} {state:?}"
            );
        }
    }

    #[test]
    fn another_result_lease_or_token_is_a_plain_new_submission() {
        let new = incoming();
        let base = recorded(&new, SubmissionVerdict::Pending, None);
        let others = [
            Recorded {
                result_hash: "bb",
                ..base
            },
            Recorded {
                lease_id: LeaseId::new(),
                ..base
            },
            Recorded {
                token: TokenId::new(),
                ..base
            },
        ];
        for latest in others {
            assert_eq!(
                decide(new, None, Some(latest)),
                Ok(Replay::New { repeats: None })
            );
        }
        assert_eq!(decide(new, None, None), Ok(Replay::New { repeats: None }));
    }

    #[test]
    fn a_repeated_fail_gets_the_unchanged_fact_first_and_still_counts_as_the_same_facts() {
        let gate = vec![Fact::new("schema", "/email", "an @", "nope", "add one")];
        let id = SubmissionId::new();
        let facts = verdict_facts(gate.clone(), true, Some(id));
        assert_eq!(facts.len(), 2);
        assert_eq!(facts[0].check, UNCHANGED);
        assert!(
            facts[0]
                .hint
                .contains(&format!("identical to submission {id}")),
            "{}",
            facts[0].hint
        );
        assert!(same_facts(&facts, &gate));
        assert_eq!(verdict_facts(gate.clone(), false, Some(id)), gate);
        assert_eq!(verdict_facts(gate.clone(), true, None), gate);
    }
}
