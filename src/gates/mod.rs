//! Gates: the deterministic checkers that turn one submission into a verdict,
//! facts and evidence. A [`GateRegistry`] builds a session's gate from its
//! `config.gate` by kind; each gate kind lives in its own file. The
//! [`Checker`] is the one use case that runs them, for the service, the gate
//! runner and the re-checker alike.
//!
//! Gates never touch the store (the checker reads for them what they need of
//! it); what they ask the outside world goes through injected traits
//! ([`fetch::Fetcher`], [`dns::Resolver`]) so that tests can run them offline.
//!
//! Each gate also says which result fields it *declares* (the only ones AI
//! verifiers may see, so that free text an agent adds never reaches them) and
//! may ship default questions for those verifiers.
//!
//! A gate may also name result fields whose value should belong to one quest
//! of a session only ([`Gate::unique_fields`]); the [`Checker`] looks up which
//! other quests hold the same value and hands that to the check as a
//! [`SessionView`], so that the gate stays free of the store.

pub mod checker;
pub mod command;
pub mod dns;
pub mod email;
pub mod fetch;
mod recent_gates;
pub mod schema;

pub use checker::{Check, Checker};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use self::fetch::PageCache;
use crate::config::CommandGateConfig;
use crate::domain::prompt::FieldShape;
use crate::domain::session::{Example, GateConfig};
use crate::domain::verify::Question;
use crate::domain::{Fact, Verdict, text};
use crate::process::ProcessRunner;

/// What a gate decided about one submission.
#[derive(Debug, Clone, PartialEq)]
pub struct GateOutcome {
    pub verdict: Verdict,
    pub facts: Vec<Fact>,
    /// What the gate observed in the world to decide (URLs, statuses, digests, snippets).
    pub evidence: Vec<Value>,
}

impl GateOutcome {
    /// Folds checks into one outcome: FAIL if any failed, else REVIEW if any asked
    /// for review, else PASS. Every fact is kept.
    pub fn from_checks(checks: impl IntoIterator<Item = (Verdict, Option<Fact>)>) -> GateOutcome {
        let mut verdict = Verdict::Pass;
        let mut facts = Vec::new();
        for (v, fact) in checks {
            verdict = verdict.combine(v);
            facts.extend(fact);
        }
        GateOutcome {
            verdict,
            facts,
            evidence: Vec::new(),
        }
    }

    /// The outcome as the store may keep it, whatever the gate or the world
    /// gave back: every NUL in its facts and evidence replaced by U+FFFD
    /// (with a first fact saying so), at most [`text::MAX_FACTS`] facts (the
    /// last saying how many more), each part of a fact cut to
    /// [`text::MAX_FACT_CHARS`] characters and each evidence item to
    /// [`text::MAX_EVIDENCE_BYTES`]. The verdict is the gate's, decided on
    /// every fact before the cut. Idempotent: a bounded outcome is its own
    /// bound, so that a retry may clean again.
    pub fn bounded(self) -> GateOutcome {
        let GateOutcome {
            verdict,
            mut facts,
            mut evidence,
        } = self;
        let mut replaced = false;
        for fact in &mut facts {
            replaced |= text::clean_fact(fact);
        }
        for item in &mut evidence {
            replaced |= text::clean_value(item);
        }
        if replaced {
            facts.insert(0, text::nul_replaced_fact());
        }
        let facts = text::cap_facts(facts)
            .into_iter()
            .map(|f| match text::cut_fact(&f) {
                std::borrow::Cow::Borrowed(_) => f,
                std::borrow::Cow::Owned(cut) => cut,
            })
            .collect();
        GateOutcome {
            verdict,
            facts,
            evidence: evidence.into_iter().map(text::bound_evidence).collect(),
        }
    }
}

/// What a gate may know beyond the submission when it checks a result: the
/// quest's key and what the rest of its session holds.
///
/// The session's state is part of the world a verdict depends on: the same
/// submission checked against the same view gets the same verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionView {
    /// The quest's key: the cell of the session's key column (for the email
    /// gate, the company's name). Empty when unknown.
    pub key: String,
    /// For each field the gate names in [`Gate::unique_fields`] that the
    /// result holds as a string: the keys of the session's *other* quests
    /// whose result holds the same value (ASCII letter case ignored), in
    /// upload order and at most [`HOLDERS_SHOWN`]. A result counts while it
    /// is accepted (PASS), awaiting a decision (REVIEW, the AI verifiers) or
    /// still being checked; not after a FAIL or a rejection. Always empty
    /// in a re-check of an accepted result, which asks the world only.
    pub holders: BTreeMap<String, Vec<String>>,
}

/// How many other quests a [`SessionView`] names for one value.
pub const HOLDERS_SHOWN: usize = 5;

impl SessionView {
    /// A view in which no other quest holds anything (a session of one quest).
    pub fn alone() -> SessionView {
        SessionView::default()
    }

    /// The view of the quest keyed `key` in a session where no other quest holds anything.
    pub fn of_key(key: impl Into<String>) -> SessionView {
        SessionView {
            key: key.into(),
            ..SessionView::default()
        }
    }

    /// The other quests holding the same `field` value.
    pub fn holders_of(&self, field: &str) -> &[String] {
        self.holders.get(field).map_or(&[], Vec::as_slice)
    }
}

/// A gate's default task text and example, used where a session's prompt
/// leaves them out, and the result's shape, stated when no example shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GatePrompt {
    pub task: String,
    pub example: Option<Example>,
    pub shape: Vec<FieldShape>,
}

/// A deterministic checker with a stable name and version.
#[async_trait]
pub trait Gate: Send + Sync {
    /// What an agent is told when the session says nothing.
    fn default_prompt(&self) -> GatePrompt {
        GatePrompt {
            task: "Produce the result for the input below as a JSON object.".into(),
            example: None,
            shape: self
                .declared_fields()
                .iter()
                .map(|f| FieldShape::any(f))
                .collect(),
        }
    }

    /// The kind name sessions use to pick this gate.
    fn name(&self) -> &'static str;
    /// Changes whenever the gate could decide the same submission differently.
    fn version(&self) -> &str;
    /// Checks one result for one quest input, knowing what `session` says about
    /// the other quests. Runs every check, so the agent gets all facts at once.
    async fn check(&self, input: &Value, result: &Value, session: &SessionView) -> GateOutcome;

    /// Top-level result fields whose value should belong to one quest of a
    /// session only; the [`Checker`] fills [`SessionView::holders`] for them.
    fn unique_fields(&self) -> Vec<String> {
        Vec::new()
    }

    /// The top-level result fields this gate declares. Only these reach AI
    /// verifiers; a gate that declares none cannot be verified.
    fn declared_fields(&self) -> Vec<String> {
        Vec::new()
    }

    /// The part of an accepted `result` an AI verifier may see: its declared
    /// fields and nothing else, whatever else the agent sent. This default
    /// keeps whole top-level fields, whatever is nested inside them; a gate
    /// that knows the shape below (the schema gate) projects deeper.
    fn artifact(&self, result: &Value) -> Value {
        let declared = self.declared_fields();
        let kept = result
            .as_object()
            .map(|fields| {
                fields
                    .iter()
                    .filter(|(k, _)| declared.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Value::Object(kept)
    }

    /// Columns of the input row this gate's parameters name; a scan whose
    /// table lacks one is refused.
    fn input_columns(&self) -> Vec<String> {
        Vec::new()
    }

    /// Questions asked by AI verifiers when a session names verifiers but no questions.
    fn default_questions(&self) -> Vec<Question> {
        Vec::new()
    }

    /// How long one check may take before its verdict is REVIEW. `None`: the
    /// server's gate timeout (`QUEST_GATE_TIMEOUT_SECONDS`). A gate that
    /// declares its own deadline (a command gate's `timeout_ms`) answers it here,
    /// so that the global one neither cuts it short nor stretches it.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether the gate decides at once and asks nothing of the world (no
    /// network, no process, no store). Such a gate runs inside the submit
    /// request, and its verdict is recorded together with the submission; a
    /// gate that does I/O runs on the gate runner after a durable PENDING
    /// record, so that a crash in the middle of a check loses nothing.
    fn decides_at_once(&self) -> bool {
        false
    }
}

/// A gate configuration that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config.gate{}: {message}", if field.is_empty() { String::new() } else { format!(".{field}") })]
pub struct GateConfigError {
    pub field: String,
    pub message: String,
}

impl GateConfigError {
    /// An error about the gate parameter `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        GateConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

type Factory = Box<
    dyn Fn(&Map<String, Value>, &Arc<PageCache>) -> Result<Arc<dyn Gate>, GateConfigError>
        + Send
        + Sync,
>;

/// Builds gates by kind.
pub struct GateRegistry {
    factories: HashMap<&'static str, Factory>,
    /// The page cache the gates of submissions read pages through.
    pages: Arc<PageCache>,
}

impl GateRegistry {
    /// A registry with every gate this build ships and no command gate
    /// declared; the email gate reaches the web and DNS through `world`.
    pub fn with_builtin_gates(world: email::EmailWorld) -> Self {
        GateRegistry::with_operator_gates(
            world,
            &[],
            Arc::new(crate::process::SystemProcessRunner::default()),
        )
    }

    /// The built-in gates plus the command gates the operator's configuration
    /// declares; sessions pick one with `{"kind": "command", "name": ...}`.
    pub fn with_operator_gates(
        world: email::EmailWorld,
        gates: &[CommandGateConfig],
        runner: Arc<dyn ProcessRunner>,
    ) -> Self {
        let mut registry = GateRegistry {
            factories: HashMap::new(),
            pages: world.pages.clone(),
        };
        registry.register(schema::KIND, |params, _| {
            Ok(Arc::new(schema::SchemaGate::from_params(params)?))
        });
        registry.register(email::KIND, move |params, pages| {
            let world = email::EmailWorld {
                pages: pages.clone(),
                ..world.clone()
            };
            Ok(Arc::new(email::EmailGate::from_params(params, &world)?))
        });
        let declared: HashMap<String, Arc<command::CommandGate>> = gates
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    Arc::new(command::CommandGate::new(g.clone(), runner.clone())),
                )
            })
            .collect();
        registry.register(command::KIND, move |params, _| {
            command::pick(&declared, params)
        });
        registry
    }

    /// Adds (or replaces) the factory for `kind`: it builds a gate from its
    /// parameters, reading pages (if it reads any) through the cache given.
    pub fn register(
        &mut self,
        kind: &'static str,
        factory: impl Fn(&Map<String, Value>, &Arc<PageCache>) -> Result<Arc<dyn Gate>, GateConfigError>
        + Send
        + Sync
        + 'static,
    ) {
        self.factories.insert(kind, Box::new(factory));
    }

    /// Builds the gate a session's config names, or says what is wrong with
    /// it; it reads pages through the submissions' page cache.
    pub fn build(&self, config: &GateConfig) -> Result<Arc<dyn Gate>, GateConfigError> {
        self.build_with(config, &self.pages)
    }

    /// An empty page cache like the submissions' one (the same budget and
    /// clock) and apart from it: a re-check run's, so that a re-check asks
    /// the world again instead of reading what a submission's check saw.
    pub fn fresh_pages(&self) -> Arc<PageCache> {
        Arc::new(self.pages.empty_like())
    }

    /// [`GateRegistry::build`], reading pages through `pages`.
    pub fn build_with(
        &self,
        config: &GateConfig,
        pages: &Arc<PageCache>,
    ) -> Result<Arc<dyn Gate>, GateConfigError> {
        let factory = self.factories.get(config.kind.as_str()).ok_or_else(|| {
            let mut kinds: Vec<_> = self.factories.keys().copied().collect();
            kinds.sort_unstable();
            GateConfigError::new(
                "kind",
                format!(
                    "unknown gate `{}`; this server has: {}",
                    config.kind,
                    kinds.join(", ")
                ),
            )
        })?;
        factory(&config.params, pages)
    }
}

impl std::fmt::Debug for GateRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateRegistry")
            .field("kinds", &self.factories.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn offline_registry() -> GateRegistry {
        GateRegistry::with_builtin_gates(email::EmailWorld::new(
            Arc::new(crate::testing::FakeFetcher::new()),
            Arc::new(crate::testing::FakeResolver::new()),
        ))
    }

    #[test]
    fn an_unknown_kind_lists_the_known_ones() {
        let config: GateConfig = serde_json::from_value(json!({"kind": "nope"})).unwrap();
        let err = offline_registry().build(&config).err().unwrap();
        assert_eq!(err.field, "kind");
        assert!(err.to_string().contains("email, schema"), "{err}");
    }

    #[test]
    fn the_email_gate_is_built_from_its_parameters() {
        let build = |gate: Value| {
            let config: GateConfig = serde_json::from_value(gate).unwrap();
            offline_registry().build(&config)
        };
        let gate = build(json!({"kind": "email", "freemail": ["mailbox.test"]})).unwrap();
        assert_eq!((gate.name(), gate.version()), ("email", "2"));
        let err = build(json!({"kind": "email", "blacklist": ["a b"]}))
            .err()
            .unwrap();
        assert_eq!(err.field, "blacklist[0]");
        let err = build(json!({"kind": "email", "freemails": []}))
            .err()
            .unwrap();
        assert!(err.message.contains("freemail"), "{err}");
    }

    #[test]
    fn a_command_gate_must_be_one_the_server_declares() {
        let registry = offline_registry();
        let config: GateConfig =
            serde_json::from_value(json!({"kind": "command", "name": "coverage"})).unwrap();
        let err = registry.build(&config).err().unwrap();
        assert_eq!(err.field, "name");
        assert!(err.message.contains("declares no command gates"), "{err}");
    }

    #[test]
    fn the_unique_fields_of_the_builtin_gates_are_plain_names_the_store_looks_up() {
        let registry = offline_registry();
        for gate in [
            json!({"kind": "email"}),
            json!({"kind": "schema", "schema": {"type": "object"}}),
        ] {
            let config: GateConfig = serde_json::from_value(gate).unwrap();
            let gate = registry.build(&config).unwrap();
            for field in gate.unique_fields() {
                assert!(crate::store::is_plain_field(&field), "{field}");
            }
        }
        assert!(!crate::store::is_plain_field("email') --"));
        assert!(!crate::store::is_plain_field(""));
    }

    #[test]
    fn outcomes_fold_fail_over_review_and_keep_every_fact() {
        let fact = |c: &str| Some(Fact::new(c, "", "", "", ""));
        let o = GateOutcome::from_checks([
            (Verdict::Review, fact("a")),
            (Verdict::Fail, fact("b")),
            (Verdict::Pass, None),
        ]);
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.facts.len(), 2);
        assert_eq!(GateOutcome::from_checks([]).verdict, Verdict::Pass);
    }

    #[test]
    fn a_bounded_outcome_keeps_its_verdict_fifty_facts_and_clean_text_and_bounds_again_to_itself() {
        let mut facts: Vec<Fact> = (0..200)
            .map(|i| {
                Fact::new(
                    "schema",
                    format!("/items/{i}"),
                    "a string",
                    "x".repeat(3000),
                    "",
                )
            })
            .collect();
        facts[3].actual = "stderr: \u{0}boom".into();
        let outcome = GateOutcome {
            verdict: Verdict::Fail,
            facts,
            evidence: vec![json!({"snippet": format!("a\u{0}{}", "b".repeat(40_000))})],
        };
        let bounded = outcome.bounded();
        assert_eq!(bounded.verdict, Verdict::Fail);
        assert_eq!(bounded.facts.len(), text::MAX_FACTS);
        assert_eq!(bounded.facts[0], text::nul_replaced_fact());
        assert_eq!(bounded.facts[4].actual, "stderr: \u{FFFD}boom");
        assert_eq!(bounded.facts[49].actual, "152 more not shown");
        assert!(
            bounded
                .facts
                .iter()
                .all(|f| f.actual.chars().count() <= text::MAX_FACT_CHARS)
        );
        assert!(text::json_len(&bounded.evidence[0]) <= text::MAX_EVIDENCE_BYTES);
        assert!(
            bounded.evidence[0]["snippet"]
                .as_str()
                .unwrap()
                .starts_with("a\u{FFFD}b")
        );
        assert_eq!(bounded.clone().bounded(), bounded);
    }
}
