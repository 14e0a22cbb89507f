//! The `command` gate with real programs: small shell scripts written by each
//! test into a temp dir and declared in the server's configuration file. They
//! run as `/bin/sh script` (the server itself never uses a shell), so no test
//! executes a file that another test thread may still hold open for writing.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::*;

/// Writes `script` as `check.sh` in a fresh dir and declares it as gate `check`.
pub(crate) fn gate_toml(dir: &TempDir, script: &str, timeout_ms: u64, extra: &str) -> String {
    std::fs::write(dir.path().join("check.sh"), script).unwrap();
    format!(
        "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./check.sh\"]\nworkdir = \"{}\"\n\
         timeout_ms = {timeout_ms}\n{extra}\n",
        dir.path().display()
    )
}

fn command_config() -> Value {
    json!({
        "key_column": "company",
        "max_tries": 3,
        "gate": {"kind": "command", "name": "check"},
        "prompt": {"instructions": "Write a test for the function."}
    })
}

/// Starts an app with the script as gate `check`, scans `n` companies and submits `result`.
async fn run_once(
    script: &str,
    timeout_ms: u64,
    extra: &str,
    result: Value,
) -> (TestApp, TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&gate_toml(&dir, script, timeout_ms, extra)).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(command_config(), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app.submit(&agent, &quest, &lease, result).await.expect(200);
    (app, dir, answer)
}

#[tokio::test]
async fn a_program_that_prints_a_verdict_decides_with_its_facts_and_gets_input_and_result_on_stdin()
{
    let script = r#"cat > stdin.json
case "$(cat stdin.json)" in
  *covers_error_branch*) echo '{"verdict": "PASS", "evidence": [{"coverage": 92}]}' ;;
  *) echo "running the tests"
     echo '{"verdict": "FAIL", "facts": [{"field": "/test", "expected": "coverage >= 80", "actual": 41, "hint": "cover the error branch"}]}' ;;
esac
"#;
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&gate_toml(&dir, script, 10_000, "env = [\"PATH\"]")).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(command_config(), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);

    let failed = app
        .submit(&agent, &quest, &lease, json!({"test": "fn t() {}"}))
        .await
        .expect(200);
    assert_eq!(
        (failed["verdict"].as_str(), failed["tries"].as_u64()),
        (Some("FAIL"), Some(1))
    );
    assert_eq!(
        failed["facts"],
        json!([{"check": "check", "field": "/test", "expected": "coverage >= 80", "actual": "41", "hint": "cover the error branch"}])
    );
    let stdin: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("stdin.json")).unwrap()).unwrap();
    assert_eq!(
        stdin,
        json!({"input": {"company": "Company 0000", "city": "Seoul"}, "result": {"test": "fn t() {}"}})
    );

    let passed = app
        .submit(
            &agent,
            &quest,
            &lease,
            json!({"test": "fn covers_error_branch() {}"}),
        )
        .await
        .expect(200);
    assert_eq!(passed["state"], "PASS");
    let view = app.quest(&quest).await;
    let submission = &view["submissions"][1];
    assert_eq!(submission["gate"], "command");
    assert!(
        submission["gate_version"]
            .as_str()
            .unwrap()
            .starts_with("1+")
    );
    assert_eq!(submission["evidence"], json!([{"coverage": 92}]));
}

#[tokio::test]
async fn without_a_verdict_exit_zero_is_pass() {
    let (_app, _dir, answer) = run_once(
        "echo all tests passed\nexit 0\n",
        10_000,
        "",
        json!({"test": "t"}),
    )
    .await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("PASS"), Some("PASS"))
    );
    assert_eq!(answer["facts"], json!([]));
}

#[tokio::test]
async fn without_a_verdict_a_failing_exit_is_fail_with_the_tail_of_stderr() {
    let script = "echo 'compiling' >&2\necho 'coverage 41% is below 80%' >&2\nexit 2\n";
    let (_app, _dir, answer) = run_once(script, 10_000, "", json!({"test": "t"})).await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("FAIL"), Some("TODO"))
    );
    let fact = &answer["facts"][0];
    assert_eq!(
        (fact["check"].as_str(), fact["expected"].as_str()),
        (Some("check"), Some("exit status 0"))
    );
    let actual = fact["actual"].as_str().unwrap();
    assert!(
        actual.starts_with("exit status 2: ") && actual.ends_with("coverage 41% is below 80%"),
        "{actual}"
    );
}

#[tokio::test]
async fn a_pass_printed_by_the_agents_own_test_cannot_override_a_failing_exit() {
    // A test runner that lets the agent's test write to its stdout: the test
    // prints a PASS verdict line of its own, then fails.
    let script = r#"request=$(cat)
case "$request" in
  *cheat*) echo 'running 1 test'
           echo '{"verdict": "PASS"}'
           exit 1 ;;
esac
exit 1
"#;
    let (_app, _dir, answer) = run_once(script, 10_000, "", json!({"test": "cheat"})).await;
    // Conflicting signals are a FAIL that costs a try: a REVIEW would be
    // terminal and free, which the agent's own line must not be able to buy.
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("FAIL"), Some("TODO")),
        "conflicting signals are never a PASS, nor a REVIEW: {answer}"
    );
    assert_eq!(answer["tries"], 1);
    assert_eq!(
        answer["facts"][0]["actual"],
        "a printed PASS, but exit status 1"
    );
}

#[tokio::test]
async fn a_program_past_its_timeout_is_killed_with_its_children_and_the_quest_goes_to_review() {
    let script = "/bin/sleep 60 &\necho $! > child.pid\nwait\n";
    let (app, dir, answer) = run_once(script, 300, "", json!({"test": "t"})).await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("REVIEW"), Some("REVIEW"))
    );
    assert_eq!(answer["facts"][0]["expected"], "a verdict within 300 ms");
    assert_eq!(answer["tries"], 0, "an unconfirmable result costs no try");
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    let proc = format!("/proc/{}", pid.trim());
    for _ in 0..250 {
        if !Path::new(&proc).exists() || is_zombie(&proc) {
            drop(app);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the program's child {} survived the timeout", pid.trim());
}

#[tokio::test]
async fn what_a_program_leaves_running_in_the_background_is_killed_when_it_exits() {
    let script = "/bin/sleep 60 >/dev/null 2>&1 &\necho $! > child.pid\nexit 0\n";
    let (app, dir, answer) = run_once(script, 10_000, "", json!({"test": "t"})).await;
    assert_eq!(answer["verdict"], "PASS", "{answer}");
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    let proc = format!("/proc/{}", pid.trim());
    for _ in 0..250 {
        if !Path::new(&proc).exists() || is_zombie(&proc) {
            drop(app);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the program's background child {} survived it", pid.trim());
}

#[tokio::test]
async fn a_program_killed_by_a_signal_is_review_and_costs_no_try() {
    let script = "echo 'about to be killed' >&2\nkill -9 $$\n";
    let (_app, _dir, answer) = run_once(script, 10_000, "", json!({"test": "t"})).await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("REVIEW"), Some("REVIEW")),
        "{answer}"
    );
    assert_eq!(answer["tries"], 0);
    assert_eq!(
        answer["facts"][0]["actual"],
        "ended by signal 9 (SIGKILL): about to be killed"
    );
}

/// A killed process that its (also killed) parent never reaped.
pub(crate) fn is_zombie(proc: &str) -> bool {
    std::fs::read_to_string(format!("{proc}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[tokio::test]
async fn a_command_gates_own_timeout_governs_it_not_the_global_gate_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = "/bin/sleep 2\necho '{\"verdict\": \"PASS\"}'\n";
    let toml = gate_toml(&dir, script, 10_000, "");
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), Some(&toml), |config| {
        config.gate_timeout_seconds = 1;
    })
    .await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(command_config(), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .submit(&agent, &quest, &lease, json!({"test": "t"}))
        .await
        .expect(200);
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("PASS"), Some("PASS")),
        "timeout_ms = 10000 outlasts QUEST_GATE_TIMEOUT_SECONDS = 1: {answer}"
    );
}

#[tokio::test]
async fn the_program_sees_a_cleared_environment_plus_the_allow_list() {
    let script = "/usr/bin/env >&2\nexit 1\n";
    let (_app, _dir, answer) = run_once(
        script,
        10_000,
        "env = [\"PATH\", \"QUEST_NOT_SET_ANYWHERE\"]",
        json!({}),
    )
    .await;
    let seen = answer["facts"][0]["actual"].as_str().unwrap();
    assert!(seen.contains("PATH="), "{seen}");
    for never in ["HOME=", "CARGO", "QUEST_", "USER="] {
        assert!(
            !seen.contains(never),
            "{never} leaked into the program's environment: {seen}"
        );
    }
}

#[tokio::test]
async fn output_beyond_one_mebibyte_is_cut_and_the_verdict_is_review() {
    // 2 MiB, then a verdict line and exit 0: the verdict was cut off, so neither
    // the lost line nor the exit status can be trusted to decide.
    let script = "i=0\nwhile [ $i -lt 2100 ]; do\n  printf '%01000d\\n' 0\n  i=$((i+1))\ndone\necho '{\"verdict\": \"FAIL\"}'\nexit 0\n";
    let (_app, _dir, answer) = run_once(script, 20_000, "", json!({})).await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("REVIEW"), Some("REVIEW")),
        "{answer}"
    );
    assert_eq!(answer["tries"], 0, "an unreadable verdict costs no try");
    assert!(
        answer["facts"][0]["actual"]
            .as_str()
            .unwrap()
            .contains("cut"),
        "{answer}"
    );
}

#[tokio::test]
async fn sessions_may_only_name_a_declared_command_gate() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&gate_toml(&dir, "exit 0\n", 1_000, "")).await;
    let scan = |gate: Value| {
        let app = &app;
        let mut config = command_config();
        config["gate"] = gate;
        async move {
            app.post(
                "/v1/sessions",
                &app.admin,
                json!({"config": config, "items": companies(1)}),
            )
            .await
        }
    };
    let unknown = scan(json!({"kind": "command", "name": "rm-rf"})).await;
    unknown.refused(422, "invalid_config");
    assert!(
        unknown.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this server declares: check")
    );
    scan(json!({"kind": "command", "name": "check", "argv": ["/bin/sh", "-c", "id"]}))
        .await
        .refused(422, "invalid_config");
    scan(json!({"kind": "command", "name": "check"}))
        .await
        .expect(201);
}

#[tokio::test]
async fn a_command_gate_declares_the_fields_its_verifiers_may_see() {
    use crate::fake_llm::{Behaviour, FakeLlm};
    let fake = FakeLlm::start("judge", Behaviour::says("NO: it asserts")).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}\n[verifiers.alpha]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"judge\"\n",
        gate_toml(
            &dir,
            "echo '{\"verdict\": \"PASS\", \"evidence\": [{\"coverage\": 88}]}'\n",
            10_000,
            "result_fields = [\"test\"]\nquestions = [\"Does the test assert nothing?\"]"
        ),
        fake.base_url
    );
    let app = spawn_app_with(&toml).await;
    let mut config = command_config();
    config["verify"] = json!({"verifiers": ["alpha"]});
    let session = app.scan(config, companies(1)).await;
    let agent = app.token("agent", "bot").await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let result =
        json!({"test": "assert_eq!(parse(\"1\"), 1)", "explanation": "trust me, it is right"});
    app.submit(&agent, &quest, &lease, result).await.expect(200);
    assert_eq!(app.settled(&quest).await["state"], "PASS");
    let prompt = fake.requests()[0]["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains("assert_eq!") && prompt.contains("\"coverage\": 88"),
        "{prompt}"
    );
    assert!(
        prompt.contains("Does the test assert nothing?"),
        "the gate's default question: {prompt}"
    );
    assert!(
        !prompt.contains("trust me") && !prompt.contains("explanation"),
        "{prompt}"
    );
}

/// A gate `check` running `/bin/sh -c SCRIPT` with no workdir and `extra` keys.
fn inline_gate_toml(script: &str, timeout_ms: u64, extra: &str) -> String {
    assert!(
        !script.contains("'''"),
        "the script goes into a TOML multi-line literal string"
    );
    format!(
        "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"-c\", '''{script}''']\nenv = [\"PATH\"]\n\
         timeout_ms = {timeout_ms}\n{extra}\n"
    )
}

/// Starts an app with the gate declared in `toml`, scans one company and
/// submits `result`; returns the app, the quest id and the answer.
pub(crate) async fn submit_with(toml: &str, result: Value) -> (TestApp, String, Value) {
    let app = spawn_app_with(toml).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(command_config(), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app.submit(&agent, &quest, &lease, result).await.expect(200);
    (app, quest, answer)
}

#[tokio::test]
async fn without_a_workdir_the_program_runs_in_a_fresh_empty_directory() {
    let script = r#"n=$(ls -A | wc -l)
echo "{\"verdict\": \"PASS\", \"evidence\": [{\"cwd\": \"$(pwd)\", \"entries\": $n}]}"
touch left-behind"#;
    let (app, quest, answer) = submit_with(&inline_gate_toml(script, 10_000, ""), json!({})).await;
    assert_eq!(answer["verdict"], "PASS", "{answer}");
    let view = app.quest(&quest).await;
    let evidence = &view["submissions"][0]["evidence"][0];
    assert_eq!(evidence["entries"], 0, "empty: {evidence}");
    let cwd = evidence["cwd"].as_str().unwrap();
    assert!(!Path::new(cwd).exists(), "{cwd} is removed after the run");
    assert!(
        !cwd.starts_with(app.data_dir.path().to_str().unwrap()),
        "{cwd}"
    );
    assert_ne!(Path::new(cwd), std::env::current_dir().unwrap());
}

#[tokio::test]
async fn a_cpu_time_limit_ends_a_program_that_loops() {
    let toml = inline_gate_toml("while :; do :; done", 60_000, "cpu_seconds = 1");
    let (_app, _, answer) = submit_with(&toml, json!({})).await;
    assert_eq!(answer["verdict"], "REVIEW", "{answer}");
    assert_eq!(answer["tries"], 0);
    let actual = answer["facts"][0]["actual"].as_str().unwrap();
    assert!(
        actual.contains("SIGXCPU"),
        "ended by the CPU limit, not the timeout: {actual}"
    );
}

#[tokio::test]
async fn an_address_space_limit_refuses_a_program_that_allocates_too_much() {
    // 200 MB in one string.
    let script = r#"perl -e '$x = "x" x 200_000_000; print qq({"verdict": "PASS"}\n)'"#;
    // Through `sh -c`, since perl's own quotes fill the TOML literal string.
    let dir = tempfile::tempdir().unwrap();
    let with = gate_toml(
        &dir,
        script,
        30_000,
        "env = [\"PATH\"]\naddress_space_mb = 100",
    );
    let (_app, _, answer) = submit_with(&with, json!({})).await;
    assert_eq!(answer["verdict"], "FAIL", "{answer}");
    let actual = answer["facts"][0]["actual"].as_str().unwrap();
    assert!(actual.contains("Out of memory"), "{actual}");
    let without = gate_toml(&dir, script, 30_000, "env = [\"PATH\"]");
    let (_app, _, answer) = submit_with(&without, json!({})).await;
    assert_eq!(
        answer["verdict"], "PASS",
        "without the limit it runs: {answer}"
    );
}

#[tokio::test]
async fn an_open_files_limit_refuses_a_program_that_opens_too_many() {
    let script = r#"exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null 7</dev/null
echo "{\"verdict\": \"PASS\"}""#;
    let (_app, _, answer) = submit_with(
        &inline_gate_toml(script, 10_000, "open_files = 5"),
        json!({}),
    )
    .await;
    assert_eq!(answer["verdict"], "FAIL", "{answer}");
    let actual = answer["facts"][0]["actual"].as_str().unwrap();
    assert!(actual.contains("Too many open files"), "{actual}");
    let (_app, _, answer) = submit_with(&inline_gate_toml(script, 10_000, ""), json!({})).await;
    assert_eq!(
        answer["verdict"], "PASS",
        "without the limit it runs: {answer}"
    );
}

#[tokio::test]
async fn as_root_a_gate_runs_as_its_configured_user_and_cannot_read_the_data_dir() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI runs as root, so this test must run there"
        );
        eprintln!("skipping: switching users needs the tests to run as root");
        return;
    }
    let data_dir = tempfile::tempdir().unwrap();
    // The database file, or on PostgreSQL (no file) a secret of the same kind.
    let db = data_dir.path().join("quest.db");
    if on_postgres() {
        std::fs::write(&db, "not for gates").unwrap();
    }
    let script = format!(
        r#"if cat {} > /dev/null 2>&1; then read=yes; else read=no; fi
echo "{{\"verdict\": \"PASS\", \"evidence\": [{{\"uid\": $(id -u), \"read\": \"$read\"}}]}}""#,
        db.display()
    );
    let toml = format!(
        "{}\n{}",
        inline_gate_toml(&script, 10_000, "user = \"nobody\""),
        inline_gate_toml(&script, 10_000, "").replace("[gates.check]", "[gates.asroot]")
    );
    let app = spawn_app_tuned(data_dir, Some(&toml), |_| {}).await;
    let agent = app.token("agent", "bot").await;
    let mut seen = Vec::new();
    for gate in ["check", "asroot"] {
        let mut config = command_config();
        config["gate"]["name"] = json!(gate);
        let session = app.scan(config, companies(1)).await;
        let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
        let answer = app
            .submit(&agent, &quest, &lease, json!({}))
            .await
            .expect(200);
        assert_eq!(answer["verdict"], "PASS", "{gate}: {answer}");
        seen.push(app.quest(&quest).await["submissions"][0]["evidence"][0].clone());
    }
    let nobody = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("nobody:x:")?
                .split(':')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap();
    assert_eq!(seen[0], json!({"uid": nobody, "read": "no"}), "as nobody");
    assert_eq!(
        seen[1],
        json!({"uid": 0, "read": "yes"}),
        "as root, it could"
    );
}

#[tokio::test]
async fn a_command_gate_without_examples_states_its_result_fields_as_any_json_value() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "result_fields = [\"test\", \"notes\"]";
    let app = spawn_app_with(&gate_toml(
        &dir,
        "echo '{\"verdict\": \"PASS\"}'",
        10_000,
        extra,
    ))
    .await;
    let agent = app.token("agent", "bot").await;
    // Instructions and no examples: nothing shows the result's shape but the prompt's own words.
    let session = app.scan(command_config(), companies(1)).await;
    let next = app.next(&agent, &session, "a").await;
    assert_eq!(
        next["submit"]["result_example"],
        json!({"test": "<test: any JSON value>", "notes": "<notes: any JSON value>"}),
        "{next}"
    );
    let prompt = next["prompt"].as_str().unwrap();
    for needle in [
        "Write a test for the function.",
        "- `test`: any JSON value",
        "- `notes`: any JSON value",
        "quest submit --field test:=<test as JSON> --field notes:=<notes as JSON>",
    ] {
        assert!(prompt.contains(needle), "missing {needle:?} in\n{prompt}");
    }
}

/// The audit's check is the server's: a program naming a fact `audit` cannot
/// pass its REVIEW off as a random audit, a label of the error bound.
#[tokio::test]
async fn a_program_cannot_pass_a_review_off_as_a_random_audit() {
    let script = r#"echo '{"verdict": "REVIEW", "facts": [{"check": "audit", "field": "quest", "actual": "drawn for the audit sample"}]}'"#;
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&gate_toml(&dir, script, 10_000, "")).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(command_config(), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .submit(&agent, &quest, &lease, json!({"test": "fn t() {}"}))
        .await
        .expect(200);
    assert_eq!(answer["verdict"], "REVIEW", "{answer}");
    assert_eq!(answer["facts"][0]["check"], "gate:audit", "{answer}");
    let body = json!({"decision": "approve", "note": ""});
    app.post(&format!("/v1/review/{quest}"), &app.admin, body)
        .await
        .expect(200);
    let quality = app
        .get(&format!("/v1/sessions/{session}/quality"), &app.admin)
        .await
        .expect(200);
    assert_eq!(
        (quality["audited"].as_u64(), quality["measured"].as_bool()),
        (Some(0), Some(false)),
        "{quality}"
    );
}
