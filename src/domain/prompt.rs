//! The text an agent reads when it leases a quest: the task (a template over the
//! quest's input), the input, worked examples, the facts of its last FAIL with
//! hints, the tries left and the exact command that submits.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::Fact;
use super::session::Example;

/// What the prompt is rendered from.
#[derive(Debug)]
pub struct PromptParts<'a> {
    /// The task, already rendered for this quest.
    pub task: &'a str,
    pub examples: &'a [Example],
    pub key: &'a str,
    pub input: &'a Value,
    pub tries: u32,
    pub max_tries: u32,
    pub last_facts: &'a [Fact],
    /// True when the last two FAILs carried the same facts.
    pub repeated_failure: bool,
    pub submit_url: &'a str,
    pub lease_id: &'a str,
    /// The result's declared fields, stated when no example shows them.
    pub shape: &'a [FieldShape],
}

/// One declared field of a result and what its value is ("string",
/// "integer", "any JSON value"), for a prompt that has no example to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldShape {
    pub name: String,
    pub kind: String,
    /// Its value is text (the CLI then takes it as `--field name=...`).
    pub text: bool,
}

impl FieldShape {
    /// A field whose value may be any JSON value (a command gate's `result_fields`).
    pub fn any(name: &str) -> FieldShape {
        FieldShape {
            name: name.to_owned(),
            kind: "any JSON value".to_owned(),
            text: false,
        }
    }

    /// A field whose value is text of this `kind` ("string (a URL)").
    pub fn text(name: &str, kind: &str) -> FieldShape {
        FieldShape {
            name: name.to_owned(),
            kind: kind.to_owned(),
            text: true,
        }
    }
}

/// The shape as a result to fill in, a placeholder per field (`"<email:
/// string>"`): nothing in it is a value an agent could copy and pass with.
pub fn shape_example(shape: &[FieldShape]) -> Value {
    Value::Object(
        shape
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    Value::String(format!("<{}: {}>", f.name, f.kind)),
                )
            })
            .collect(),
    )
}

/// The heading of the prompt's last section, where it says how to submit.
/// Surfaces that submit another way (MCP's `quest_submit`) replace the section from here.
pub const SUBMIT_HEADING: &str = "\n# Submit\n";

/// A task template that cannot be compiled or rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config.prompt.instructions: {0}")]
pub struct TemplateError(String);

fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    // Prompts are plain text: nothing is HTML-escaped.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}

/// Checks that a task template compiles (at scan time, so that `next` never meets a broken one).
pub fn check_template(template: &str) -> Result<(), TemplateError> {
    environment()
        .template_from_str(template)
        .map(|_| ())
        .map_err(|e| TemplateError(e.to_string()))
}

/// Renders a task template. Its variables are the input's columns by name,
/// `input` (the whole row) and `key` (the quest's key).
pub fn render_task(template: &str, key: &str, input: &Value) -> Result<String, TemplateError> {
    let mut context: Map<String, Value> = input.as_object().cloned().unwrap_or_default();
    context.insert("input".into(), input.clone());
    context.insert("key".into(), Value::String(key.to_owned()));
    environment()
        .render_str(
            template,
            minijinja::Value::from(minijinja::value::Serde(&context)),
        )
        .map_err(|e| TemplateError(e.to_string()))
}

/// The task of one quest: the session's template rendered for it, or
/// `default` (the gate's own task text) when the session gives none. A
/// template that fails to render (checked at scan, so only after a change of
/// the template engine) is used as it is.
pub fn task_for(
    template: &str,
    key: &str,
    input: &Value,
    default: impl FnOnce() -> String,
) -> String {
    let template = template.trim();
    if template.is_empty() {
        return default();
    }
    render_task(template, key, input).unwrap_or_else(|_| template.to_owned())
}

/// The exact `quest submit` command for a result shaped like `example`, or
/// else like `shape`.
pub fn submit_command(example: Option<&Value>, shape: &[FieldShape]) -> String {
    match example.and_then(Value::as_object) {
        Some(fields) if !fields.is_empty() && fields.values().all(|v| v.is_string()) => {
            let mut command = "quest submit".to_owned();
            for name in fields.keys() {
                let _ = write!(command, " --field {name}=<{name}>");
            }
            command
        }
        Some(fields) if !fields.is_empty() => {
            format!("quest submit --data '{}'", Value::Object(fields.clone()))
        }
        _ if !shape.is_empty() => {
            let mut command = "quest submit".to_owned();
            for f in shape {
                let name = &f.name;
                let _ = match f.text {
                    true => write!(command, " --field {name}=<{name}>"),
                    false => write!(command, " --field {name}:=<{name} as JSON>"),
                };
            }
            command
        }
        _ => "quest submit --data '{...}'".to_owned(),
    }
}

/// Renders the prompt as plain text.
pub fn render(p: &PromptParts<'_>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# Task\n{}\n\n# Input ({})\n{}\n",
        p.task.trim(),
        p.key,
        pretty(p.input)
    );
    if !p.examples.is_empty() {
        out.push_str("\n# Examples of correct results\n");
        for example in p.examples {
            if !example.input.is_null() {
                let _ = writeln!(out, "input:  {}", example.input);
            }
            let _ = writeln!(out, "result: {}", example.result);
        }
    }
    if p.examples.is_empty() && !p.shape.is_empty() {
        out.push_str("\n# The result\nA JSON object with these fields; every value comes from your own work:\n");
        for f in p.shape {
            let _ = writeln!(out, "- `{}`: {}", f.name, f.kind);
        }
        let _ = writeln!(out, "shape: {}", shape_example(p.shape));
    }
    if !p.last_facts.is_empty() {
        out.push_str("\n# Your last submission failed these checks; fix each one\n");
        for f in p.last_facts {
            let field = if f.field.is_empty() {
                String::new()
            } else {
                format!(" `{}`", f.field)
            };
            let _ = writeln!(
                out,
                "- {}{field}: expected {}, found {}. Hint: {}",
                f.check, f.expected, f.actual, f.hint
            );
        }
    }
    if p.repeated_failure {
        out.push_str(
            "\nThe same attempt has now failed twice with the same facts. Stop repeating it: \
             re-read the facts and the example above, then change your approach.\n",
        );
    }
    let left = p.max_tries.saturating_sub(p.tries);
    let command = submit_command(p.examples.first().map(|e| &e.result), p.shape);
    let _ = write!(
        out,
        "{SUBMIT_HEADING}Tries left: {left} of {}. Submit with:\n  {command}\n\
         (over HTTP: POST {} with {{\"lease_id\": \"{}\", \"result\": {{...}}}})\n",
        p.max_tries, p.submit_url, p.lease_id
    );
    out
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parts<'a>(
        examples: &'a [Example],
        facts: &'a [Fact],
        repeated: bool,
        input: &'a Value,
    ) -> PromptParts<'a> {
        PromptParts {
            task: "Find the contact email of Acme.",
            examples,
            key: "Acme",
            input,
            tries: 1,
            max_tries: 3,
            last_facts: facts,
            repeated_failure: repeated,
            submit_url: "/v1/quests/q1/submit",
            lease_id: "l1",
            shape: &[],
        }
    }

    #[test]
    fn every_part_is_present() {
        let examples = [Example {
            input: json!({"company": "Foo"}),
            result: json!({"email": "a@foo.test"}),
        }];
        let facts = [Fact::new(
            "schema",
            "/email",
            "a string",
            "a number",
            "send a string",
        )];
        let input = json!({"company": "Acme"});
        let text = render(&parts(&examples, &facts, false, &input));
        for needle in [
            "Find the contact email of Acme.",
            "\"company\": \"Acme\"",
            "{\"email\":\"a@foo.test\"}",
            "schema `/email`: expected a string, found a number. Hint: send a string",
            "Tries left: 2 of 3",
            "quest submit --field email=<email>",
            "POST /v1/quests/q1/submit",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn the_doom_loop_note_appears_only_when_asked() {
        let input = json!({});
        assert!(!render(&parts(&[], &[], false, &input)).contains("failed twice"));
        assert!(
            render(&parts(&[], &[], true, &input)).contains("failed twice with the same facts")
        );
    }

    #[test]
    fn task_templates_see_columns_input_and_key() {
        let input = json!({"company": "Acme & Co", "city": "Seoul"});
        let text =
            render_task("{{ company }} in {{ input.city }} ({{ key }})", "K", &input).unwrap();
        assert_eq!(
            text, "Acme & Co in Seoul (K)",
            "no HTML escaping in plain-text prompts"
        );
        assert!(check_template("{{ broken").is_err());
        assert!(check_template("plain text").is_ok());
    }

    #[test]
    fn the_task_is_the_rendered_template_or_else_the_default() {
        let input = json!({"company": "Acme"});
        let default = || "the gate's task".to_owned();
        assert_eq!(
            task_for("Find {{ company }}'s email.", "K", &input, default),
            "Find Acme's email."
        );
        assert_eq!(task_for("  ", "K", &input, default), "the gate's task");
    }

    #[test]
    fn the_submit_command_follows_the_example_else_the_shape() {
        assert_eq!(
            submit_command(Some(&json!({"site": "s", "email": "e"})), &[]),
            "quest submit --field site=<site> --field email=<email>"
        );
        assert_eq!(
            submit_command(Some(&json!({"n": 1})), &[]),
            "quest submit --data '{\"n\":1}'"
        );
        assert_eq!(submit_command(None, &[]), "quest submit --data '{...}'");
        let shape = [FieldShape::text("email", "string"), FieldShape::any("rows")];
        assert_eq!(
            submit_command(None, &shape),
            "quest submit --field email=<email> --field rows:=<rows as JSON>"
        );
    }

    #[test]
    fn without_an_example_the_prompt_states_the_shape_and_invents_no_value() {
        let input = json!({"company": "Acme"});
        let shape = [
            FieldShape::text("email", "string"),
            FieldShape {
                name: "employees".into(),
                kind: "integer".into(),
                text: false,
            },
        ];
        let mut p = parts(&[], &[], false, &input);
        p.shape = &shape;
        let text = render(&p);
        for needle in [
            "- `email`: string",
            "- `employees`: integer",
            r#""email":"<email: string>""#,
            "--field employees:=<employees as JSON>",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert_eq!(
            shape_example(&shape),
            json!({"email": "<email: string>", "employees": "<employees: integer>"})
        );
        // With an example the example shows the shape, and no second one is drawn.
        let examples = [Example {
            input: Value::Null,
            result: json!({"email": "a@foo.test", "employees": 3}),
        }];
        let mut p = parts(&examples, &[], false, &input);
        p.shape = &shape;
        assert!(!render(&p).contains("# The result"));
    }
}
