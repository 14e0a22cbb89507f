//! A session's configuration: the gate, the limits and the prompt, parsed and
//! checked once at scan time so that nothing later meets a nonsensical value.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::gold::GoldConfig;
use super::recheck::Every;
use super::verify::VerifyConfig;

/// The configuration a session is created with (the `config` part of a scan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionConfig {
    /// A human name; defaults to the uploaded file's name.
    #[serde(default)]
    pub name: Option<String>,
    /// The column whose cell names each quest; defaults to the first column.
    #[serde(default)]
    pub key_column: Option<String>,
    /// The XLSX sheet to read; defaults to the first.
    #[serde(default)]
    pub sheet: Option<String>,
    /// Accept a table whose key column repeats a key (refused by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_duplicate_keys: bool,
    /// The gate that decides every submission.
    pub gate: GateConfig,
    /// FAILs after which a quest ends in DONE.
    #[serde(default = "default_max_tries")]
    pub max_tries: u32,
    /// Lease expiries after which a quest ends in DONE.
    #[serde(default = "default_max_lapses")]
    pub max_lapses: u32,
    /// How many quests in a row that a token held may end DONE (out of
    /// tries or lapsed) before the token is paused in the session, 0 to
    /// 10000; 0 turns pauses off.
    #[serde(default = "default_max_consecutive_done")]
    pub max_consecutive_done: u32,
    /// How long a lease lasts without a heartbeat, 1 to 86400.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u32,
    /// The longest one lease may be held, however often a heartbeat or `next`
    /// renews it: `lease_seconds` to 2592000 (30 days), ten times
    /// `lease_seconds` when left out. Then it lapses like an expired lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_seconds: Option<u32>,
    /// The largest result an agent may submit, in bytes of compact JSON:
    /// 1 to 1048576 (1 MiB), 262144 (256 KiB) when left out. Past it a
    /// submission is refused with 413 `result_too_large`.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: u32,
    /// What the agent is told.
    #[serde(default)]
    pub prompt: PromptConfig,
    /// AI verifiers (L2) that look at every L1 PASS and may only raise doubt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyConfig>,
    /// Re-checks of the PASS quests on a schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck: Option<RecheckConfig>,
    /// How people decide the quests in REVIEW.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewConfig>,
    /// The random audit that bounds the error of the delivered rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditConfig>,
    /// Known-answer (gold) quests that measure every agent. A session made
    /// with this section can be given gold items, and its quest ids are random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold: Option<GoldConfig>,
}

/// A session's random audit: a share of the quests that would become PASS
/// (after the AI verifiers, if any) go to a person first, and what people
/// find in them bounds how many of the delivered rows are wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// The share drawn, 0 to 1. Each quest's draw is a keyed hash of its id
    /// under a per-session key that is never served: fixed for the quest,
    /// and unpredictable from anything an agent can read.
    /// `verify.audit_rate` is an older name of the same setting.
    pub rate: f64,
}

/// How people decide a session's quests in REVIEW.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewConfig {
    /// How long a decision made with the review page's keys waits before it
    /// is recorded, so that `z` can undo it: 0 to 600 seconds, 5 when left
    /// out; 0 records it at once. The API, the CLI and the page's forms
    /// without JavaScript always decide at once.
    #[serde(default = "default_undo_seconds")]
    pub undo_seconds: u32,
    /// How many reviewers give a quest in REVIEW their first look, 1 to 10:
    /// that many agreeing decisions from distinct tokens decide it, and any
    /// disagreement leaves it to an adjudicator (an admin token, or a
    /// reviewer token made with `adjudicate`). 1 when left out.
    #[serde(default = "default_reviewers")]
    pub reviewers: u32,
    /// With `reviewers` above 1: the share of quests in REVIEW (0 to 1)
    /// that get the extra looks; the others need one. Drawn once per quest
    /// from a keyed hash of a server secret, so that nobody can tell from a
    /// quest's id which ones; stored on the quest. Every quest when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_rate: Option<f64>,
}

fn default_reviewers() -> u32 {
    1
}

/// The undo window of a session whose config says nothing.
pub const DEFAULT_UNDO_SECONDS: u32 = 5;
/// The longest undo window a session may ask for.
pub const MAX_UNDO_SECONDS: u32 = 600;

fn default_undo_seconds() -> u32 {
    DEFAULT_UNDO_SECONDS
}

/// When a session's PASS quests are re-checked against the world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecheckConfig {
    /// How often: a number and a unit, `h`, `d` or `w` (e.g. `"7d"`).
    pub every: String,
}

impl RecheckConfig {
    /// The parsed schedule (checked at scan time).
    pub fn every(&self) -> Option<Every> {
        Every::parse(&self.every).ok()
    }
}

/// The gate of a session: its kind and that kind's own parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GateConfig {
    /// The gate's name in the registry, e.g. `schema`.
    pub kind: String,
    /// Parameters of that gate kind (for `schema`: `schema`, `deny`, `review_when`).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub params: Map<String, Value>,
}

/// The agent's task text and worked examples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptConfig {
    #[serde(default)]
    pub instructions: String,
    #[serde(default)]
    pub examples: Vec<Example>,
}

/// One example of a correct result for an input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Example {
    #[schema(value_type = Object)]
    pub input: Value,
    #[schema(value_type = Object)]
    pub result: Value,
}

fn default_max_tries() -> u32 {
    3
}
fn default_max_lapses() -> u32 {
    3
}
fn default_max_consecutive_done() -> u32 {
    crate::domain::pause::DEFAULT_MAX_CONSECUTIVE_DONE
}
fn default_lease_seconds() -> u32 {
    300
}
fn default_max_result_bytes() -> u32 {
    DEFAULT_MAX_RESULT_BYTES
}

/// The longest hold a session may allow (30 days).
pub const MAX_HOLD_SECONDS: u32 = 30 * 86_400;

/// The largest result a session accepts when its config says nothing.
pub const DEFAULT_MAX_RESULT_BYTES: u32 = 256 * 1024;
/// The most a session's `max_result_bytes` may allow.
pub const MAX_RESULT_BYTES: u32 = 1024 * 1024;

/// A configuration that is well-formed JSON but says something impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: &'static str,
    pub message: String,
}

impl SessionConfig {
    /// The longest a lease may be held: as configured, else (a session made
    /// before the setting existed) ten times `lease_seconds`.
    pub fn max_hold_seconds(&self) -> u32 {
        self.max_hold_seconds
            .unwrap_or_else(|| self.lease_seconds.saturating_mul(10))
    }

    /// How long a keyboard decision on the review page waits, undoable.
    pub fn undo_seconds(&self) -> u32 {
        self.review
            .as_ref()
            .map_or(DEFAULT_UNDO_SECONDS, |r| r.undo_seconds)
    }

    /// The share of would-be PASS quests drawn for an audit: `audit.rate`,
    /// or its older name `verify.audit_rate`.
    pub fn audit_rate(&self) -> Option<f64> {
        let alias = || self.verify.as_ref().and_then(|v| v.audit_rate);
        self.audit.as_ref().map(|a| a.rate).or_else(alias)
    }

    /// The random audit of a would-be PASS quest: the rate it is drawn at
    /// and the rate its fact names. A gold quest (`companion`: its session
    /// is a gold companion) is drawn at `gold.review_rate`, and its fact
    /// names the session's own `audit.rate` (the review rate when it has
    /// none), so that a reviewer cannot tell it from a real audit.
    pub fn audit_draw(&self, companion: bool) -> Option<(f64, f64)> {
        if !companion {
            return self.audit_rate().map(|rate| (rate, rate));
        }
        let rate = self.gold.as_ref().map_or(0.0, |g| g.review_rate);
        (rate > 0.0).then(|| (rate, self.audit_rate().unwrap_or(rate)))
    }

    /// How many reviewers' first looks a quest in REVIEW needs.
    pub fn reviewers(&self) -> u32 {
        self.review.as_ref().map_or(1, |r| r.reviewers)
    }

    /// Parses and checks a configuration value.
    pub fn parse(value: Value) -> Result<SessionConfig, ConfigError> {
        // The path names the offending field: `config.max_tries: invalid type ...`.
        let mut config: SessionConfig =
            serde_path_to_error::deserialize(value).map_err(|e| ConfigError {
                field: "config",
                message: match e.path().to_string().as_str() {
                    "." => e.inner().to_string(),
                    path => format!("{path}: {}", e.inner()),
                },
            })?;
        let bad = |field, message: &str| {
            Err(ConfigError {
                field,
                message: message.to_owned(),
            })
        };
        if config.max_tries == 0 || config.max_tries > 1000 {
            return bad("config.max_tries", "must be between 1 and 1000");
        }
        if config.max_lapses == 0 || config.max_lapses > 1000 {
            return bad("config.max_lapses", "must be between 1 and 1000");
        }
        if config.max_consecutive_done > crate::domain::pause::MAX_MAX_CONSECUTIVE_DONE {
            return bad(
                "config.max_consecutive_done",
                "must be between 0 (no pauses) and 10000",
            );
        }
        if !(1..=86_400).contains(&config.lease_seconds) {
            return bad("config.lease_seconds", "must be between 1 and 86400");
        }
        let hold = config.max_hold_seconds();
        if !(config.lease_seconds..=MAX_HOLD_SECONDS).contains(&hold) {
            return bad(
                "config.max_hold_seconds",
                "must be between lease_seconds and 2592000 (30 days); leave it out for ten times lease_seconds",
            );
        }
        // Said as it applies, so that the session shows it.
        config.max_hold_seconds = Some(hold);
        if !(1..=MAX_RESULT_BYTES).contains(&config.max_result_bytes) {
            return bad(
                "config.max_result_bytes",
                "must be between 1 and 1048576 (1 MiB)",
            );
        }
        if config.gate.kind.trim().is_empty() {
            return bad("config.gate.kind", "name a gate, e.g. \"schema\"");
        }
        config.verify = config.verify.map(VerifyConfig::check).transpose()?;
        if let Some(recheck) = &config.recheck {
            Every::parse(&recheck.every).map_err(|message| ConfigError {
                field: "config.recheck.every",
                message,
            })?;
        }
        if config.undo_seconds() > MAX_UNDO_SECONDS {
            return bad(
                "config.review.undo_seconds",
                "must be between 0 (decide at once) and 600",
            );
        }
        if !(1..=crate::domain::review::MAX_REVIEWERS).contains(&config.reviewers()) {
            return bad("config.review.reviewers", "must be between 1 and 10");
        }
        if let Some(audit) = &config.audit {
            if !(0.0..=1.0).contains(&audit.rate) {
                return bad("config.audit.rate", "must be between 0 and 1");
            }
            let alias = config.verify.as_ref().and_then(|v| v.audit_rate);
            if alias.is_some_and(|rate| rate != audit.rate) {
                return bad(
                    "config.audit.rate",
                    "and verify.audit_rate (its older name) disagree: set audit.rate only",
                );
            }
        }
        if let Some(Err((field, message))) = config.gold.as_ref().map(GoldConfig::check) {
            return bad(field, message);
        }
        if config.gold.as_ref().is_some_and(|g| g.review_rate > 0.0)
            && config.audit_rate().is_none()
        {
            return bad(
                "config.gold.review_rate",
                "sends gold quests to review as random audits, so it needs audit.rate too (say \
                 0.02): without real audits, a reviewer would know every audit is gold",
            );
        }
        if let Some(rate) = config.review.as_ref().and_then(|r| r.overlap_rate) {
            if !(0.0..=1.0).contains(&rate) {
                return bad("config.review.overlap_rate", "must be between 0 and 1");
            }
            if config.reviewers() < 2 {
                return bad(
                    "config.review.overlap_rate",
                    "asks for extra looks on a share of quests: set review.reviewers above 1 too",
                );
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_the_limits() {
        let c = SessionConfig::parse(json!({"gate": {"kind": "schema", "schema": {}}})).unwrap();
        assert_eq!((c.max_tries, c.max_lapses, c.lease_seconds), (3, 3, 300));
        assert_eq!(
            c.max_hold_seconds,
            Some(3000),
            "ten leases, said as it applies"
        );
        assert_eq!(c.max_result_bytes, 256 * 1024);
        assert_eq!(c.gate.params["schema"], json!({}));
        assert_eq!(c.recheck, None);
        assert_eq!(
            c.undo_seconds(),
            5,
            "five seconds to undo a keyboard decision"
        );
        let c = SessionConfig::parse(
            json!({"gate": {"kind": "schema"}, "review": {"undo_seconds": 0}}),
        )
        .unwrap();
        assert_eq!(c.undo_seconds(), 0, "0 decides at once");
        assert_eq!(c.reviewers(), 1, "one reviewer when left out");
        let c =
            SessionConfig::parse(json!({"gate": {"kind": "schema"}, "recheck": {"every": "7d"}}))
                .unwrap();
        assert_eq!(
            c.recheck.unwrap().every().unwrap().duration().as_secs(),
            7 * 86_400
        );
    }

    #[test]
    fn impossible_limits_and_unknown_fields_are_refused() {
        for (config, field) in [
            (
                json!({"gate": {"kind": "schema"}, "max_tries": 0}),
                "config.max_tries",
            ),
            (
                json!({"gate": {"kind": "schema"}, "lease_seconds": 86401}),
                "config.lease_seconds",
            ),
            (json!({"gate": {"kind": ""}}), "config.gate.kind"),
            (
                json!({"gate": {"kind": "schema"}, "lease_seconds": 60, "max_hold_seconds": 59}),
                "config.max_hold_seconds",
            ),
            (
                json!({"gate": {"kind": "schema"}, "max_hold_seconds": 2_592_001}),
                "config.max_hold_seconds",
            ),
            (
                json!({"gate": {"kind": "schema"}, "max_result_bytes": 1_048_577}),
                "config.max_result_bytes",
            ),
            (
                json!({"gate": {"kind": "schema"}, "verify": {"verifiers": []}}),
                "config.verify.verifiers",
            ),
            (
                json!({"gate": {"kind": "schema"}, "recheck": {"every": "7 days"}}),
                "config.recheck.every",
            ),
            (
                json!({"gate": {"kind": "schema"}, "review": {"undo_seconds": 601}}),
                "config.review.undo_seconds",
            ),
            (
                json!({"gate": {"kind": "schema"}, "gold": {"review_rate": 0.2}}),
                "config.gold.review_rate",
            ),
            (
                json!({"gate": {"kind": "schema"}, "gold": {"review_rate": 1.5}, "audit": {"rate": 0.1}}),
                "config.gold.review_rate",
            ),
            (
                json!({"gate": {"kind": "schema"}, "review": {"reviewers": 0}}),
                "config.review.reviewers",
            ),
            (
                json!({"gate": {"kind": "schema"}, "review": {"overlap_rate": 0.5}}),
                "config.review.overlap_rate",
            ),
            (
                json!({"gate": {"kind": "schema"}, "review": {"reviewers": 2, "overlap_rate": 1.5}}),
                "config.review.overlap_rate",
            ),
            (
                json!({"gate": {"kind": "schema"}, "audit": {"rate": -0.5}}),
                "config.audit.rate",
            ),
            (
                json!({"gate": {"kind": "schema"}, "audit": {"rate": 0.2},
                       "verify": {"verifiers": ["a"], "questions": ["q?"], "audit_rate": 0.3}}),
                "config.audit.rate",
            ),
        ] {
            assert_eq!(SessionConfig::parse(config).unwrap_err().field, field);
        }
        let alias = json!({"gate": {"kind": "schema"},
                           "verify": {"verifiers": ["a"], "questions": ["q?"], "audit_rate": 0.3}});
        assert_eq!(
            SessionConfig::parse(alias).unwrap().audit_rate(),
            Some(0.3),
            "the older name"
        );
        let both = json!({"gate": {"kind": "schema"}, "audit": {"rate": 0.3},
                          "verify": {"verifiers": ["a"], "questions": ["q?"], "audit_rate": 0.3}});
        assert_eq!(SessionConfig::parse(both).unwrap().audit_rate(), Some(0.3));
        let typo =
            SessionConfig::parse(json!({"gate": {"kind": "schema"}, "max_trys": 2})).unwrap_err();
        assert!(typo.message.contains("max_trys"), "{typo}");
        assert!(
            SessionConfig::parse(json!({"max_tries": 2})).is_err(),
            "gate is required"
        );
    }
}
