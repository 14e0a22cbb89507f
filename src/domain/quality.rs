//! How wrong the delivered data may be (issue 22): the random audit draw,
//! keyed so that nobody who can read a quest can tell whether it will be
//! audited, and the bounds read from what the audits found.
//!
//! The audits are a simple random sample of the quests the machine would
//! pass (the rate is the same for every quest of a session), so the share of
//! wrong rows among them is bounded by one Clopper–Pearson interval on the
//! pooled audits: "at most 1.0% of these rows are wrong, at 95% confidence".

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use serde::{Deserialize, Serialize};

use crate::domain::Fact;
use crate::domain::ids::{QuestId, SessionId};

/// The check of the fact that sends a drawn quest to a person.
pub const AUDIT_CHECK: &str = "audit";

/// The review queue's `check` that lists the label-only audits of PASS
/// quests (post-hoc ones and those of suspects) instead of REVIEW quests.
pub const AUDIT_PASS_CHECK: &str = "audit_pass";

/// The confidence of every bound: one-sided 95%.
pub const CONFIDENCE: f64 = 0.95;
/// The normal quantile of a one-sided 95% bound.
pub const Z: f64 = 1.645;

/// The name of the server secret the audit keys derive from.
pub const AUDIT_SECRET: &str = "audit";

/// A fresh server secret: 256 random bits, hex.
pub fn new_server_secret() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A session's audit key: HMAC-SHA256 of the server's secret and the
/// session's id. Neither is served; the session's key never leaves the server.
pub fn session_key(server_secret: &str, session: SessionId) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(server_secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(b"quest audit key\0");
    mac.update(session.as_uuid().as_bytes());
    mac.finalize().into_bytes().into()
}

/// Whether `quest` is drawn for the audit at `rate` (0 to 1): HMAC-SHA256 of
/// its id under the session's key, fixed for the quest (a retry or a restart
/// draws the same) and unpredictable without the key.
pub fn drawn(key: &[u8; 32], quest: QuestId, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate.is_nan() || rate <= 0.0 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(quest.as_uuid().as_bytes());
    let digest = mac.finalize().into_bytes();
    let mut head = [0; 8];
    head.copy_from_slice(&digest[..8]);
    // The top 53 bits, as a uniform number in [0, 1).
    let x = (u64::from_be_bytes(head) >> 11) as f64 / (1u64 << 53) as f64;
    x < rate
}

/// The fact that sends a drawn quest to a person before it becomes PASS.
pub fn audit_fact(rate: f64, verified: bool) -> Fact {
    let by = if verified {
        "the verifiers"
    } else {
        "the gate"
    };
    Fact::new(
        AUDIT_CHECK,
        "quest",
        "not drawn for the audit sample",
        format!("drawn for the audit sample (audit.rate {rate})"),
        format!(
            "{by} passed this quest; a person checks a random share of such quests anyway, so that \
             the export's error can be bounded (and the verifiers' clear answers labelled)"
        ),
    )
}

/// Where an audited quest came from: the rate is the same in both, so the
/// strata are reported for information and pooled for the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Stratum {
    #[serde(rename = "gate")]
    Gate,
    #[serde(rename = "gate+verifiers")]
    GateAndVerifiers,
}

/// The decided audits of one stratum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audits {
    pub stratum: Stratum,
    pub approved: u64,
    pub rejected: u64,
}

/// One stratum's figures, for information.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StratumQuality {
    pub stratum: Stratum,
    pub audited: u64,
    pub errors: u64,
    pub error_bound: Option<f64>,
}

/// A session's PASS rows as the bound sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rows {
    /// Audits drawn and waiting for a person.
    pub pending_audits: u64,
    /// PASS rows decided by the machine, or audited and approved.
    pub covered: u64,
    /// Covered rows no audit drew.
    pub unaudited: u64,
    /// PASS rows a person decided outside the audit.
    pub decided_by_person: u64,
    /// PASS rows an audit found wrong, or marked suspect and not approved by one.
    pub known_errors: u64,
}

/// How wrong the delivered rows of a session may be, with every count the
/// figure rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Quality {
    /// Whether any audit was decided; without one nothing is measured (the bound is null, never 0).
    pub measured: bool,
    pub method: String,
    pub confidence: f64,
    /// The session's `audit.rate`; null when it draws no audits.
    pub audit_rate: Option<f64>,
    /// Decided audits, pooled over the strata.
    pub audited: u64,
    /// The audits a person rejected.
    pub errors: u64,
    /// At most this share of the machine-decided PASS rows is wrong.
    pub error_bound: Option<f64>,
    pub strata: Vec<StratumQuality>,
    /// Audits drawn and waiting for a person.
    pub pending_audits: u64,
    /// PASS rows the bound covers: decided by the machine, or audited and approved.
    pub covered: u64,
    /// Covered rows not audited: what further audits may draw from.
    pub unaudited: u64,
    /// PASS rows a person decided outside the audit: not covered by the bound.
    pub decided_by_person: u64,
    /// PASS rows an audit found wrong, or marked suspect by the gold floor
    /// and not approved by an audit: known errors, on top of the bound
    /// (which covers the rows nobody has looked at).
    pub known_errors: u64,
    /// With several reviewers, the share of their shared quests on which
    /// two decided differently: how far the rows people decided can be
    /// trusted. Null with no shared quest.
    pub reviewer_disagreement: Option<f64>,
    /// The figures in one sentence.
    pub summary: String,
}

impl Quality {
    /// The figures of a session from its decided audits and PASS counts.
    pub fn of(audit_rate: Option<f64>, audits: &[Audits], rows: Rows) -> Quality {
        let Rows {
            pending_audits,
            covered,
            unaudited,
            decided_by_person,
            known_errors,
        } = rows;
        let audited: u64 = audits.iter().map(|a| a.approved + a.rejected).sum();
        let errors: u64 = audits.iter().map(|a| a.rejected).sum();
        let bound = error_bound(errors, audited);
        let strata = audits
            .iter()
            .map(|a| StratumQuality {
                stratum: a.stratum,
                audited: a.approved + a.rejected,
                errors: a.rejected,
                error_bound: error_bound(a.rejected, a.approved + a.rejected),
            })
            .collect();
        let summary = match bound {
            None => format!(
                "not measured: no audit decided yet ({pending_audits} waiting; audit.rate {})",
                audit_rate.map_or("unset".to_owned(), |r| r.to_string())
            ),
            Some(b) => format!(
                "at most {:.2}% of {covered} PASS rows are wrong (one-sided {:.0}% confidence; {errors} \
                 wrong in {audited} random audits){}",
                b * 100.0,
                CONFIDENCE * 100.0,
                [
                    (known_errors > 0).then(|| {
                        format!(
                            "; {known_errors} found wrong by audits or suspect are known errors"
                        )
                    }),
                    (decided_by_person > 0).then(|| {
                        format!("; {decided_by_person} rows decided by a person are not covered")
                    }),
                ]
                .into_iter()
                .flatten()
                .collect::<String>()
            ),
        };
        Quality {
            measured: bound.is_some(),
            method: "Clopper-Pearson, one-sided, on a simple random sample of the machine-decided PASS rows"
                .to_owned(),
            confidence: CONFIDENCE,
            audit_rate,
            audited,
            errors,
            error_bound: bound,
            strata,
            pending_audits,
            covered,
            unaudited,
            decided_by_person,
            known_errors,
            reviewer_disagreement: None,
            summary,
        }
    }

    /// What `target` (a share) asks of further audits, in words: how many
    /// more that find no error bring the bound under it, or why none can.
    pub fn plan(&self, target: f64) -> String {
        let percent = target * 100.0;
        match audits_to_reach(self.errors, self.audited, target) {
            Some(0) => format!("the bound is under {percent}% already"),
            Some(more) if more <= self.unaudited => format!(
                "{more} more audits that find no error bring the bound under {percent}% \
                 (of {} PASS rows not audited)",
                self.unaudited
            ),
            Some(more) => format!(
                "unreachable: {more} more audits would be needed to bring the bound under \
                 {percent}%, and only {} PASS rows are not audited",
                self.unaudited
            ),
            None => format!("unreachable: no number of audits brings the bound under {percent}%"),
        }
    }

    /// The export's `X-Quest-Error-Bound` header: the bound to six places
    /// and what it rests on, or `not-measured`.
    pub fn header(&self) -> String {
        match self.error_bound {
            Some(b) => format!(
                "{b:.6}; confidence={}; audited={}; errors={}",
                self.confidence, self.audited, self.errors
            ),
            None => "not-measured".to_owned(),
        }
    }
}

/// The one-sided Clopper–Pearson upper bound, at [`CONFIDENCE`], on the
/// share of wrong rows after `errors` in `audited` random audits; `None`
/// when nothing was audited (not measured, never 0).
pub fn error_bound(errors: u64, audited: u64) -> Option<f64> {
    if audited == 0 {
        return None;
    }
    if errors >= audited {
        return Some(1.0);
    }
    // The p at which seeing `errors` or fewer has probability 1 − CONFIDENCE:
    // P(X ≤ k | n, p) falls as p rises, so bisect between k/n and 1.
    let alpha = 1.0 - CONFIDENCE;
    let (mut low, mut high) = (errors as f64 / audited as f64, 1.0);
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if binomial_cdf(errors, audited, mid) > alpha {
            low = mid;
        } else {
            high = mid;
        }
    }
    Some(high)
}

/// The one-sided Wilson lower bound, at [`CONFIDENCE`], on an accuracy of
/// `correct` in `answered`; `None` when nothing was answered.
pub fn accuracy_bound(correct: u64, answered: u64) -> Option<f64> {
    if answered == 0 {
        return None;
    }
    let n = answered as f64;
    let p = correct as f64 / n;
    let z2 = Z * Z;
    let centre = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - spread) / (1.0 + z2 / n)).max(0.0))
}

/// How many more audits, if they find no error, bring the bound under
/// `target` (a share between 0 and 1, exclusive); `None` for a target
/// no number of audits reaches.
pub fn audits_to_reach(errors: u64, audited: u64, target: f64) -> Option<u64> {
    if !(target > 0.0 && target < 1.0) {
        return None;
    }
    let under = |more: u64| error_bound(errors, audited + more).is_some_and(|b| b < target);
    if under(0) {
        return Some(0);
    }
    // With k errors the bound is below target once n ≳ (k + 3) / target; far
    // past that, it is past what any session holds.
    let mut high = 1u64;
    while !under(high) {
        if high > 1 << 40 {
            return None;
        }
        high *= 2;
    }
    let mut low = high / 2;
    while low + 1 < high {
        let mid = low + (high - low) / 2;
        if under(mid) { high = mid } else { low = mid }
    }
    Some(high)
}

/// P(X ≤ k) for X ~ Binomial(n, p), as the regularised incomplete beta
/// function I_{1−p}(n − k, k + 1).
fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    incomplete_beta((n - k) as f64, (k + 1) as f64, 1.0 - p)
}

/// The regularised incomplete beta function I_x(a, b), by its continued
/// fraction (Lentz's method), on the side where it converges fast.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let tiny = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / tiny(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for m in 1..10_000 {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / tiny(1.0 + even * d);
        c = tiny(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / tiny(1.0 + odd * d);
        c = tiny(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms; about 15 digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[0] + (1..9).map(|i| G[i] / (x + i as f64)).sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(X ≤ k) summed term by term: a second way to the same figure.
    fn cdf_by_terms(k: u64, n: u64, p: f64) -> f64 {
        let mut term = (1.0 - p).powf(n as f64);
        let mut sum = term;
        for i in 0..k {
            term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
            sum += term;
        }
        sum
    }

    fn percent(x: Option<f64>) -> String {
        format!("{:.2}%", x.unwrap() * 100.0)
    }

    #[test]
    fn the_bound_reads_as_the_tables_give_it() {
        assert_eq!(percent(error_bound(0, 300)), "0.99%");
        assert_eq!(percent(error_bound(3, 300)), "2.56%");
        // With no error the bound has a closed form: 1 − 0.05^(1/n).
        let closed = 1.0 - 0.05f64.powf(1.0 / 300.0);
        assert!((error_bound(0, 300).unwrap() - closed).abs() < 1e-12);
        assert_eq!(error_bound(0, 0), None, "no audit: not measured, never 0");
        assert_eq!(error_bound(5, 5), Some(1.0));
    }

    #[test]
    fn at_the_bound_seeing_as_few_errors_has_the_probability_left_over() {
        for (k, n) in [(1, 20), (3, 300), (7, 150), (40, 1000), (0, 5)] {
            let p = error_bound(k, n).unwrap();
            let tail = cdf_by_terms(k, n, p);
            assert!(
                (tail - 0.05).abs() < 1e-9,
                "{k}/{n}: P(X ≤ {k}) = {tail} at {p}"
            );
            assert!(p > k as f64 / n as f64);
        }
    }

    #[test]
    fn the_accuracy_bound_is_wilsons() {
        // 18 of 20: p = 0.9; by hand, (0.9 + z²/40 − z·√(0.0045 + z²/1600)) / (1 + z²/20).
        let z2 = Z * Z;
        let by_hand = (0.9 + z2 / 40.0 - Z * (0.0045 + z2 / 1600.0).sqrt()) / (1.0 + z2 / 20.0);
        assert!((accuracy_bound(18, 20).unwrap() - by_hand).abs() < 1e-12);
        assert!((accuracy_bound(18, 20).unwrap() - 0.7383).abs() < 1e-4);
        assert_eq!(accuracy_bound(0, 0), None);
        assert!(accuracy_bound(0, 10).unwrap() == 0.0);
        assert!(
            accuracy_bound(10, 10).unwrap() < 1.0,
            "ten right answers prove less than 100%"
        );
    }

    #[test]
    fn the_audits_a_target_needs_are_the_fewest_that_reach_it() {
        let more = audits_to_reach(0, 100, 0.01).unwrap();
        assert!(error_bound(0, 100 + more).unwrap() < 0.01);
        assert!(error_bound(0, 100 + more - 1).unwrap() >= 0.01);
        assert_eq!(more, 299 - 100, "1 − 0.05^(1/n) < 1% from n = 299");
        assert_eq!(audits_to_reach(0, 300, 0.01), Some(0), "reached already");
        assert!(audits_to_reach(3, 300, 0.01).unwrap() > 300);
        assert_eq!(audits_to_reach(0, 10, 0.0), None);
    }

    #[test]
    fn a_target_says_how_many_more_audits_or_that_it_is_out_of_reach() {
        let clean = |audited, covered| {
            let audits = [Audits {
                stratum: Stratum::Gate,
                approved: audited,
                rejected: 0,
            }];
            let rows = Rows {
                covered,
                unaudited: covered - audited,
                ..Rows::default()
            };
            Quality::of(Some(0.1), &audits, rows)
        };
        let q = clean(100, 1000);
        assert_eq!(q.unaudited, 900);
        assert_eq!(
            q.plan(0.01),
            "199 more audits that find no error bring the bound under 1% (of 900 PASS rows not audited)"
        );
        assert!(
            clean(100, 250)
                .plan(0.01)
                .starts_with("unreachable: 199 more audits")
        );
        assert_eq!(clean(300, 1000).plan(0.01), "the bound is under 1% already");
        assert!(clean(0, 10).plan(0.0).starts_with("unreachable: no number"));
    }

    #[test]
    fn the_draw_is_fixed_near_its_rate_and_needs_the_key() {
        let session = SessionId::new();
        let key = session_key("server secret", session);
        let other = session_key("another server's secret", session);
        assert_ne!(
            key,
            session_key("server secret", SessionId::new()),
            "one key per session"
        );
        let quests: Vec<QuestId> = (0..4000).map(|_| QuestId::new()).collect();
        let hits = quests.iter().filter(|q| drawn(&key, **q, 0.25)).count();
        // 4000 draws at 0.25: mean 1000, sd ≈ 27; ±5 sd.
        assert!((865..=1135).contains(&hits), "{hits}");
        // The key is derived again after a restart: the same draws.
        let again = session_key("server secret", session);
        assert!(
            quests
                .iter()
                .all(|q| drawn(&key, *q, 0.25) == drawn(&again, *q, 0.25))
        );
        let same = quests
            .iter()
            .filter(|q| drawn(&key, **q, 0.25) == drawn(&other, **q, 0.25))
            .count();
        // Without the key a guess agrees as often as chance: 0.625 of the time.
        assert!((2300..=2700).contains(&same), "{same}");
        assert!(
            quests
                .iter()
                .all(|q| drawn(&key, *q, 1.0) && !drawn(&key, *q, 0.0))
        );
    }
}
