//! What a command gate's program runs cannot decide for it: the verdict
//! descriptor (`verdict = "fd"`), the trampoline that leaves no process
//! behind, and a root server that runs no program as root unless told to.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::command_gate::{gate_toml, is_zombie, submit_with};

/// The operator's program, which runs the agent's code (`agent`, its status
/// kept) and then writes its own verdict: FAIL, with its own fact. `$close`
/// is `3>&-` when the program closes the descriptor for the agent's code, as
/// the README says to, and empty when it forgot to.
///
/// The agent's code does everything it can: prints a PASS line on the stdout
/// it shares with the program, writes a PASS to descriptor 3, and detaches a
/// process with `setsid` that, a moment later, writes PASS to both again and
/// then sleeps, holding the pipes open. Then it fails.
const CHEATED: &str = r#"request=$(cat)
agent() {
  echo '{"verdict": "PASS"}'
  echo '{"verdict": "PASS"}' >&3
  setsid sh -c 'echo $$ > detached.pid; sleep 1; echo "{\"verdict\": \"PASS\"}" >&3; echo "{\"verdict\": \"PASS\"}"; exec sleep 60' &
  while [ ! -s detached.pid ]; do sleep 0.01; done
  return 1
}
eval "agent $close" 2>/dev/null
status=$?
if [ -n "$QUEST_VERDICT_FD" ]; then
  echo '{"verdict": "FAIL", "facts": [{"field": "/test", "actual": "1 of 3 failed"}]}' >&3
fi
exit $status
"#;

/// Asserts that the process whose pid is in `dir/detached.pid` is gone.
fn assert_gone(dir: &Path, case: &str) {
    let pid = std::fs::read_to_string(dir.join("detached.pid")).unwrap();
    let proc = format!("/proc/{}", pid.trim());
    assert!(
        !Path::new(&proc).exists() || is_zombie(&proc),
        "{case}: the detached process {} survived the run",
        pid.trim()
    );
}

#[tokio::test]
async fn agent_code_that_writes_to_descriptor_3_prints_a_pass_and_detaches_cannot_turn_a_fail_into_pass_or_review()
 {
    for (case, verdict, close) in [
        (
            "descriptor closed for the agent",
            "verdict = \"fd\"",
            "3>&-",
        ),
        ("descriptor left open", "verdict = \"fd\"", ""),
        ("stdout", "", ""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let script = CHEATED.replace("$close", close);
        // The timeout is long enough that a run waiting on the detached
        // process (which holds the pipes for 60 s) would end in REVIEW.
        let toml = gate_toml(&dir, &script, 5_000, verdict);
        let (app, quest, answer) = submit_with(&toml, json!({"test": "t"})).await;
        assert_eq!(
            (answer["verdict"].as_str(), answer["state"].as_str()),
            (Some("FAIL"), Some("TODO")),
            "{case}: {answer}"
        );
        assert_eq!(answer["tries"], 1, "{case}");
        assert_gone(dir.path(), case);
        if close == "3>&-" {
            assert_eq!(
                answer["facts"][0]["actual"], "1 of 3 failed",
                "{case}: the operator's own verdict"
            );
        }
        // Nothing writes later, either: the quest is as the answer said.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let view = app.quest(&quest).await;
        assert_eq!(view["state"], "TODO", "{case}: {view}");
        assert_eq!(view["submissions"][0]["verdict"], "FAIL", "{case}");
    }
}

#[tokio::test]
async fn the_descriptor_is_read_while_the_program_runs_and_judged_as_one_document() {
    // Far more than a pipe holds: a server that read only after the exit
    // would leave the program blocked until its timeout.
    let big = r#"printf '{"verdict": "FAIL", "facts": [{"actual": "%s"}]}\n' "$(head -c 300000 /dev/zero | tr '\0' x)" >&3"#;
    let cases: [(&str, &str, &str); 5] = [
        (big, "FAIL", "xxxx"),
        (r#"echo '{"verdict": "PASS"}' >&3"#, "PASS", ""),
        (
            r#"echo '{"verdict": "PASS"}' >&3; echo '{"verdict": "PASS"}' >&3"#,
            "FAIL",
            "more than one JSON document",
        ),
        ("echo 'tests ran' >&2", "FAIL", "nothing was written to it"),
        (
            "head -c 1100000 /dev/zero | tr '\\0' ' ' >&3",
            "FAIL",
            "it was cut",
        ),
    ];
    for (script, verdict, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let toml = gate_toml(&dir, script, 10_000, "verdict = \"fd\"\nenv = [\"PATH\"]");
        let (_app, _, answer) = submit_with(&toml, json!({})).await;
        assert_eq!(answer["verdict"], verdict, "{script}: {answer}");
        let actual = answer["facts"][0]["actual"].as_str().unwrap_or_default();
        assert!(actual.contains(says), "{script}: {actual}");
    }
}

/// The error a root server gives for the configuration file `toml`, if any.
async fn start_error(toml: &str) -> Option<String> {
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = quest::config::Config::with_data_dir(data_dir.path());
    config.runner_exe = Some(env!("CARGO_BIN_EXE_quest").into());
    let path = data_dir.path().join("quest.toml");
    std::fs::write(&path, toml).unwrap();
    config.config_file = Some(path);
    config.bind = "127.0.0.1:0".parse().unwrap();
    match quest::app::App::build(config).await {
        Ok(_) => None,
        Err(e) => Some(format!("{e:#}")),
    }
}

#[tokio::test]
async fn a_root_server_refuses_to_start_a_gate_or_verifier_that_names_no_user_nor_allow_root() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI runs as root, so this test must run there"
        );
        eprintln!("skipping: the refusal is a root server's");
        return;
    }
    let gate = "[gates.tests]\nkind = \"command\"\nargv = [\"/bin/true\"]\n";
    let verifier = "[verifiers.judge]\nkind = \"command\"\nargv = [\"/bin/true\"]\n";
    for (toml, named) in [(gate, "gates.tests"), (verifier, "verifiers.judge")] {
        let error = start_error(toml).await.expect("the server does not start");
        assert!(
            error.contains(named) && error.contains("allow_root") && error.contains("user"),
            "{error}"
        );
        for extra in ["user = \"nobody\"", "allow_root = true"] {
            let error = start_error(&format!("{toml}{extra}")).await;
            assert_eq!(error, None, "{named} with {extra}");
        }
    }
    let retired = format!("{gate}allow_root = true\nverdict = \"file\"\n");
    let error = start_error(&retired).await.expect("`file` is refused");
    assert!(error.contains("verdict = \"fd\""), "{error}");
}

#[tokio::test]
async fn nproc_is_refused_without_a_user_and_file_size_mb_ends_a_program_that_writes_more() {
    let error = start_error(
        "[gates.tests]\nkind = \"command\"\nargv = [\"/bin/true\"]\nallow_root = true\nnproc = 8\n",
    )
    .await
    .expect("nproc needs a user");
    assert!(
        error.contains("gates.tests") && error.contains("user"),
        "{error}"
    );

    let script = "head -c 3000000 /dev/zero > big.bin || exit 1\necho '{\"verdict\": \"PASS\"}'";
    let dir = tempfile::tempdir().unwrap();
    let toml = gate_toml(&dir, script, 10_000, "file_size_mb = 1\nenv = [\"PATH\"]");
    let (_app, _, answer): (_, _, Value) = submit_with(&toml, json!({})).await;
    assert_eq!(answer["verdict"], "FAIL", "head got SIGXFSZ: {answer}");
    let size = std::fs::metadata(dir.path().join("big.bin")).unwrap().len();
    assert!(size <= 1 << 20, "the file stopped at the limit: {size}");
}
