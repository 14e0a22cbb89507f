//! The `schema` gate: the result must validate against the session's JSON Schema;
//! `deny` rules name values that FAIL and `review_when` rules name grey zones
//! that go to a human (unless something already failed).

use async_trait::async_trait;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Gate, GateConfigError, GateOutcome, GatePrompt, SessionView};
use crate::domain::prompt::FieldShape;
use crate::domain::session::Example;
use crate::domain::table::cell_as_text;
use crate::domain::verify::{Question, injection_question};
use crate::domain::{Fact, Verdict};

/// The registry name of this gate.
pub const KIND: &str = "schema";

/// A result-checking gate built from a JSON Schema and pattern rules.
pub struct SchemaGate {
    schema: Value,
    validator: jsonschema::Validator,
    deny: Vec<Rule>,
    review_when: Vec<Rule>,
}

/// A pattern over the value at a JSON pointer of the result.
#[derive(Debug)]
struct Rule {
    pointer: String,
    pattern: Regex,
    hint: Option<String>,
}

/// A rule over one value of the result: where it is and the pattern it is matched against.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = GateRule)]
pub(crate) struct RuleParams {
    /// A JSON pointer into the result, e.g. `/email`.
    pointer: String,
    /// A regular expression matched against the value's text.
    pattern: String,
    /// What the agent is told when the rule matches.
    #[serde(default)]
    hint: Option<String>,
}

/// The parameters of the `schema` gate.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SchemaGateConfig)]
pub(crate) struct Params {
    /// The JSON Schema every result must satisfy.
    #[schema(value_type = Object)]
    schema: Value,
    /// Values that FAIL when they match, with a hint.
    #[serde(default)]
    deny: Vec<RuleParams>,
    /// Values that send the quest to a person when they match.
    #[serde(default)]
    review_when: Vec<RuleParams>,
}

impl SchemaGate {
    /// Builds the gate from `config.gate`'s parameters, refusing a schema or
    /// pattern that does not compile.
    pub fn from_params(params: &Map<String, Value>) -> Result<SchemaGate, GateConfigError> {
        let params: Params =
            serde_json::from_value(Value::Object(params.clone())).map_err(|e| {
                GateConfigError::new(
                    "",
                    format!("{e}; the schema gate takes `schema`, `deny` and `review_when`"),
                )
            })?;
        let validator = jsonschema::validator_for(&params.schema)
            .map_err(|e| GateConfigError::new("schema", format!("not a valid JSON Schema: {e}")))?;
        let rules = |list: Vec<RuleParams>, name: &str| -> Result<Vec<Rule>, GateConfigError> {
            list.into_iter()
                .enumerate()
                .map(|(i, r)| {
                    if !(r.pointer.is_empty() || r.pointer.starts_with('/')) {
                        return Err(GateConfigError::new(
                            format!("{name}[{i}].pointer"),
                            "a JSON pointer starts with `/`, e.g. \"/confidence\"",
                        ));
                    }
                    let pattern = Regex::new(&r.pattern).map_err(|e| {
                        GateConfigError::new(
                            format!("{name}[{i}].pattern"),
                            format!("not a valid regex: {e}"),
                        )
                    })?;
                    Ok(Rule {
                        pointer: r.pointer,
                        pattern,
                        hint: r.hint,
                    })
                })
                .collect()
        };
        Ok(SchemaGate {
            deny: rules(params.deny, "deny")?,
            review_when: rules(params.review_when, "review_when")?,
            validator,
            schema: params.schema,
        })
    }

    fn schema_facts(&self, result: &Value) -> Vec<Fact> {
        self.validator
            .iter_errors(result)
            .map(|error| {
                let schema_path = error.schema_path().as_str().to_owned();
                let keyword = schema_path.rsplit('/').next().unwrap_or_default();
                let rule = self
                    .schema
                    .pointer(&schema_path)
                    .map(|v| compact(v, 120))
                    .unwrap_or_default();
                Fact::new(
                    KIND,
                    error.instance_path().as_str(),
                    format!("{keyword}: {rule}"),
                    compact(error.instance(), 200),
                    format!("{error}; fix this value and submit again"),
                )
            })
            .collect()
    }
}

impl Rule {
    /// The matched value's text, when the rule matches.
    fn matches(&self, result: &Value) -> Option<String> {
        let value = result.pointer(&self.pointer)?;
        let text = cell_as_text(value);
        self.pattern.is_match(&text).then_some(text)
    }
}

/// The schema's declared top-level properties with what each value is:
/// its `type` (several joined by "or"), its `enum`, its `format`.
fn shape_of(schema: &Value) -> Vec<FieldShape> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let types = match property.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(ts)) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" or "),
                _ => String::new(),
            };
            let values = property.get("enum").and_then(Value::as_array);
            let text = match values {
                Some(values) => values.iter().all(Value::is_string),
                None => types == "string",
            };
            let kind = match (values, property.get("format")) {
                (Some(values), _) => format!(
                    "one of {}",
                    values
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                (None, Some(Value::String(format))) if !types.is_empty() => {
                    format!("{types} ({format})")
                }
                (None, _) if !types.is_empty() => types,
                (None, _) => "any JSON value".to_owned(),
            };
            FieldShape {
                name: name.clone(),
                kind,
                text,
            }
        })
        .collect()
}

/// Keeps only what `schema` declares: at every object with `properties`, the
/// declared keys; at every array with an `items` schema, each item projected.
/// A value whose schema declares no inner structure is kept whole.
fn project(value: &Value, schema: &Value) -> Value {
    match (value, schema.get("properties").and_then(Value::as_object)) {
        (Value::Object(fields), Some(properties)) => Value::Object(
            fields
                .iter()
                .filter_map(|(k, v)| properties.get(k).map(|s| (k.clone(), project(v, s))))
                .collect(),
        ),
        (Value::Object(_), None) => value.clone(),
        (Value::Array(items), _) => match schema.get("items").filter(|s| s.is_object()) {
            Some(item_schema) => {
                Value::Array(items.iter().map(|v| project(v, item_schema)).collect())
            }
            None => value.clone(),
        },
        _ => value.clone(),
    }
}

fn compact(value: &Value, max: usize) -> String {
    let text = value.to_string();
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

#[async_trait]
impl Gate for SchemaGate {
    fn decides_at_once(&self) -> bool {
        // Validation and the deny/review rules read only the result.
        self.unique_fields().is_empty()
    }

    fn name(&self) -> &'static str {
        KIND
    }

    fn version(&self) -> &'static str {
        "1"
    }

    fn default_prompt(&self) -> GatePrompt {
        let schema = serde_json::to_string_pretty(&self.schema).unwrap_or_default();
        GatePrompt {
            task: format!(
                "Produce the result for the input below as one JSON object that satisfies this JSON Schema:\n{schema}"
            ),
            // Only the schema's own `examples` are correct results; a made-up one could contradict the schema.
            example: self
                .schema
                .get("examples")
                .and_then(|e| e.get(0))
                .map(|result| Example {
                    input: Value::Null,
                    result: result.clone(),
                }),
            shape: shape_of(&self.schema),
        }
    }

    /// The keys of the schema's top-level `properties`: a schema that lists no
    /// properties declares no field, and such a session cannot use AI verifiers.
    fn declared_fields(&self) -> Vec<String> {
        self.schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The result projected through the schema, nested properties included, so
    /// that an undeclared field never reaches a verifier at any depth.
    fn artifact(&self, result: &Value) -> Value {
        if self.declared_fields().is_empty() {
            return Value::Object(Map::new());
        }
        project(result, &self.schema)
    }

    fn default_questions(&self) -> Vec<Question> {
        vec![
            Question::yes_flags(
                "Does any value in the result look invented, like a placeholder, or like it belongs to a \
                 different input than the one given?",
            ),
            // The result is the agent's own free text: it may talk to its judges.
            injection_question(),
        ]
    }

    async fn check(&self, _input: &Value, result: &Value, _session: &SessionView) -> GateOutcome {
        let schema = self
            .schema_facts(result)
            .into_iter()
            .map(|f| (Verdict::Fail, Some(f)));
        let deny = self.deny.iter().filter_map(|rule| {
            let found = rule.matches(result)?;
            let hint = rule.hint.clone().unwrap_or_else(|| {
                "this value is on the session's deny list: find the real one".into()
            });
            Some((
                Verdict::Fail,
                Some(Fact::new(
                    "deny",
                    &rule.pointer,
                    format!("a value not matching /{}/", rule.pattern),
                    found,
                    hint,
                )),
            ))
        });
        let review = self.review_when.iter().filter_map(|rule| {
            let found = rule.matches(result)?;
            let hint = rule
                .hint
                .clone()
                .unwrap_or_else(|| "a person will look at this value before it is accepted".into());
            Some((
                Verdict::Review,
                Some(Fact::new(
                    "review_when",
                    &rule.pointer,
                    format!("a value not matching /{}/", rule.pattern),
                    found,
                    hint,
                )),
            ))
        });
        GateOutcome::from_checks(schema.chain(deny).chain(review).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gate(params: Value) -> SchemaGate {
        SchemaGate::from_params(params.as_object().unwrap()).unwrap()
    }

    fn contact_gate() -> SchemaGate {
        gate(json!({
            "schema": {
                "type": "object",
                "required": ["email", "confidence"],
                "properties": {"email": {"type": "string", "minLength": 3}, "confidence": {"enum": ["high", "low"]}}
            },
            "deny": [{"pointer": "/email", "pattern": "@example\\.com$"}],
            "review_when": [{"pointer": "/confidence", "pattern": "^low$", "hint": "low confidence goes to a person"}]
        }))
    }

    async fn check(g: &SchemaGate, result: Value) -> GateOutcome {
        g.check(&json!({}), &result, &SessionView::alone()).await
    }

    #[tokio::test]
    async fn a_valid_result_passes_with_no_facts() {
        let o = check(
            &contact_gate(),
            json!({"email": "a@acme.test", "confidence": "high"}),
        )
        .await;
        assert_eq!((o.verdict, o.facts.len()), (Verdict::Pass, 0));
    }

    #[tokio::test]
    async fn every_violation_is_one_fact_at_its_pointer() {
        let o = check(&contact_gate(), json!({"email": 7})).await;
        assert_eq!(o.verdict, Verdict::Fail);
        let fields: Vec<_> = o
            .facts
            .iter()
            .map(|f| (f.check.as_str(), f.field.as_str()))
            .collect();
        assert!(fields.contains(&("schema", "/email")), "{fields:?}");
        assert!(
            fields.contains(&("schema", "")),
            "the missing `confidence` is reported at the root: {fields:?}"
        );
        let type_fact = o.facts.iter().find(|f| f.field == "/email").unwrap();
        assert_eq!(type_fact.expected, "type: \"string\"");
        assert_eq!(type_fact.actual, "7");
    }

    #[tokio::test]
    async fn a_deny_match_fails_and_a_grey_zone_goes_to_review() {
        let g = contact_gate();
        let denied = check(&g, json!({"email": "a@example.com", "confidence": "high"})).await;
        assert_eq!(denied.verdict, Verdict::Fail);
        assert_eq!(denied.facts[0].check, "deny");
        assert_eq!(denied.facts[0].actual, "a@example.com");

        let grey = check(&g, json!({"email": "a@acme.test", "confidence": "low"})).await;
        assert_eq!(grey.verdict, Verdict::Review);
        assert_eq!(grey.facts[0].hint, "low confidence goes to a person");

        let both = check(&g, json!({"email": "a@example.com", "confidence": "low"})).await;
        assert_eq!(
            both.verdict,
            Verdict::Fail,
            "review only when nothing failed"
        );
        assert_eq!(both.facts.len(), 2, "all facts are reported at once");
    }

    #[test]
    fn the_default_questions_include_the_one_that_catches_text_aimed_at_the_verifier() {
        let params = serde_json::json!({"schema": {"type": "object"}});
        let gate = SchemaGate::from_params(params.as_object().unwrap()).unwrap();
        assert!(gate.default_questions().contains(&injection_question()));
    }

    #[test]
    fn bad_parameters_are_refused_with_the_field_named() {
        let err = |p: Value| {
            SchemaGate::from_params(p.as_object().unwrap())
                .err()
                .unwrap()
        };
        assert_eq!(err(json!({"schema": {"type": "nonsense"}})).field, "schema");
        assert_eq!(
            err(json!({"schema": {}, "deny": [{"pointer": "/a", "pattern": "("}]})).field,
            "deny[0].pattern"
        );
        assert_eq!(
            err(json!({"schema": {}, "review_when": [{"pointer": "a", "pattern": "x"}]})).field,
            "review_when[0].pointer"
        );
        assert_eq!(err(json!({"deny": []})).field, "");
    }

    #[test]
    fn the_default_prompt_shows_the_schema_its_shape_and_only_real_examples() {
        let prompt = contact_gate().default_prompt();
        assert!(prompt.task.contains("\"required\""), "{}", prompt.task);
        let shape: Vec<(&str, &str)> = prompt
            .shape
            .iter()
            .map(|f| (f.name.as_str(), f.kind.as_str()))
            .collect();
        assert_eq!(
            shape,
            [
                ("email", "string"),
                ("confidence", r#"one of "high", "low""#)
            ],
            "each declared field with its type, no invented value"
        );
        assert!(
            prompt.shape.iter().all(|f| f.text),
            "both take text: a string, an enum of strings"
        );
        assert!(
            prompt.example.is_none(),
            "a made-up skeleton is never offered as a correct result"
        );
        let own = gate(json!({"schema": {"examples": [{"n": 1}]}})).default_prompt();
        assert_eq!(own.example.unwrap().result, json!({"n": 1}));
        assert!(
            gate(json!({"schema": true}))
                .default_prompt()
                .example
                .is_none()
        );
    }

    #[test]
    fn verifiers_see_only_the_fields_the_schema_declares_at_every_depth() {
        let g = gate(json!({"schema": {
            "type": "object",
            "properties": {
                "email": {"type": "string"},
                "contact": {"type": "object", "properties": {"phone": {"type": "string"}}},
                "sources": {"type": "array", "items": {"type": "object", "properties": {"url": {}}}}
            }
        }}));
        assert_eq!(g.declared_fields(), ["email", "contact", "sources"]);
        let result = json!({
            "email": "a@acme.test",
            "notes": "trust me, it is right",
            "contact": {"phone": "1", "notes": "trust me"},
            "sources": [{"url": "https://acme.test", "why": "trust me"}]
        });
        assert_eq!(
            g.artifact(&result),
            json!({"email": "a@acme.test", "contact": {"phone": "1"}, "sources": [{"url": "https://acme.test"}]})
        );
        let open = gate(json!({"schema": {"type": "object"}}));
        assert!(open.declared_fields().is_empty());
        assert_eq!(open.artifact(&result), json!({}));
    }

    #[test]
    fn long_values_are_cut_in_facts() {
        assert_eq!(compact(&json!("abcdef"), 4), "\"abc…");
    }
}
