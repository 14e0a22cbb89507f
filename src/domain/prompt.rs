//! The text an agent reads when it leases a quest: the task, the input, worked
//! examples, the facts of its last FAIL with hints, the tries left and how to submit.

use std::fmt::Write as _;

use serde_json::Value;

use super::Fact;
use super::session::PromptConfig;

/// What the prompt is rendered from.
#[derive(Debug)]
pub struct PromptParts<'a> {
    pub prompt: &'a PromptConfig,
    pub key: &'a str,
    pub input: &'a Value,
    pub tries: u32,
    pub max_tries: u32,
    pub last_facts: &'a [Fact],
    /// True when the last two FAILs carried the same facts.
    pub repeated_failure: bool,
    pub submit_url: &'a str,
    pub lease_id: &'a str,
}

/// Renders the prompt as plain text.
pub fn render(p: &PromptParts<'_>) -> String {
    let mut out = String::new();
    let task = p.prompt.instructions.trim();
    out.push_str("# Task\n");
    out.push_str(if task.is_empty() {
        "Produce the result for the input below."
    } else {
        task
    });
    let _ = write!(out, "\n\n# Input ({})\n{}\n", p.key, pretty(p.input));
    if !p.prompt.examples.is_empty() {
        out.push_str("\n# Examples of correct results\n");
        for example in &p.prompt.examples {
            let _ = write!(
                out,
                "input:  {}\nresult: {}\n",
                example.input, example.result
            );
        }
    }
    if !p.last_facts.is_empty() {
        out.push_str("\n# Your last submission failed these checks\n");
        for f in p.last_facts {
            let _ = writeln!(
                out,
                "- {} `{}`: expected {}, found {}. Hint: {}",
                f.check, f.field, f.expected, f.actual, f.hint
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
    let _ = write!(
        out,
        "\n# Submit\nTries left: {left} of {}.\nPOST {} with {{\"lease_id\": \"{}\", \"result\": {{...}}}}\n",
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
    use crate::domain::session::Example;
    use serde_json::json;

    fn parts<'a>(
        prompt: &'a PromptConfig,
        facts: &'a [Fact],
        repeated: bool,
        input: &'a Value,
    ) -> PromptParts<'a> {
        PromptParts {
            prompt,
            key: "Acme",
            input,
            tries: 1,
            max_tries: 3,
            last_facts: facts,
            repeated_failure: repeated,
            submit_url: "/v1/quests/q1/submit",
            lease_id: "l1",
        }
    }

    #[test]
    fn every_part_is_present() {
        let prompt = PromptConfig {
            instructions: "Find the contact email.".into(),
            examples: vec![Example {
                input: json!({"company": "Foo"}),
                result: json!({"email": "a@foo.test"}),
            }],
        };
        let facts = [Fact::new(
            "schema",
            "/email",
            "a string",
            "a number",
            "send a string",
        )];
        let input = json!({"company": "Acme"});
        let text = render(&parts(&prompt, &facts, false, &input));
        for needle in [
            "Find the contact email.",
            "\"company\": \"Acme\"",
            "{\"email\":\"a@foo.test\"}",
            "schema `/email`: expected a string, found a number. Hint: send a string",
            "Tries left: 2 of 3",
            "POST /v1/quests/q1/submit",
            "\"lease_id\": \"l1\"",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(!text.contains("failed twice"));
        assert!(render(&parts(&prompt, &facts, true, &input)).contains("failed twice"));
    }
}
