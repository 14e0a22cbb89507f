//! How much a session's reviewers agree: each reviewer's decisions, pace and
//! how often adjudication overruled them, and for each pair of reviewers the
//! quests they both looked at, their raw agreement and Cohen's kappa (the
//! verifiers' calibration's: no kappa under ten shared quests, nor when
//! chance agreement is 1). Only decided quests count, so that no figure
//! tells a reviewer what another said on a quest still waiting.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::Decision;
use super::ids::{QuestId, TokenId};
use super::review::Look;
use super::verify::calibration::{Confusion, NoKappa};

/// One review decision on a decided quest.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub quest: QuestId,
    pub token: Option<TokenId>,
    pub name: String,
    pub decision: Decision,
    pub look: Look,
    pub created_at: DateTime<Utc>,
}

/// A reviewer's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewerFigures {
    pub token: Option<TokenId>,
    pub name: String,
    pub decisions: u64,
    pub first_looks: u64,
    pub adjudications: u64,
    /// Decisions an hour between their first and their last; `None` under two.
    pub per_hour: Option<f64>,
    /// First looks an adjudicator decided the other way.
    pub overruled: u64,
}

/// Two reviewers' agreement on the quests both looked at.
#[derive(Debug, Clone, PartialEq)]
pub struct PairFigures {
    pub a: String,
    pub b: String,
    pub shared: u64,
    /// The share of shared quests on which they decided alike.
    pub agreement: Option<f64>,
    pub kappa: Option<f64>,
    /// Why there is no kappa.
    pub kappa_reason: Option<String>,
}

/// The share of the pairs' shared quests on which two reviewers decided
/// differently, pooled over every pair; `None` with no shared quest.
pub fn disagreement(pairs: &[PairFigures]) -> Option<f64> {
    let shared: u64 = pairs.iter().map(|p| p.shared).sum();
    let apart: f64 = pairs
        .iter()
        .map(|p| p.shared as f64 * (1.0 - p.agreement.unwrap_or(1.0)))
        .sum();
    (shared > 0).then(|| apart / shared as f64)
}

/// Who a decision is by: its token and name (two tokens of one name are two
/// reviewers; decisions older than kept tokens have a name only).
type Who = (Option<TokenId>, String);

fn who(d: &Decided) -> Who {
    (d.token, d.name.clone())
}

/// The figures of every reviewer and of every pair, from a session's
/// decisions on decided quests (any order).
pub fn figures(decisions: &[Decided]) -> (Vec<ReviewerFigures>, Vec<PairFigures>) {
    let mut by_quest: BTreeMap<QuestId, Vec<&Decided>> = BTreeMap::new();
    for d in decisions {
        by_quest.entry(d.quest).or_default().push(d);
    }
    let mut people: BTreeMap<Who, ReviewerFigures> = BTreeMap::new();
    let mut times: BTreeMap<Who, (DateTime<Utc>, DateTime<Utc>)> = BTreeMap::new();
    let mut pairs: BTreeMap<(Who, Who), Confusion> = BTreeMap::new();
    for d in decisions {
        let f = people.entry(who(d)).or_insert_with(|| ReviewerFigures {
            token: d.token,
            name: d.name.clone(),
            decisions: 0,
            first_looks: 0,
            adjudications: 0,
            per_hour: None,
            overruled: 0,
        });
        f.decisions += 1;
        match d.look {
            Look::First => f.first_looks += 1,
            Look::Adjudication => f.adjudications += 1,
        }
        let span = times.entry(who(d)).or_insert((d.created_at, d.created_at));
        span.0 = span.0.min(d.created_at);
        span.1 = span.1.max(d.created_at);
    }
    for list in by_quest.values() {
        let looks: Vec<&&Decided> = list.iter().filter(|d| d.look == Look::First).collect();
        if let Some(adjudication) = list.iter().find(|d| d.look == Look::Adjudication) {
            for look in looks.iter().filter(|l| l.decision != adjudication.decision) {
                if let Some(f) = people.get_mut(&who(look)) {
                    f.overruled += 1;
                }
            }
        }
        for (i, x) in looks.iter().enumerate() {
            for y in &looks[i + 1..] {
                let (wx, wy) = (who(x), who(y));
                let ((a, da), (b, db)) = if (&wx.1, &wx.0) <= (&wy.1, &wy.0) {
                    ((wx, x.decision), (wy, y.decision))
                } else {
                    ((wy, y.decision), (wx, x.decision))
                };
                let c = pairs.entry((a, b)).or_default();
                // Positive: "the work is bad", as in the verifiers' table.
                match (da, db) {
                    (Decision::Reject, Decision::Reject) => c.upheld += 1,
                    (Decision::Reject, Decision::Approve) => c.overruled += 1,
                    (Decision::Approve, Decision::Reject) => c.missed += 1,
                    (Decision::Approve, Decision::Approve) => c.cleared += 1,
                }
            }
        }
    }
    let reviewers = people
        .into_iter()
        .map(|(key, mut f)| {
            let (first, last) = times[&key];
            let hours = (last - first).num_milliseconds() as f64 / 3_600_000.0;
            f.per_hour =
                (f.decisions >= 2 && hours > 0.0).then(|| (f.decisions - 1) as f64 / hours);
            f
        })
        .collect();
    let pairs = pairs
        .into_iter()
        .map(|((a, b), c)| {
            let shared = c.labels();
            let (kappa, kappa_reason) = match c.kappa() {
                Ok(k) => (Some(k), None),
                Err(NoKappa::TooFewLabels(n)) => (None, Some(format!("fewer than 10 shared quests ({n})"))),
                Err(NoKappa::ChanceIsCertain) => (
                    None,
                    Some("undefined: both gave only one and the same answer, so chance agreement is 1".to_owned()),
                ),
            };
            PairFigures {
                a: a.1,
                b: b.1,
                shared,
                agreement: (shared > 0).then(|| (c.upheld + c.cleared) as f64 / shared as f64),
                kappa,
                kappa_reason,
            }
        })
        .collect();
    (reviewers, pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn look(
        quest: QuestId,
        token: TokenId,
        name: &str,
        decision: Decision,
        minute: i64,
    ) -> Decided {
        Decided {
            quest,
            token: Some(token),
            name: name.into(),
            decision,
            look: Look::First,
            created_at: DateTime::<Utc>::UNIX_EPOCH + TimeDelta::minutes(minute),
        }
    }

    #[test]
    fn kappa_of_two_reviewers_matches_a_hand_computed_table_and_adjudication_overrules() {
        let (ana, ben, cy) = (TokenId::new(), TokenId::new(), TokenId::new());
        // 12 shared quests: both reject 3, ana rejects ben approves 1,
        // ana approves ben rejects 2, both approve 6.
        let table = [
            (3, Decision::Reject, Decision::Reject),
            (1, Decision::Reject, Decision::Approve),
            (2, Decision::Approve, Decision::Reject),
            (6, Decision::Approve, Decision::Approve),
        ];
        let mut all = Vec::new();
        let mut minute = 0;
        for (n, a, b) in table {
            for _ in 0..n {
                let q = QuestId::new();
                all.push(look(q, ana, "ana", a, minute));
                all.push(look(q, ben, "ben", b, minute));
                if a != b {
                    all.push(Decided {
                        look: Look::Adjudication,
                        ..look(q, cy, "cy", b, minute)
                    });
                }
                minute += 6;
            }
        }
        let (people, pairs) = figures(&all);
        // po = 9/12 = 0.75; ana rejects 4/12, ben 5/12;
        // pe = 4/12 * 5/12 + 8/12 * 7/12 = (20 + 56) / 144 = 76/144;
        // kappa = (108/144 - 76/144) / (68/144) = 32/68.
        assert_eq!(pairs.len(), 1);
        let p = &pairs[0];
        assert_eq!((p.a.as_str(), p.b.as_str(), p.shared), ("ana", "ben", 12));
        assert_eq!(p.agreement, Some(0.75));
        assert!(
            (p.kappa.unwrap() - 32.0 / 68.0).abs() < 1e-12,
            "{:?}",
            p.kappa
        );
        let ana_f = people.iter().find(|f| f.name == "ana").unwrap();
        assert_eq!(
            (ana_f.decisions, ana_f.first_looks, ana_f.overruled),
            (12, 12, 3),
            "cy sided with ben 3 times"
        );
        // 12 decisions over 66 minutes: 11 intervals in 1.1 h.
        assert!(
            (ana_f.per_hour.unwrap() - 10.0).abs() < 1e-9,
            "{:?}",
            ana_f.per_hour
        );
        let cy_f = people.iter().find(|f| f.name == "cy").unwrap();
        assert_eq!((cy_f.adjudications, cy_f.overruled), (3, 0));
    }

    #[test]
    fn there_is_no_kappa_under_ten_shared_quests_or_when_both_always_agree_alike() {
        let (ana, ben) = (TokenId::new(), TokenId::new());
        let few: Vec<Decided> = (0..9)
            .flat_map(|i| {
                let q = QuestId::new();
                [
                    look(q, ana, "ana", Decision::Approve, i),
                    look(q, ben, "ben", Decision::Reject, i),
                ]
            })
            .collect();
        let (_, pairs) = figures(&few);
        assert_eq!((pairs[0].shared, pairs[0].kappa), (9, None));
        assert_eq!(
            pairs[0].kappa_reason.as_deref(),
            Some("fewer than 10 shared quests (9)")
        );
        assert_eq!(pairs[0].agreement, Some(0.0));
        let alike: Vec<Decided> = (0..10)
            .flat_map(|i| {
                let q = QuestId::new();
                [
                    look(q, ana, "ana", Decision::Approve, i),
                    look(q, ben, "ben", Decision::Approve, i),
                ]
            })
            .collect();
        let (people, pairs) = figures(&alike);
        assert_eq!((pairs[0].agreement, pairs[0].kappa), (Some(1.0), None));
        assert!(
            pairs[0]
                .kappa_reason
                .as_deref()
                .unwrap()
                .contains("chance agreement is 1")
        );
        assert_eq!(people[0].overruled, 0);
    }

    #[test]
    fn two_tokens_of_one_name_are_two_reviewers_in_every_pair() {
        let (ana, other_ana, ben) = (TokenId::new(), TokenId::new(), TokenId::new());
        let mut all = Vec::new();
        for (i, who) in [ana, other_ana].into_iter().enumerate() {
            let q = QuestId::new();
            all.push(look(q, who, "ana", Decision::Approve, i as i64));
            all.push(look(q, ben, "ben", Decision::Reject, i as i64));
        }
        let (reviewers, pairs) = figures(&all);
        assert_eq!(reviewers.len(), 3);
        assert_eq!(pairs.len(), 2, "one pair per ana token: {pairs:?}");
        assert!(
            pairs
                .iter()
                .all(|p| p.a == "ana" && p.b == "ben" && p.shared == 1)
        );
    }

    #[test]
    fn disagreement_pools_the_pairs_by_their_shared_quests() {
        let pair = |shared, agreement| PairFigures {
            a: "a".into(),
            b: "b".into(),
            shared,
            agreement: Some(agreement),
            kappa: None,
            kappa_reason: None,
        };
        assert_eq!(disagreement(&[]), None);
        // 10 quests at 0.9 and 30 at 0.5: (1 + 15) / 40.
        let pooled = disagreement(&[pair(10, 0.9), pair(30, 0.5)]).unwrap();
        assert!((pooled - 16.0 / 40.0).abs() < 1e-12, "{pooled}");
    }
}
