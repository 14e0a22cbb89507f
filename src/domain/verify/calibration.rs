//! Calibration of the AI verifiers against the people who review their work:
//! every non-bulk review decision on a quest a verifier answered is a label.
//! Here are the pure rules: the 2×2 table of a verifier's answers against the
//! decisions, Cohen's kappa from it, when a session's verifier loses or wins
//! back its veto (advisory or voting), and which quests an audit sample draws.
//!
//! The table's positive class is "the work is bad": a flag is the verifier
//! saying so, a rejection the reviewer saying so.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// No kappa is reported on fewer labels than this: it would be noise.
pub const MIN_KAPPA_LABELS: u64 = 10;
/// The labels a verifier needs before it is judged, when a session sets
/// `min_kappa` without `min_labels`.
pub const DEFAULT_MIN_LABELS: u32 = 20;

/// A verifier's answers on one question against the reviewers' decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Confusion {
    /// It flagged, and the reviewer rejected: a flag upheld.
    pub upheld: u64,
    /// It flagged, and the reviewer approved: a flag overruled.
    pub overruled: u64,
    /// It did not flag, and the reviewer rejected: a rejection it missed.
    pub missed: u64,
    /// It did not flag, and the reviewer approved.
    pub cleared: u64,
}

/// Why there is no kappa.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoKappa {
    #[error("fewer than {MIN_KAPPA_LABELS} labels ({0})")]
    TooFewLabels(u64),
    #[error(
        "undefined: the verifier and the reviewers each gave only one and the same answer, so chance \
         agreement is 1"
    )]
    ChanceIsCertain,
}

impl Confusion {
    /// Every labelled answer.
    pub fn labels(&self) -> u64 {
        self.upheld + self.overruled + self.missed + self.cleared
    }

    /// Labelled answers that flagged the quest.
    pub fn flagged(&self) -> u64 {
        self.upheld + self.overruled
    }

    /// Labelled answers that did not flag the quest.
    pub fn unflagged(&self) -> u64 {
        self.missed + self.cleared
    }

    /// The share of labelled answers that flagged; `None` without labels.
    pub fn flagged_share(&self) -> Option<f64> {
        let n = self.labels();
        (n > 0).then(|| self.flagged() as f64 / n as f64)
    }

    /// Cohen's kappa between the verifier's flags and the reviewers'
    /// rejections: `(po - pe) / (1 - pe)`, with `po` the observed agreement and
    /// `pe` the agreement expected by chance from the two marginals.
    pub fn kappa(&self) -> Result<f64, NoKappa> {
        let n = self.labels();
        if n < MIN_KAPPA_LABELS {
            return Err(NoKappa::TooFewLabels(n));
        }
        let n = n as f64;
        let observed = (self.upheld + self.cleared) as f64 / n;
        let flagged = self.flagged() as f64 / n;
        let rejected = (self.upheld + self.missed) as f64 / n;
        let chance = flagged * rejected + (1.0 - flagged) * (1.0 - rejected);
        if (1.0 - chance).abs() < 1e-12 {
            return Err(NoKappa::ChanceIsCertain);
        }
        Ok((observed - chance) / (1.0 - chance))
    }
}

/// Whether a verifier's flags count towards `flag_threshold` in a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Standing {
    /// Its flags count (every verifier starts here).
    #[default]
    Voting,
    /// Asked, stored and shown, but its flags do not count.
    Advisory,
}
text_enum!(Standing { Voting => "voting", Advisory => "advisory" });

/// A session's floor (`verify.min_kappa` and `verify.min_labels`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub min_kappa: f64,
    pub min_labels: u32,
}

/// Why a verifier is not judged yet: its labels are too few or too one-sided.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum NotJudged {
    #[error("{labels} labels, fewer than min_labels ({min_labels})")]
    TooFewLabels { labels: u64, min_labels: u32 },
    #[error(
        "of {labels} labels, {flagged} are quests it flagged and {unflagged} quests it did not; each \
         needs at least a quarter"
    )]
    OneSided {
        labels: u64,
        flagged: u64,
        unflagged: u64,
    },
    #[error("{0}")]
    NoKappa(NoKappa),
}

/// A verifier's judgement: the standing its labels earn, with the kappa.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    pub standing: Standing,
    pub kappa: f64,
}

impl Floor {
    /// Judges a verifier on its labels. Only evidence about both of its
    /// answers counts: at least `min_labels` labels, at least a quarter of
    /// them quests it flagged and a quarter quests it did not. A verifier
    /// judged only on its flags would score zero whatever its worth, since
    /// people see only the quests it flags.
    pub fn judge(&self, c: &Confusion) -> Result<Judged, NotJudged> {
        let (labels, flagged, unflagged) = (c.labels(), c.flagged(), c.unflagged());
        if labels < u64::from(self.min_labels) {
            return Err(NotJudged::TooFewLabels {
                labels,
                min_labels: self.min_labels,
            });
        }
        if flagged * 4 < labels || unflagged * 4 < labels {
            return Err(NotJudged::OneSided {
                labels,
                flagged,
                unflagged,
            });
        }
        let kappa = c.kappa().map_err(NotJudged::NoKappa)?;
        let standing = if kappa < self.min_kappa {
            Standing::Advisory
        } else {
            Standing::Voting
        };
        Ok(Judged { standing, kappa })
    }

    /// The switch the labels call for, if any: a verifier that is not judged
    /// keeps its standing.
    pub fn switch(&self, current: Standing, c: &Confusion) -> Option<Judged> {
        self.judge(c).ok().filter(|j| j.standing != current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(upheld: u64, overruled: u64, missed: u64, cleared: u64) -> Confusion {
        Confusion {
            upheld,
            overruled,
            missed,
            cleared,
        }
    }

    #[test]
    fn kappa_matches_a_hand_computed_table() {
        // n = 20; po = (6 + 11) / 20 = 0.85; flagged 8/20 = 0.4, rejected 7/20 = 0.35;
        // pe = 0.4 * 0.35 + 0.6 * 0.65 = 0.14 + 0.39 = 0.53; kappa = 0.32 / 0.47.
        let k = table(6, 2, 1, 11).kappa().unwrap();
        assert!((k - 0.32 / 0.47).abs() < 1e-12, "{k}");
        // Perfect agreement is 1, perfect disagreement on balanced marginals is -1.
        assert_eq!(table(5, 0, 0, 5).kappa(), Ok(1.0));
        assert_eq!(table(0, 5, 5, 0).kappa(), Ok(-1.0));
        // Agreement no better than chance: po = 0.5, pe = 0.5.
        assert_eq!(table(3, 3, 3, 3).kappa(), Ok(0.0));
    }

    #[test]
    fn there_is_no_kappa_below_ten_labels_or_when_chance_agreement_is_certain() {
        assert_eq!(table(3, 1, 1, 4).kappa(), Err(NoKappa::TooFewLabels(9)));
        assert_eq!(table(0, 0, 0, 12).kappa(), Err(NoKappa::ChanceIsCertain));
        assert_eq!(table(12, 0, 0, 0).kappa(), Err(NoKappa::ChanceIsCertain));
        // One-sided reviewers but a verifier that varies: defined, and 0.
        assert_eq!(table(4, 0, 8, 0).kappa(), Ok(0.0));
    }

    #[test]
    fn a_verifier_is_judged_only_on_enough_labels_about_both_of_its_answers() {
        let floor = Floor {
            min_kappa: 0.4,
            min_labels: 12,
        };
        assert!(matches!(
            floor.judge(&table(3, 3, 2, 3)),
            Err(NotJudged::TooFewLabels { labels: 11, .. })
        ));
        // Only flagged quests labelled: the case that would always score zero.
        assert!(matches!(
            floor.judge(&table(6, 10, 0, 0)),
            Err(NotJudged::OneSided { flagged: 16, .. })
        ));
        // 3 of 16 unflagged is less than a quarter; 4 of 16 is enough.
        assert!(floor.judge(&table(6, 7, 1, 2)).is_err());
        let judged = floor.judge(&table(6, 6, 2, 2)).unwrap();
        assert_eq!(judged.standing, Standing::Advisory, "{judged:?}");
    }

    #[test]
    fn a_verifier_switches_at_the_floor_and_back() {
        let floor = Floor {
            min_kappa: 0.0,
            min_labels: 12,
        };
        // kappa exactly at the floor keeps the veto.
        assert_eq!(floor.switch(Standing::Voting, &table(3, 3, 3, 3)), None);
        let bad = table(0, 6, 6, 0);
        assert_eq!(
            floor.switch(Standing::Voting, &bad).map(|j| j.standing),
            Some(Standing::Advisory)
        );
        assert_eq!(floor.switch(Standing::Advisory, &bad), None);
        assert_eq!(
            floor
                .switch(Standing::Advisory, &table(6, 0, 0, 6))
                .map(|j| (j.standing, j.kappa)),
            Some((Standing::Voting, 1.0))
        );
        // Not judged: the standing stays whatever it is.
        assert_eq!(floor.switch(Standing::Advisory, &table(1, 0, 0, 1)), None);
    }
}
