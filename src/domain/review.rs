//! Several reviewers on one quest: the first looks a quest in REVIEW needs,
//! from distinct tokens; agreement, which decides it; disagreement, which
//! leaves it to an adjudicator; and who may see which decision when.

use chrono::{DateTime, Utc};

use sha2::{Digest, Sha256};

use super::ids::{QuestId, TokenId};
use super::session::SessionConfig;
use super::work::{Refusal, ReviewerId};
use super::{DecidedBy, Decision, Role, State};

/// The most reviewers a session may ask for on one quest.
pub const MAX_REVIEWERS: u32 = 10;

/// How many looks a new quest of a session with `config` will need in
/// REVIEW: `review.reviewers`, or with `review.overlap_rate` that many for
/// the drawn share and 1 for the others. The draw is a keyed hash of the
/// server's secret `key` and the quest's id: fixed for the quest, and
/// unpredictable to whoever knows only the id.
pub fn looks_required(config: &SessionConfig, key: &str, quest: QuestId) -> u32 {
    let reviewers = config.reviewers();
    let Some(rate) = config.review.as_ref().and_then(|r| r.overlap_rate) else {
        return reviewers;
    };
    let digest = Sha256::new()
        .chain_update(b"quest review overlap\0")
        .chain_update(key.as_bytes())
        .chain_update(b"\0")
        .chain_update(quest.as_uuid().as_bytes())
        .finalize();
    let mut head = [0; 8];
    head.copy_from_slice(&digest[..8]);
    // The top 53 bits, as a uniform number in [0, 1).
    let x = (u64::from_be_bytes(head) >> 11) as f64 / (1u64 << 53) as f64;
    if x < rate { reviewers } else { 1 }
}

/// What a review decision is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Look {
    /// One of the looks the quest needs; with one reviewer, the only one.
    First,
    /// An adjudicator's decision on looks that disagree.
    Adjudication,
}
text_enum!(Look { First => "first", Adjudication => "adjudication" });

/// A first look given: by which token, under which name, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstLook {
    pub token: Option<TokenId>,
    pub name: String,
    pub decision: Decision,
}

/// Where a quest in REVIEW stands with its reviewers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// It waits for first looks (`given` of `required` so far, all agreeing).
    Looking { given: u32, required: u32 },
    /// Its looks disagree: an adjudicator decides.
    Adjudication,
}

impl Stage {
    /// Where a quest needing `required` looks stands after `looks`.
    pub fn of(required: u32, looks: &[FirstLook]) -> Stage {
        let disagree = looks.windows(2).any(|w| w[0].decision != w[1].decision);
        Stage::new(required, looks.len() as u32, disagree)
    }

    /// Where a quest needing `required` looks stands after `given` of them,
    /// which `disagree` or not.
    pub fn new(required: u32, given: u32, disagree: bool) -> Stage {
        if disagree {
            Stage::Adjudication
        } else {
            Stage::Looking { given, required }
        }
    }

    /// How many reviewers may hold a claim on the quest at once: the looks
    /// it still needs, or the one adjudicator.
    pub fn claim_slots(self) -> u32 {
        match self {
            Stage::Looking { given, required } => required.saturating_sub(given).max(1),
            Stage::Adjudication => 1,
        }
    }

    /// Whether several reviewers may look at once (claims are kept apart
    /// from the quest's own single claim).
    pub fn shared(self) -> bool {
        matches!(self, Stage::Looking { required, .. } if required > 1)
    }
}

/// Whether a token may adjudicate: an admin, or a reviewer made to.
pub fn adjudicates(role: Role, adjudicate: bool) -> bool {
    role == Role::Admin || (role == Role::Reviewer && adjudicate)
}

/// Whether `me` gave one of `looks`.
fn looked(looks: &[FirstLook], me: &ReviewerId) -> bool {
    looks.iter().any(|l| l.token == Some(me.token))
}

/// Whether `me` may take part in the quest's review now: a reviewer gives
/// one first look; in adjudication only an adjudicator who gave none decides.
pub fn check_may_review(
    stage: Stage,
    looks: &[FirstLook],
    me: &ReviewerId,
    adjudicator: bool,
) -> Result<(), Refusal> {
    match stage {
        Stage::Looking { required, .. } if looked(looks, me) => {
            Err(Refusal::AlreadyLooked { required })
        }
        Stage::Looking { .. } => Ok(()),
        Stage::Adjudication if !adjudicator || looked(looks, me) => {
            Err(Refusal::AdjudicationNeeded {
                gave_look: looked(looks, me),
            })
        }
        Stage::Adjudication => Ok(()),
    }
}

/// What one decision does to a quest in REVIEW.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Recorded as a look; the quest waits for more.
    Waiting,
    /// The looks now disagree: the quest waits for an adjudicator.
    ToAdjudication,
    /// The quest is decided, by these.
    Decided(DecidedBy),
}

/// What `me`'s `decision` is and does, on a quest needing `required` looks
/// that got `looks` so far (oldest first).
pub fn judge(
    required: u32,
    looks: &[FirstLook],
    me: &ReviewerId,
    adjudicator: bool,
    decision: Decision,
) -> Result<(Look, Outcome), Refusal> {
    let stage = Stage::of(required, looks);
    check_may_review(stage, looks, me, adjudicator)?;
    if stage == Stage::Adjudication {
        return Ok((
            Look::Adjudication,
            Outcome::Decided(DecidedBy::Adjudicator(me.name.clone())),
        ));
    }
    let outcome = if looks.iter().any(|l| l.decision != decision) {
        Outcome::ToAdjudication
    } else if looks.len() as u32 + 1 < required {
        Outcome::Waiting
    } else if looks.is_empty() {
        Outcome::Decided(DecidedBy::Reviewer(me.name.clone()))
    } else {
        let mut names: Vec<String> = looks.iter().map(|l| l.name.clone()).collect();
        names.push(me.name.clone());
        Outcome::Decided(DecidedBy::Reviewers(names))
    };
    Ok((Look::First, outcome))
}

/// Who asks to see a quest's review decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewer {
    pub token: TokenId,
    pub role: Role,
    pub adjudicate: bool,
}

/// Whether `viewer` may see a decision by `by` of kind `look` on a quest in
/// `state` at `stage` (`None` once decided): every decision once the quest is
/// decided; before, an admin sees all, a reviewer their own, and an
/// adjudicator who gave no look the looks it must adjudicate.
pub fn may_see(
    viewer: &Viewer,
    state: State,
    stage: Option<Stage>,
    by: Option<TokenId>,
    looks: &[FirstLook],
) -> bool {
    if state != State::Review || viewer.role == Role::Admin || by == Some(viewer.token) {
        return true;
    }
    stage == Some(Stage::Adjudication)
        && adjudicates(viewer.role, viewer.adjudicate)
        && !looks.iter().any(|l| l.token == Some(viewer.token))
}

/// The live claims on a quest other than `me`'s, as a refusal when they
/// fill every slot the stage has.
pub fn check_claimable(
    stage: Stage,
    others: &[(String, DateTime<Utc>)],
    me: &ReviewerId,
) -> Result<(), Refusal> {
    if (others.len() as u32) < stage.claim_slots() {
        return Ok(());
    }
    let names: Vec<&str> = others.iter().map(|(n, _)| n.as_str()).collect();
    Err(Refusal::ReviewClaimed {
        by: names.join(" and "),
        until: others.iter().map(|(_, t)| *t).min().unwrap_or_default(),
        same_name: others.iter().any(|(n, _)| *n == me.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(name: &str, decision: Decision) -> (ReviewerId, FirstLook) {
        let who = ReviewerId::new(TokenId::new(), name.to_owned());
        let look = FirstLook {
            token: Some(who.token),
            name: name.to_owned(),
            decision,
        };
        (who, look)
    }

    #[test]
    fn one_reviewer_decides_alone_as_before() {
        let (ana, _) = look("ana", Decision::Approve);
        assert_eq!(
            judge(1, &[], &ana, false, Decision::Reject),
            Ok((
                Look::First,
                Outcome::Decided(DecidedBy::Reviewer("ana".into()))
            ))
        );
    }

    #[test]
    fn two_agreeing_looks_decide_a_disagreement_goes_to_an_adjudicator() {
        let (ana, ana_look) = look("ana", Decision::Approve);
        let (ben, _) = look("ben", Decision::Approve);
        let (cy, _) = look("cy", Decision::Approve);
        assert_eq!(
            judge(2, &[], &ana, false, Decision::Approve),
            Ok((Look::First, Outcome::Waiting))
        );
        assert_eq!(
            judge(
                2,
                std::slice::from_ref(&ana_look),
                &ana,
                true,
                Decision::Approve
            ),
            Err(Refusal::AlreadyLooked { required: 2 }),
            "one look per token"
        );
        assert_eq!(
            judge(
                2,
                std::slice::from_ref(&ana_look),
                &ben,
                false,
                Decision::Approve
            ),
            Ok((
                Look::First,
                Outcome::Decided(DecidedBy::Reviewers(vec!["ana".into(), "ben".into()]))
            ))
        );
        assert_eq!(
            judge(
                2,
                std::slice::from_ref(&ana_look),
                &ben,
                false,
                Decision::Reject
            ),
            Ok((Look::First, Outcome::ToAdjudication))
        );
        let split = [
            ana_look.clone(),
            FirstLook {
                token: Some(ben.token),
                name: "ben".into(),
                decision: Decision::Reject,
            },
        ];
        assert_eq!(Stage::of(2, &split), Stage::Adjudication);
        assert_eq!(
            judge(2, &split, &cy, false, Decision::Approve),
            Err(Refusal::AdjudicationNeeded { gave_look: false })
        );
        assert_eq!(
            judge(2, &split, &ana, true, Decision::Approve),
            Err(Refusal::AdjudicationNeeded { gave_look: true }),
            "no adjudicating a quest one looked at"
        );
        assert_eq!(
            judge(2, &split, &cy, true, Decision::Reject),
            Ok((
                Look::Adjudication,
                Outcome::Decided(DecidedBy::Adjudicator("cy".into()))
            ))
        );
    }

    #[test]
    fn first_looks_are_hidden_until_the_quest_is_decided_but_from_admins_and_adjudicators() {
        let (ana, ana_look) = look("ana", Decision::Approve);
        let (ben, ben_look) = look("ben", Decision::Reject);
        let reviewer = |who: &ReviewerId, adjudicate| Viewer {
            token: who.token,
            role: Role::Reviewer,
            adjudicate,
        };
        let looking = Some(Stage::of(2, std::slice::from_ref(&ana_look)));
        let looks = [ana_look.clone()];
        assert!(!may_see(
            &reviewer(&ben, false),
            State::Review,
            looking,
            Some(ana.token),
            &looks
        ));
        assert!(
            !may_see(
                &reviewer(&ben, true),
                State::Review,
                looking,
                Some(ana.token),
                &looks
            ),
            "not even an adjudicator, before a disagreement"
        );
        assert!(
            may_see(
                &reviewer(&ana, false),
                State::Review,
                looking,
                Some(ana.token),
                &looks
            ),
            "one's own"
        );
        let admin = Viewer {
            token: TokenId::new(),
            role: Role::Admin,
            adjudicate: false,
        };
        assert!(may_see(
            &admin,
            State::Review,
            looking,
            Some(ana.token),
            &looks
        ));
        let split = [ana_look, ben_look];
        let (cy, _) = look("cy", Decision::Approve);
        let adjudication = Some(Stage::Adjudication);
        assert!(may_see(
            &reviewer(&cy, true),
            State::Review,
            adjudication,
            Some(ana.token),
            &split
        ));
        assert!(!may_see(
            &reviewer(&cy, false),
            State::Review,
            adjudication,
            Some(ana.token),
            &split
        ));
        assert!(
            !may_see(
                &reviewer(&ben, true),
                State::Review,
                adjudication,
                Some(ana.token),
                &split
            ),
            "a looker adjudicates nothing"
        );
        assert!(
            may_see(
                &reviewer(&ben, false),
                State::Pass,
                None,
                Some(ana.token),
                &split
            ),
            "every decision once decided"
        );
    }

    #[test]
    fn an_overlap_rate_draws_a_share_of_quests_by_a_secret_key() {
        let config = |rate: Option<f64>| {
            let mut review = serde_json::json!({"reviewers": 3});
            if let Some(rate) = rate {
                review["overlap_rate"] = rate.into();
            }
            SessionConfig::parse(serde_json::json!({"gate": {"kind": "schema"}, "review": review}))
                .unwrap()
        };
        let ids: Vec<QuestId> = (0..1000).map(|_| QuestId::new()).collect();
        let drawn = |c: &SessionConfig, key: &str| {
            ids.iter()
                .filter(|id| looks_required(c, key, **id) == 3)
                .count()
        };
        assert_eq!(
            drawn(&config(None), "k"),
            1000,
            "every quest without a rate"
        );
        assert_eq!(drawn(&config(Some(0.0)), "k"), 0);
        assert_eq!(drawn(&config(Some(1.0)), "k"), 1000);
        let half = config(Some(0.5));
        let (a, b) = (drawn(&half, "secret-a"), drawn(&half, "secret-b"));
        assert!(
            (400..600).contains(&a) && (400..600).contains(&b),
            "{a} {b}"
        );
        let same = ids
            .iter()
            .filter(|id| {
                looks_required(&half, "secret-a", **id) == looks_required(&half, "secret-b", **id)
            })
            .count();
        assert!(
            same < 600,
            "another key draws other quests: {same} of 1000 alike"
        );
        assert!(
            ids.iter().all(|id| looks_required(&half, "secret-a", *id)
                == looks_required(&half, "secret-a", *id)),
            "fixed per quest"
        );
    }

    #[test]
    fn claims_fill_the_slots_the_stage_has() {
        let (ana, ana_look) = look("ana", Decision::Approve);
        let (cy, _) = look("cy", Decision::Approve);
        let until = Utc::now();
        let one = [("ben".to_owned(), until)];
        assert_eq!(
            check_claimable(Stage::of(2, &[]), &one, &ana),
            Ok(()),
            "two may look at once"
        );
        let two = [("ben".to_owned(), until), ("dan".to_owned(), until)];
        assert!(
            matches!(check_claimable(Stage::of(2, &[]), &two, &ana), Err(Refusal::ReviewClaimed { by, .. }) if by == "ben and dan")
        );
        assert!(
            check_claimable(Stage::of(2, std::slice::from_ref(&ana_look)), &one, &cy).is_err(),
            "one look left, taken"
        );
        assert!(check_claimable(Stage::of(1, &[]), &one, &ana).is_err());
        assert!(!Stage::of(1, &[]).shared() && Stage::of(2, &[]).shared());
    }
}
