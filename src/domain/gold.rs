//! Known answers: gold items, whose right result the operator knows. Each
//! hand-out makes a new gold quest for one token, indistinguishable for the
//! agent from a real one; the gate decides it as usual, and how its answer
//! compares with the expected one is each token's score. This module holds
//! the rules: which assignment is gold (a keyed draw nobody outside the
//! server can predict), how a result is compared field by field, and the
//! score with its lower bound.

use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;
use utoipa::ToSchema;

use super::ids::{GoldItemId, QuestId, SessionId, TokenId};
use super::quality;

/// The name of the server secret the gold draws' keys derive from.
pub const GOLD_SECRET: &str = "gold";

/// The most gold items a session may hold.
pub const MAX_ITEMS: usize = 10_000;

/// What a known-answer item is: gold, whose right result the operator
/// knows, or a canary, for which no honest result can pass (a company with
/// no published address, a function that cannot be tested): a canary that
/// ends PASS pauses its token in every session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoldKind {
    #[default]
    Gold,
    Canary,
}

text_enum!(GoldKind { Gold => "gold", Canary => "canary" });

/// A canary that ended PASS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CanaryPass {
    pub quest_id: QuestId,
    pub item_id: GoldItemId,
    /// The token whose answer passed it (paused in every session since).
    pub token_id: TokenId,
    /// What passed it: `gate`, `verifiers` (the gate and the AI verifiers),
    /// or the reviewer (`reviewer:<name>` …) who approved it.
    pub decided_by: String,
    /// The token of the reviewer who approved it, if one did.
    pub reviewer_token: Option<TokenId>,
    pub passed_at: DateTime<Utc>,
}

/// A session's known-answer quests: how often `next` hands one out. A
/// session that has this section (even empty) can hold gold items, and all
/// its quest ids are random (UUID v4), so that no id tells when it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GoldConfig {
    /// The share of assignments, 0 to 1, that hand out a gold quest instead
    /// of the real one that was open: 0.05 when left out.
    #[serde(default = "default_rate")]
    pub rate: f64,
    /// Within a token's first `warmup` assignments in the session, at least
    /// one is gold (when it has gold items left): 0 to 100, 3 when left out.
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// The floor, 0 to 1, under which a token's accuracy may not be: once it
    /// has `min_answers` gold answers (since its last pause) and the lower
    /// bound on its accuracy is under it, the token is paused in the session
    /// (`unqualified`) and its PASSes from the gate alone since its first
    /// wrong gold answer are marked suspect. No floor when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_accuracy: Option<f64>,
    /// The gold answers a token gives before the floor applies: 1 to 10000,
    /// 10 when left out.
    #[serde(default = "default_min_answers")]
    pub min_answers: u32,
    /// Each PASS the floor marks suspect gets a label-only audit review (a
    /// person's approval clears the doubt, a rejection marks the quest
    /// `audit_rejected`; its state stays PASS either way). Off when left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub audit_suspects: bool,
    /// The share, 0 to 1, of gold quests that would pass that go to the
    /// review queue first, drawn and shown as a real quest's random audit
    /// is: each reviewer's decisions on them are its score. 0 when left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub review_rate: f64,
}

fn is_zero(rate: &f64) -> bool {
    *rate == 0.0
}

impl Default for GoldConfig {
    fn default() -> GoldConfig {
        GoldConfig {
            rate: default_rate(),
            warmup: default_warmup(),
            min_accuracy: None,
            min_answers: default_min_answers(),
            audit_suspects: false,
            review_rate: 0.0,
        }
    }
}

fn default_min_answers() -> u32 {
    10
}

fn default_rate() -> f64 {
    0.05
}

fn default_warmup() -> u32 {
    3
}

impl GoldConfig {
    /// Refuses settings out of range, naming the field.
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if !(0.0..=1.0).contains(&self.rate) {
            return Err(("config.gold.rate", "must be between 0 and 1"));
        }
        if self.warmup > 100 {
            return Err(("config.gold.warmup", "must be between 0 and 100"));
        }
        if self.min_accuracy.is_some_and(|m| !(0.0..=1.0).contains(&m)) {
            return Err(("config.gold.min_accuracy", "must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.review_rate) {
            return Err(("config.gold.review_rate", "must be between 0 and 1"));
        }
        if !(1..=10_000).contains(&self.min_answers) {
            return Err(("config.gold.min_answers", "must be between 1 and 10000"));
        }
        Ok(())
    }

    /// Whether a token with this score is under the session's floor.
    pub fn unqualified(&self, score: &Score) -> bool {
        self.min_accuracy.is_some_and(|floor| {
            score.answered >= u64::from(self.min_answers)
                && score.accuracy_lower_bound.unwrap_or(0.0) < floor
        })
    }
}

/// A session's gold key: HMAC-SHA256 of the server's gold secret and the
/// session's id. Neither is served.
pub fn session_key(server_secret: &str, session: SessionId) -> [u8; 32] {
    keyed(
        server_secret.as_bytes(),
        &[b"quest gold key\0", session.as_uuid().as_bytes()],
    )
}

/// Whether a token's assignment number `n` (0 for its first in the session)
/// is gold, when `golds` of its earlier assignments were. Within the
/// warm-up, one assignment drawn per token is gold, and the last of the
/// warm-up is when none was yet; past it, each is gold at `rate`. Each draw
/// is a keyed hash of the token and `n`: fixed, and unpredictable without
/// the session's key.
pub fn hands_out(key: &[u8; 32], config: &GoldConfig, token: TokenId, n: u64, golds: u64) -> bool {
    let warmup = u64::from(config.warmup);
    if n < warmup && golds == 0 {
        let slot = (unit(key, token, u64::MAX) * warmup as f64) as u64;
        if n >= slot.min(warmup - 1) {
            return true;
        }
    }
    config.rate > 0.0 && unit(key, token, n) < config.rate
}

/// A uniform number in [0, 1) from the key, the token and `n`.
fn unit(key: &[u8; 32], token: TokenId, n: u64) -> f64 {
    let digest = keyed(key, &[token.as_uuid().as_bytes(), &n.to_be_bytes()]);
    let mut head = [0; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) >> 11) as f64 / (1u64 << 53) as f64
}

fn keyed(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// How one field of a result is compared with the expected value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Rule {
    /// `"exact"` (the default: equal JSON once strings are trimmed and their
    /// inner runs of white space are one space), `"casefold"` (the same, and
    /// case does not matter), `"number"` (equal numbers; a string holding a
    /// number counts as that number), `"set"` (the same elements in any
    /// order; a string is split at commas).
    Named(RuleName),
    /// `{"number": tolerance}`: numbers no further apart than `tolerance`.
    Tolerance { number: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleName {
    Exact,
    Casefold,
    Number,
    Set,
}

/// Per field of the expected result, its rule; fields left out are `exact`.
pub type Compare = Map<String, Value>;

/// Refuses a comparison that names a rule nobody knows, or a field the
/// expected result lacks, or a negative tolerance.
pub fn check_compare(expected: &Map<String, Value>, compare: &Compare) -> Result<(), String> {
    for (field, rule) in compare {
        if !expected.contains_key(field) {
            return Err(format!(
                "compare names `{field}`, which the expected result does not have"
            ));
        }
        match serde_json::from_value::<Rule>(rule.clone()) {
            Ok(Rule::Tolerance { number }) if !(number >= 0.0 && number.is_finite()) => {
                return Err(format!(
                    "compare.{field}: a tolerance is a number of at least 0"
                ));
            }
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "compare.{field}: use \"exact\", \"casefold\", \"number\", \"set\" or {{\"number\": tolerance}}"
                ));
            }
        }
    }
    Ok(())
}

/// Whether `result` gives every expected field, each compared by its rule
/// (fields the result adds are not compared); the fields that differ.
pub fn compare(expected: &Map<String, Value>, rules: &Compare, result: &Value) -> Vec<String> {
    let empty = Map::new();
    let result = result.as_object().unwrap_or(&empty);
    expected
        .iter()
        .filter(|(field, want)| {
            let rule = rules
                .get(*field)
                .and_then(|r| serde_json::from_value::<Rule>(r.clone()).ok())
                .unwrap_or(Rule::Named(RuleName::Exact));
            !result
                .get(*field)
                .is_some_and(|got| matches(&rule, want, got))
        })
        .map(|(field, _)| field.clone())
        .collect()
}

fn matches(rule: &Rule, want: &Value, got: &Value) -> bool {
    match rule {
        Rule::Named(RuleName::Exact) => normal(want, false) == normal(got, false),
        Rule::Named(RuleName::Casefold) => normal(want, true) == normal(got, true),
        Rule::Named(RuleName::Number) => near(want, got, 0.0),
        Rule::Tolerance { number } => near(want, got, *number),
        Rule::Named(RuleName::Set) => {
            let (mut a, mut b) = (elements(want), elements(got));
            a.sort();
            a.dedup();
            b.sort();
            b.dedup();
            a == b
        }
    }
}

/// A value with its strings trimmed and their white space runs made one
/// space (and lower-cased when `fold`), as canonical JSON text.
fn normal(value: &Value, fold: bool) -> String {
    fn walk(value: &Value, fold: bool) -> Value {
        match value {
            Value::String(s) => Value::String(text(s, fold)),
            Value::Array(items) => Value::Array(items.iter().map(|v| walk(v, fold)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), walk(v, fold)))
                    .collect(),
            ),
            Value::Number(n) => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or_else(|| value.clone(), Value::Number),
            other => other.clone(),
        }
    }
    walk(value, fold).to_string()
}

fn text(s: &str, fold: bool) -> String {
    let words = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if fold { words.to_lowercase() } else { words }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

fn near(want: &Value, got: &Value, tolerance: f64) -> bool {
    match (number(want), number(got)) {
        (Some(a), Some(b)) => (a - b).abs() <= tolerance,
        _ => false,
    }
}

/// A set's members as normalised text: an array's elements, or a string's
/// comma-separated parts, or the value itself.
fn elements(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(|v| normal(v, false)).collect(),
        Value::String(s) => s
            .split(',')
            .map(|part| text(part, false))
            .filter(|part| !part.is_empty())
            .map(|part| Value::String(part).to_string())
            .collect(),
        other => vec![normal(other, false)],
    }
}

/// One token's answers to gold, and the one-sided 95% Wilson lower bound on
/// its accuracy (none before any answer).
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub answered: u64,
    pub correct: u64,
    pub accuracy_lower_bound: Option<f64>,
}

impl Score {
    pub fn of(answered: u64, correct: u64) -> Score {
        Score {
            answered,
            correct,
            accuracy_lower_bound: quality::accuracy_bound(correct, answered),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wrong(expected: Value, compare: Value, result: Value) -> Vec<String> {
        let expected = expected.as_object().unwrap().clone();
        let compare = compare.as_object().unwrap().clone();
        check_compare(&expected, &compare).unwrap();
        super::compare(&expected, &compare, &result)
    }

    #[test]
    fn exact_is_the_default_and_normalises_white_space_only() {
        let want = json!({"email": "Ann@Example.com", "n": 3});
        assert!(
            wrong(
                want.clone(),
                json!({}),
                json!({"email": "  Ann@Example.com ", "n": 3.0, "x": 1})
            )
            .is_empty()
        );
        assert_eq!(
            wrong(
                want.clone(),
                json!({}),
                json!({"email": "ann@example.com", "n": 3})
            ),
            ["email"]
        );
        assert_eq!(
            wrong(want.clone(), json!({}), json!({"email": "Ann@Example.com"})),
            ["n"]
        );
        assert_eq!(
            wrong(json!({"name": "a  b"}), json!({}), json!({"name": "a b"})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn casefold_number_tolerance_and_set() {
        let want =
            json!({"email": "Ann@Example.com", "revenue": 1000, "share": 0.5, "tags": ["a", "b"]});
        let rules = json!({"email": "casefold", "revenue": "number", "share": {"number": 0.01}, "tags": "set"});
        let good = json!({"email": "ann@EXAMPLE.com", "revenue": "1000", "share": 0.505, "tags": "b, a, a"});
        assert!(wrong(want.clone(), rules.clone(), good).is_empty());
        let bad =
            json!({"email": "bob@example.com", "revenue": 1001, "share": 0.52, "tags": ["a"]});
        assert_eq!(
            wrong(want, rules, bad),
            ["email", "revenue", "share", "tags"]
        );
    }

    #[test]
    fn a_comparison_names_known_rules_and_expected_fields() {
        let want = json!({"email": "a@b.c"}).as_object().unwrap().clone();
        for (compare, says) in [
            (json!({"phone": "exact"}), "does not have"),
            (json!({"email": "fuzzy"}), "use \"exact\""),
            (json!({"email": {"number": -1}}), "at least 0"),
        ] {
            let error = check_compare(&want, compare.as_object().unwrap()).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn the_warm_up_holds_one_gold_and_the_rate_holds_past_it() {
        let config = GoldConfig::default();
        let mut past = 0;
        let tokens = 400;
        for t in 0..tokens {
            let key = session_key("secret", SessionId::new());
            let token = TokenId::from(uuid::Uuid::from_u128(t));
            let mut golds = 0;
            for n in 0..config.warmup as u64 {
                if hands_out(&key, &config, token, n, golds) {
                    golds += 1;
                }
            }
            assert!(golds >= 1, "token {t} had no gold in its warm-up");
            for n in 3..103 {
                if hands_out(&key, &config, token, n, golds) {
                    past += 1;
                }
            }
        }
        // 40,000 draws at 0.05: 2,000 expected, sd ≈ 44; ±6 sd.
        assert!(
            (1_736..=2_264).contains(&past),
            "{past} gold past the warm-up"
        );
    }

    #[test]
    fn the_draw_depends_on_the_key() {
        let config = GoldConfig {
            rate: 0.5,
            warmup: 0,
            ..GoldConfig::default()
        };
        let token = TokenId::new();
        let session = SessionId::new();
        let (a, b) = (session_key("one", session), session_key("two", session));
        let draws = |key| {
            (0..64)
                .map(|n| hands_out(key, &config, token, n, 0))
                .collect::<Vec<_>>()
        };
        assert_ne!(draws(&a), draws(&b));
    }

    #[test]
    fn the_floor_applies_after_enough_answers() {
        let config = GoldConfig {
            min_accuracy: Some(0.8),
            min_answers: 10,
            ..GoldConfig::default()
        };
        assert!(
            !config.unqualified(&Score::of(9, 0)),
            "too few answers to judge"
        );
        assert!(config.unqualified(&Score::of(10, 7)));
        assert!(!config.unqualified(&Score::of(40, 40)));
        assert!(
            !GoldConfig::default().unqualified(&Score::of(100, 0)),
            "no floor"
        );
    }

    #[test]
    fn a_score_carries_its_bound() {
        assert_eq!(Score::of(0, 0).accuracy_lower_bound, None);
        let score = Score::of(20, 18);
        let bound = score.accuracy_lower_bound.unwrap();
        assert!(bound > 0.7 && bound < 0.9, "{bound}");
    }
}
