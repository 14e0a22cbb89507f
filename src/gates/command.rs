//! The `command` gate: the operator's own program decides (SPEC §4.3).
//!
//! Named command gates are declared in the server's configuration file, never in
//! an HTTP request; a session picks one with `{"kind": "command", "name": ...}`.
//! The program gets `{"input": ..., "result": ...}` on stdin and answers
//! `{"verdict": "PASS" | "FAIL" | "REVIEW", "facts": [...], "evidence": [...]}`
//! on stdout (the whole output, or its last line). Without such JSON, exit
//! status 0 is PASS and anything else FAIL with the tail of stderr as the fact.
//! A program past its timeout, or one that cannot start, gives REVIEW: an
//! unconfirmable result is not a wrong one.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Gate, GateConfigError, GateOutcome, SessionView};
use crate::config::CommandGateConfig;
use crate::domain::table::cell_as_text;
use crate::domain::verify::{Question, cut};
use crate::domain::{Fact, Verdict};
use crate::process::{ProcessError, ProcessOutput, ProcessRunner};

/// The registry name of this gate kind.
pub const KIND: &str = "command";
/// The most facts kept from one run.
const MAX_FACTS: usize = 100;
/// The longest part of a fact, in characters.
const MAX_FACT_CHARS: usize = 1000;
/// The most stderr characters quoted in a fact.
const STDERR_CHARS: usize = 600;

/// One operator program as a gate.
pub struct CommandGate {
    config: CommandGateConfig,
    version: &'static str,
    runner: Arc<dyn ProcessRunner>,
}

impl CommandGate {
    /// Wraps a declared program. Built once per declared gate at start-up.
    pub fn new(config: CommandGateConfig, runner: Arc<dyn ProcessRunner>) -> CommandGate {
        // The version changes with anything that could change a verdict, so
        // receipts tell runs of different programs apart.
        let spec = json!({
            "argv": config.process.argv,
            "workdir": config.process.workdir,
            "env": config.process.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            "timeout_ms": config.process.timeout.as_millis() as u64,
        });
        let digest = hex::encode(Sha256::digest(spec.to_string().as_bytes()));
        // One small string per declared gate, for the life of the process.
        let version: &'static str = Box::leak(format!("1+{}", &digest[..12]).into_boxed_str());
        CommandGate {
            config,
            version,
            runner,
        }
    }

    fn review(&self, expected: String, actual: String) -> GateOutcome {
        GateOutcome {
            verdict: Verdict::Review,
            facts: vec![Fact::new(
                &self.config.name,
                "",
                expected,
                actual,
                "nothing for you to fix; a person will look at it",
            )],
            evidence: Vec::new(),
        }
    }

    fn outcome_of(&self, out: &ProcessOutput) -> GateOutcome {
        if !out.stdout_cut
            && let Some(outcome) = self.printed_verdict(&out.stdout)
        {
            return outcome;
        }
        let cut_fact = out.stdout_cut.then(|| {
            Fact::new(
                &self.config.name,
                "",
                format!("at most {} bytes of output", crate::process::MAX_STDOUT),
                "a longer output, cut; its verdict could not be read",
                "the exit status decided",
            )
        });
        match out.code {
            Some(0) => GateOutcome::from_checks([(Verdict::Pass, cut_fact)]),
            code => {
                let status = code.map_or("ended by a signal".to_owned(), |c| {
                    format!("exit status {c}")
                });
                let stderr = out.stderr_text(STDERR_CHARS);
                let actual = if stderr.is_empty() {
                    status
                } else {
                    format!("{status}: {stderr}")
                };
                GateOutcome::from_checks([
                    (
                        Verdict::Fail,
                        Some(Fact::new(
                            &self.config.name,
                            "",
                            "exit status 0",
                            actual,
                            "read the program's message, fix the result and submit again",
                        )),
                    ),
                    (Verdict::Fail, cut_fact),
                ])
            }
        }
    }

    /// The verdict JSON on stdout: the whole output, or else its last line.
    fn printed_verdict(&self, stdout: &[u8]) -> Option<GateOutcome> {
        let text = String::from_utf8_lossy(stdout);
        let text = text.trim();
        let printed = serde_json::from_str::<Printed>(text).ok().or_else(|| {
            let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
            serde_json::from_str::<Printed>(last.trim()).ok()
        })?;
        let verdict = match printed.verdict.trim().to_ascii_uppercase().as_str() {
            "PASS" => Verdict::Pass,
            "FAIL" => Verdict::Fail,
            "REVIEW" => Verdict::Review,
            _ => return None,
        };
        let part = |v: &Option<Value>| {
            cut(
                &v.as_ref().map(cell_as_text).unwrap_or_default(),
                MAX_FACT_CHARS,
            )
        };
        let facts = printed
            .facts
            .iter()
            .take(MAX_FACTS)
            .map(|f| {
                let check = part(&f.check);
                Fact::new(
                    if check.is_empty() {
                        self.config.name.clone()
                    } else {
                        check
                    },
                    part(&f.field),
                    part(&f.expected),
                    part(&f.actual),
                    part(&f.hint),
                )
            })
            .collect();
        Some(GateOutcome {
            verdict,
            facts,
            evidence: printed.evidence,
        })
    }
}

/// What a program may print. Unknown keys are ignored; fact parts may be any JSON.
#[derive(Deserialize)]
struct Printed {
    verdict: String,
    #[serde(default)]
    facts: Vec<PrintedFact>,
    #[serde(default)]
    evidence: Vec<Value>,
}

#[derive(Deserialize)]
struct PrintedFact {
    #[serde(default)]
    check: Option<Value>,
    #[serde(default)]
    field: Option<Value>,
    #[serde(default)]
    expected: Option<Value>,
    #[serde(default)]
    actual: Option<Value>,
    #[serde(default)]
    hint: Option<Value>,
}

/// The factory: a session's `{"name": ...}` picks a declared gate.
pub fn pick(
    declared: &HashMap<String, Arc<CommandGate>>,
    params: &Map<String, Value>,
) -> Result<Arc<dyn Gate>, GateConfigError> {
    if let Some(other) = params.keys().find(|k| *k != "name") {
        return Err(GateConfigError::new(
            other.as_str(),
            "a command gate takes only `name`; its program is declared in the server's configuration file",
        ));
    }
    let mut names: Vec<&str> = declared.keys().map(String::as_str).collect();
    names.sort_unstable();
    let known = if names.is_empty() {
        "this server declares no command gates (the operator adds [gates.NAME] to its --config file)".to_owned()
    } else {
        format!("this server declares: {}", names.join(", "))
    };
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| GateConfigError::new("name", format!("name the command gate; {known}")))?;
    let gate = declared.get(name).ok_or_else(|| {
        GateConfigError::new("name", format!("unknown command gate `{name}`; {known}"))
    })?;
    Ok(gate.clone())
}

#[async_trait]
impl Gate for CommandGate {
    fn name(&self) -> &'static str {
        KIND
    }

    fn version(&self) -> &'static str {
        self.version
    }

    async fn check(&self, input: &Value, result: &Value, _session: &SessionView) -> GateOutcome {
        let stdin = json!({"input": input, "result": result})
            .to_string()
            .into_bytes();
        match self.runner.run(&self.config.process, stdin).await {
            Ok(out) => self.outcome_of(&out),
            Err(ProcessError::TimedOut(after)) => self.review(
                format!("a verdict within {} ms", after.as_millis()),
                "no verdict: the program ran out of time and was killed".into(),
            ),
            Err(e) => {
                tracing::warn!(gate = %self.config.name, error = %e, "command gate could not run");
                self.review("a program that runs".into(), format!("no verdict: {e}"))
            }
        }
    }

    fn declared_fields(&self) -> Vec<String> {
        self.config.result_fields.clone()
    }

    fn default_questions(&self) -> Vec<Question> {
        self.config.questions.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::process::ProcessSpec;

    /// A runner that answers from a script and records what it was given.
    struct FakeRunner {
        answer: Result<ProcessOutput, ProcessError>,
        stdin: Mutex<Vec<Value>>,
    }

    #[async_trait]
    impl ProcessRunner for FakeRunner {
        async fn run(
            &self,
            _spec: &ProcessSpec,
            stdin: Vec<u8>,
        ) -> Result<ProcessOutput, ProcessError> {
            self.stdin
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&stdin).unwrap());
            self.answer.clone()
        }
    }

    fn output(code: i32, stdout: &str, stderr: &str) -> Result<ProcessOutput, ProcessError> {
        Ok(ProcessOutput {
            code: Some(code),
            stdout: stdout.as_bytes().to_vec(),
            stdout_cut: false,
            stderr_tail: stderr.as_bytes().to_vec(),
        })
    }

    async fn run(answer: Result<ProcessOutput, ProcessError>) -> (GateOutcome, Vec<Value>) {
        let runner = Arc::new(FakeRunner {
            answer,
            stdin: Mutex::new(Vec::new()),
        });
        let gate = CommandGate::new(
            CommandGateConfig {
                name: "coverage".into(),
                process: ProcessSpec {
                    argv: vec!["/bin/true".into()],
                    workdir: None,
                    env: vec![],
                    timeout: Duration::from_secs(1),
                },
                result_fields: vec![],
                questions: vec![],
            },
            runner.clone(),
        );
        let outcome = gate
            .check(
                &json!({"fn": "parse"}),
                &json!({"test": "t1"}),
                &SessionView::alone(),
            )
            .await;
        let stdin = runner.stdin.lock().unwrap().clone();
        (outcome, stdin)
    }

    #[tokio::test]
    async fn the_program_gets_input_and_result_and_its_printed_verdict_wins() {
        let printed = r#"{"verdict": "FAIL", "facts": [{"field": "/test", "expected": "coverage >= 80", "actual": 41, "hint": "cover the error branch"}], "evidence": [{"lines": 41}]}"#;
        let (o, stdin) = run(output(0, printed, "")).await;
        assert_eq!(
            stdin,
            [json!({"input": {"fn": "parse"}, "result": {"test": "t1"}})]
        );
        assert_eq!(
            o.verdict,
            Verdict::Fail,
            "the printed verdict wins over exit 0"
        );
        assert_eq!(o.facts[0].check, "coverage");
        assert_eq!(o.facts[0].actual, "41");
        assert_eq!(o.evidence, [json!({"lines": 41})]);
        let logged = format!("running tests...\n{}\n", r#"{"verdict": "review"}"#);
        assert_eq!(run(output(1, &logged, "")).await.0.verdict, Verdict::Review);
    }

    #[tokio::test]
    async fn without_a_verdict_the_exit_status_decides() {
        assert_eq!(
            run(output(0, "all good", "")).await.0,
            GateOutcome::from_checks([])
        );
        let (o, _) = run(output(
            3,
            "{\"verdict\": \"MAYBE\"}",
            "warming up\nerror: 2 tests failed",
        ))
        .await;
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.facts[0].expected, "exit status 0");
        assert!(
            o.facts[0].actual.starts_with("exit status 3: "),
            "{:?}",
            o.facts[0]
        );
        assert!(o.facts[0].actual.ends_with("error: 2 tests failed"));
    }

    #[tokio::test]
    async fn a_timeout_or_a_program_that_cannot_start_is_review() {
        let (o, _) = run(Err(ProcessError::TimedOut(Duration::from_millis(300)))).await;
        assert_eq!(o.verdict, Verdict::Review);
        assert_eq!(o.facts[0].expected, "a verdict within 300 ms");
        let (o, _) = run(Err(ProcessError::Spawn {
            program: "x".into(),
            message: "not found".into(),
        }))
        .await;
        assert_eq!(o.verdict, Verdict::Review);
    }

    #[tokio::test]
    async fn a_cut_output_is_not_read_as_a_verdict() {
        let mut out = output(0, r#"{"verdict": "PASS"}"#, "").unwrap();
        out.stdout_cut = true;
        let (o, _) = run(Ok(out.clone())).await;
        assert_eq!(o.verdict, Verdict::Pass);
        assert!(o.facts[0].actual.contains("cut"));
        out.code = Some(2);
        assert_eq!(run(Ok(out)).await.0.verdict, Verdict::Fail);
    }

    #[test]
    fn sessions_pick_a_declared_gate_by_name_only() {
        let declared = HashMap::new();
        let params = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            pick(&declared, &params(json!({"name": "x", "argv": ["sh"]})))
                .err()
                .unwrap()
                .field,
            "argv"
        );
        assert_eq!(
            pick(&declared, &params(json!({}))).err().unwrap().field,
            "name"
        );
    }
}
