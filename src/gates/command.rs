//! The `command` gate: the operator's own program decides (SPEC §4.3).
//!
//! Named command gates are declared in the server's configuration file, never in
//! an HTTP request; a session picks one with `{"kind": "command", "name": ...}`.
//! The program gets `{"input": ..., "result": ...}` on stdin and answers
//! `{"verdict": "PASS" | "FAIL" | "REVIEW", "facts": [...], "evidence": [...]}`
//! on stdout (the whole output, or its last line). Without such JSON, exit
//! status 0 is PASS and anything else FAIL with the tail of stderr as the fact.
//!
//! The last line of stdout may be the agent's own (a test runner that lets the
//! agent's test print): so a printed PASS counts only with exit status 0, and a
//! last line that contradicts an earlier verdict line is not believed either.
//! Both are conflicting signals, and the verdict is FAIL with a fact saying
//! so: REVIEW would let the agent's code turn the operator's FAIL into a
//! terminal verdict that costs no try.
//! A program past its timeout, one that cannot start, one killed by a signal,
//! or one whose stdout was cut (so that its verdict may be lost) gives REVIEW:
//! an unconfirmable result is not a wrong one, and it costs no try.
//!
//! A gate declared with `verdict = "fd"` reads the verdict from descriptor 3
//! instead, a pipe only the server reads and the program closes for the code
//! it runs: its stdout is only logged, and the channel must hold exactly one
//! verdict document ([`verdict::read_channel`]); anything else is FAIL with a
//! fact naming what it held.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Gate, GateConfigError, GateOutcome, SessionView};
use crate::config::{CommandGateConfig, VerdictChannel};
use crate::domain::table::cell_as_text;
use crate::domain::verify::{Question, cut};
use crate::domain::{Fact, Verdict};
use crate::process::{ProcessError, ProcessOutput, ProcessRunner};

mod verdict;

use verdict::{Printed, Reading, read_channel, read_printed};

/// The registry name of this gate kind.
pub const KIND: &str = "command";
/// The longest part of a fact, in characters.
const MAX_FACT_CHARS: usize = 1000;
/// The most stderr characters quoted in a fact.
const STDERR_CHARS: usize = 600;
/// Time beyond the program's `timeout_ms` for killing it and reading its output.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// One operator program as a gate.
pub struct CommandGate {
    config: CommandGateConfig,
    version: String,
    runner: Arc<dyn ProcessRunner>,
}

impl CommandGate {
    /// Wraps a declared program. Built once per declared gate at start-up.
    pub fn new(config: CommandGateConfig, runner: Arc<dyn ProcessRunner>) -> CommandGate {
        // The version changes with anything that could change a verdict, so
        // receipts tell runs of different programs apart.
        let limits = config.process.limits;
        let spec = json!({
            "argv": config.process.argv,
            "workdir": config.process.workdir,
            "env": config.process.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            "timeout_ms": config.process.timeout.as_millis() as u64,
            "verdict": format!("{:?}", config.verdict),
            "limits": [limits.cpu_seconds, limits.address_space, limits.open_files, limits.file_size, limits.processes],
            "user": config.process.user.as_ref().map(|u| (u.uid, u.gid)),
        });
        let digest = hex::encode(Sha256::digest(spec.to_string().as_bytes()));
        let version = format!("1+{}", &digest[..12]);
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

    /// [`Self::review`] for a program that gave no verdict: it timed out, was
    /// killed or could not start (the world's failure, not the result's).
    fn no_verdict(&self, expected: String, actual: String) -> GateOutcome {
        let mut outcome = self.review(expected, actual);
        outcome.facts = outcome.facts.into_iter().map(Fact::no_answer).collect();
        outcome
    }

    fn outcome_of(&self, out: &ProcessOutput) -> GateOutcome {
        if self.config.verdict == VerdictChannel::Fd {
            return self.outcome_of_channel(out);
        }
        // A cut output may have lost the verdict: the server cannot tell what the
        // program said, so neither a printed verdict nor the exit status decides.
        if out.stdout_cut {
            return self.review(
                format!("at most {} bytes of output", crate::process::MAX_STDOUT),
                "a longer output, cut; its verdict could not be read".into(),
            );
        }
        if let Some(killed) = self.killed(out) {
            return killed;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        match read_printed(stdout.trim()) {
            Reading::Nothing => {}
            Reading::Disagreeing(verdicts) => {
                return self.conflict(
                    "one verdict on stdout".into(),
                    format!("several: {}", verdicts.join(", ")),
                    Vec::new(),
                    Vec::new(),
                );
            }
            Reading::Verdict(printed, verdict) => {
                // The last line of stdout may be the agent's own output (a test
                // that prints a PASS): a PASS counts only from a program that
                // also exits 0.
                return self.decided(out, printed, verdict);
            }
        }
        match out.code {
            Some(0) => GateOutcome::from_checks([]),
            _ => self.fail("exit status 0", status_and_stderr(out)),
        }
    }

    /// The verdict from the program's descriptor 3; stdout is only logged.
    fn outcome_of_channel(&self, out: &ProcessOutput) -> GateOutcome {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stdout = stdout.trim();
        if !stdout.is_empty() {
            let skip = stdout.chars().count().saturating_sub(2000);
            let tail: String = stdout.chars().skip(skip).collect();
            tracing::info!(gate = %self.config.name, stdout = ?tail, "a command gate's stdout (not read for a verdict)");
        }
        if let Some(killed) = self.killed(out) {
            return killed;
        }
        let expected = "one verdict JSON document written to descriptor 3 (QUEST_VERDICT_FD)";
        let Some(channel) = &out.verdict else {
            return self.fail(expected, "no verdict channel was offered".into());
        };
        match read_channel(channel) {
            Ok((printed, verdict)) => self.decided(out, printed, verdict),
            Err(fault) => self.fail(
                expected,
                format!(
                    "the channel holds no verdict: {}; {}",
                    fault.described(),
                    status_and_stderr(out)
                ),
            ),
        }
    }

    /// Killed by a signal (the OOM killer, an operator, a crash, a CPU limit):
    /// the world interrupted the check, which is noise, not a wrong result.
    fn killed(&self, out: &ProcessOutput) -> Option<GateOutcome> {
        out.code
            .is_none()
            .then(|| self.no_verdict("a program that exits".into(), status_and_stderr(out)))
    }

    /// A verdict the program gave: a PASS counts only with exit status 0.
    fn decided(&self, out: &ProcessOutput, printed: Printed, verdict: Verdict) -> GateOutcome {
        let (facts, evidence) = self.facts_of(printed);
        if verdict == Verdict::Pass && out.code != Some(0) {
            return self.conflict(
                "a printed PASS with exit status 0".into(),
                format!("a printed PASS, but {}", out.status_text()),
                facts,
                evidence,
            );
        }
        GateOutcome {
            verdict,
            facts,
            evidence,
        }
    }

    /// FAIL, with the program's own words as the fact.
    fn fail(&self, expected: &str, actual: String) -> GateOutcome {
        GateOutcome::from_checks([(
            Verdict::Fail,
            Some(Fact::new(
                &self.config.name,
                "",
                expected,
                actual,
                "read the program's message, fix the result and submit again",
            )),
        )])
    }

    /// Conflicting signals from the program: FAIL, with whatever it printed
    /// after the fact that says why. The agent's own code can print a line
    /// or change an exit status; it must not be able to turn a FAIL into a
    /// REVIEW, which is terminal and costs no try.
    fn conflict(
        &self,
        expected: String,
        actual: String,
        mut facts: Vec<Fact>,
        evidence: Vec<Value>,
    ) -> GateOutcome {
        facts.insert(
            0,
            Fact::new(
                &self.config.name,
                "",
                expected,
                actual,
                "the check's signals disagree (a PASS with a failing exit status, or verdicts that contradict each other), so it did not pass: make it pass for real and submit again",
            ),
        );
        GateOutcome {
            verdict: Verdict::Fail,
            facts,
            evidence,
        }
    }

    /// The facts and evidence a program printed, each part cut to size; how
    /// many are kept is [`GateOutcome::bounded`]'s rule, as for every gate.
    fn facts_of(&self, printed: Printed) -> (Vec<Fact>, Vec<Value>) {
        let part = |v: &Option<Value>| {
            cut(
                &v.as_ref().map(cell_as_text).unwrap_or_default(),
                MAX_FACT_CHARS,
            )
        };
        let facts = printed
            .facts
            .iter()
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
        (facts, printed.evidence)
    }
}

/// How the program ended, and the tail of its stderr.
fn status_and_stderr(out: &ProcessOutput) -> String {
    let stderr = out.stderr_text(STDERR_CHARS);
    if stderr.is_empty() {
        out.status_text()
    } else {
        format!("{}: {stderr}", out.status_text())
    }
}

/// The parameters of a `command` gate.
// Only the OpenAPI document reads this struct: `pick` reads the parameters
// itself, to say what is wrong in its own words.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CommandGateConfig)]
#[expect(dead_code, reason = "documents the parameters; never constructed")]
pub(crate) struct Params {
    /// The name of a gate the server's configuration file declares (`[gates.NAME]`).
    name: String,
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

    fn version(&self) -> &str {
        &self.version
    }

    async fn check(&self, input: &Value, result: &Value, _session: &SessionView) -> GateOutcome {
        let stdin = json!({"input": input, "result": result})
            .to_string()
            .into_bytes();
        match self.runner.run(&self.config.process, stdin).await {
            Ok(out) => self.outcome_of(&out),
            Err(ProcessError::TimedOut(after)) => self.no_verdict(
                format!("a verdict within {} ms", after.as_millis()),
                "no verdict: the program ran out of time and was killed".into(),
            ),
            Err(e) => {
                tracing::warn!(gate = %self.config.name, error = %e, "command gate could not run");
                self.no_verdict("a program that runs".into(), format!("no verdict: {e}"))
            }
        }
    }

    fn declared_fields(&self) -> Vec<String> {
        self.config.result_fields.clone()
    }

    fn default_questions(&self) -> Vec<Question> {
        self.config.questions.clone()
    }

    /// The declared `timeout_ms` and a margin, so that the program's own
    /// deadline fires first: its process group is killed and the fact says so.
    fn timeout(&self) -> Option<Duration> {
        Some(self.config.process.timeout + TIMEOUT_MARGIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{Channel, ProcessSpec};
    use crate::testing::FakeRunner;

    fn output(code: i32, stdout: &str, stderr: &str) -> Result<ProcessOutput, ProcessError> {
        Ok(ProcessOutput {
            code: Some(code),
            signal: None,
            stdout: stdout.as_bytes().to_vec(),
            stdout_cut: false,
            stderr_tail: stderr.as_bytes().to_vec(),
            verdict: None,
        })
    }

    async fn run(answer: Result<ProcessOutput, ProcessError>) -> (GateOutcome, Vec<Value>) {
        run_with(VerdictChannel::Stdout, answer).await
    }

    async fn run_with(
        verdict: VerdictChannel,
        answer: Result<ProcessOutput, ProcessError>,
    ) -> (GateOutcome, Vec<Value>) {
        let runner = Arc::new(FakeRunner::answering(answer));
        let gate = CommandGate::new(
            CommandGateConfig {
                name: "coverage".into(),
                process: ProcessSpec {
                    argv: vec!["/bin/true".into()],
                    timeout: Duration::from_secs(1),
                    ..ProcessSpec::default()
                },
                verdict,
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
        let stdin = runner
            .inputs()
            .iter()
            .map(|bytes| serde_json::from_slice(bytes).unwrap())
            .collect();
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
    async fn a_printed_pass_with_a_failing_exit_is_fail_with_a_fact_not_pass_or_review() {
        // A test runner whose stdout carries the agent's own test output: the
        // test prints a PASS line and fails.
        let printed = r#"{"verdict": "PASS", "facts": [{"field": "/test", "actual": "ok"}]}"#;
        let (o, _) = run(output(1, &format!("running 1 test\n{printed}\n"), "")).await;
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.facts[0].expected, "a printed PASS with exit status 0");
        assert_eq!(o.facts[0].actual, "a printed PASS, but exit status 1");
        assert!(o.facts[0].hint.contains("disagree"), "{:?}", o.facts[0]);
        assert_eq!(o.facts[1].actual, "ok", "what it printed is kept");
        let (o, _) = run(output(0, printed, "")).await;
        assert_eq!(o.verdict, Verdict::Pass, "a PASS with exit 0 stands");
    }

    #[tokio::test]
    async fn a_last_line_that_contradicts_an_earlier_verdict_is_fail_with_a_fact() {
        let stdout = "{\"verdict\": \"FAIL\"}\ntest output\n{\"verdict\": \"PASS\"}\n";
        let (o, _) = run(output(0, stdout, "")).await;
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.facts[0].actual, "several: PASS, FAIL");
        let agreeing = "{\"verdict\": \"FAIL\"}\n{\"verdict\": \"fail\"}\n";
        assert_eq!(run(output(1, agreeing, "")).await.0.verdict, Verdict::Fail);
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
    async fn a_program_killed_by_a_signal_is_review_with_the_signal_named() {
        let mut out = output(1, r#"{"verdict": "FAIL"}"#, "out of memory").unwrap();
        (out.code, out.signal) = (None, Some(9));
        let (o, _) = run(Ok(out)).await;
        assert_eq!(o.verdict, Verdict::Review);
        assert_eq!(
            o.facts[0].actual,
            "ended by signal 9 (SIGKILL): out of memory"
        );
    }

    #[tokio::test]
    async fn a_timeout_or_a_program_that_cannot_start_is_review() {
        let (o, _) = run(Err(ProcessError::TimedOut(Duration::from_millis(300)))).await;
        assert_eq!(o.verdict, Verdict::Review);
        assert_eq!(o.facts[0].expected, "a verdict within 300 ms");
        assert!(o.facts[0].unanswered, "{:?}", o.facts);
        let (o, _) = run(Err(ProcessError::Spawn {
            program: "x".into(),
            message: "not found".into(),
        }))
        .await;
        assert_eq!(o.verdict, Verdict::Review);
        assert!(o.facts[0].unanswered, "{:?}", o.facts);
    }

    #[tokio::test]
    async fn a_cut_output_is_review_whatever_it_says_and_whatever_the_exit_status() {
        let mut out = output(0, r#"{"verdict": "PASS"}"#, "").unwrap();
        out.stdout_cut = true;
        for code in [Some(0), Some(2)] {
            out.code = code;
            let (o, _) = run(Ok(out.clone())).await;
            assert_eq!(o.verdict, Verdict::Review, "exit {code:?}");
            assert!(o.facts[0].actual.contains("cut"), "{:?}", o.facts);
            assert!(
                !o.facts[0].unanswered,
                "the program answered, at length: {:?}",
                o.facts
            );
        }
    }

    fn channel(bytes: &[u8]) -> Option<Channel> {
        Some(Channel {
            bytes: bytes.to_vec(),
            cut: false,
        })
    }

    #[tokio::test]
    async fn with_a_verdict_descriptor_stdout_is_only_logged_and_the_channel_decides() {
        // The agent's test prints a PASS on the stdout it shares with the program.
        let mut out = output(0, r#"{"verdict": "PASS"}"#, "1 test failed").unwrap();
        out.verdict = channel(br#"{"verdict": "FAIL", "facts": [{"actual": "1 failed"}]}"#);
        let (o, _) = run_with(VerdictChannel::Fd, Ok(out.clone())).await;
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.facts[0].actual, "1 failed");
        let (o, _) = run_with(VerdictChannel::Stdout, Ok(out.clone())).await;
        assert_eq!(
            o.verdict,
            Verdict::Pass,
            "on stdout the rules stay as they were"
        );

        for (bytes, says) in [
            (&b""[..], "nothing was written"),
            (
                b"{\"verdict\": \"FAIL\"}\n{\"verdict\": \"PASS\"}",
                "more than one",
            ),
            (br#"{"verdict": "FAIL"} and PASS"#, "not JSON"),
            (br#"{"verdict": "PA"#, "cut"),
        ] {
            out.verdict = channel(bytes);
            let (o, _) = run_with(VerdictChannel::Fd, Ok(out.clone())).await;
            assert_eq!(o.verdict, Verdict::Fail, "{says}");
            assert!(o.facts[0].actual.contains(says), "{says}: {:?}", o.facts);
            assert!(
                o.facts[0].actual.ends_with("exit status 0: 1 test failed"),
                "{:?}",
                o.facts
            );
        }
        // A PASS still needs exit status 0, and a signal is still REVIEW.
        out.verdict = channel(br#"{"verdict": "PASS"}"#);
        out.code = Some(1);
        assert_eq!(
            run_with(VerdictChannel::Fd, Ok(out.clone()))
                .await
                .0
                .verdict,
            Verdict::Fail
        );
        out.code = Some(0);
        out.stdout_cut = true;
        assert_eq!(
            run_with(VerdictChannel::Fd, Ok(out.clone()))
                .await
                .0
                .verdict,
            Verdict::Pass,
            "a long log does not matter"
        );
        (out.code, out.signal) = (None, Some(24));
        let (o, _) = run_with(VerdictChannel::Fd, Ok(out)).await;
        assert_eq!(o.verdict, Verdict::Review);
        assert!(o.facts[0].actual.contains("SIGXCPU"), "{:?}", o.facts);
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
