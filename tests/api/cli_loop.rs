//! The agent loop as the README writes it, and the CLI's side of issue 18,
//! point 1: an agent that repeats itself cannot hold a quest forever, a
//! killed `quest submit` run again costs nothing, `quest next --wait` sleeps
//! out "nothing open now" itself.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{Run, Shell, exits};
use crate::helpers::*;

/// The README's agent loop: the shell block that holds `while true; do`.
fn readme_loop() -> String {
    let readme = include_str!("../../README.md");
    readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(code, _)| code))
        .find(|code| code.contains("while true; do"))
        .expect("the README shows the agent loop in a sh block")
        .to_owned()
}

/// Writes an executable script.
fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A quest's submissions.
async fn submissions(app: &TestApp, quest: &str) -> Vec<Value> {
    app.quest(quest).await["submissions"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_loop_ends_with_the_quest_in_done_when_the_agent_repeats_itself() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let bot = Shell::new(&app, &token, Some(&session), "bot-1");
    // The loop's first `quest next` hands this agent the quest it holds.
    let leased = bot.run(&["next", "--json"]).await;
    exits(&leased, 0);
    let quest = leased.json()["quest"]["id"].as_str().unwrap().to_owned();
    let bin = tempfile::tempdir().unwrap();
    // An agent in a loop: whatever the prompt says, the same wrong result.
    script(
        &bin.path().join("my-agent"),
        "#!/bin/sh\ncat > /dev/null\necho '{\"email\": \"still-no-at-sign\"}'\n",
    );
    let quest_dir = Path::new(env!("CARGO_BIN_EXE_quest")).parent().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut shell = tokio::process::Command::new("/bin/sh");
    shell.env_clear();
    bot.environ(shell.arg("-c").arg(readme_loop()))
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/bin:/bin",
                bin.path().display(),
                quest_dir.display()
            ),
        )
        .current_dir(work.path())
        .kill_on_drop(true);
    // A guard against a loop that never ends, which is the bug: not a timing.
    let out = tokio::time::timeout(Duration::from_secs(300), shell.output())
        .await
        .expect("the README loop ends")
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    exits(&run, 0);
    assert!(run.stdout.contains("DONE: out of tries"), "{}", run.stdout);
    let status = app.status(&session).await;
    assert_eq!(
        (status["done"].as_u64(), status["remaining"].as_u64()),
        (Some(1), Some(0))
    );
    let view = app.quest(&quest).await;
    assert_eq!(
        (view["state"].as_str(), view["tries"].as_u64()),
        (Some("DONE"), Some(3))
    );
    let subs = submissions(&app, &quest).await;
    assert_eq!(subs.len(), 3, "one submission per try");
    for (i, s) in subs.iter().enumerate().skip(1) {
        let previous = subs[i - 1]["id"].as_str().unwrap();
        assert_eq!(s["facts"][0]["check"], "unchanged", "{s}");
        assert!(
            s["facts"][0]["hint"]
                .as_str()
                .unwrap()
                .contains(&format!("identical to submission {previous}")),
            "{s}"
        );
    }
}

/// A server whose command gate `held` answers FAIL once the file `release`
/// exists in its directory: until then the server holds every submit.
async fn spawn_app_with_held_gate() -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("held.sh"),
        "cat > /dev/null\nwhile [ ! -e ./release ]; do /bin/sleep 0.05; done\n\
         echo 'the result has no @' >&2\nexit 1\n",
    )
    .unwrap();
    let toml = format!(
        "[gates.held]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./held.sh\"]\n\
         workdir = \"{}\"\ntimeout_ms = 60000\n",
        dir.path().display()
    );
    (spawn_app_with(&toml).await, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_quest_submit_run_again_costs_nothing() {
    let (app, gate) = spawn_app_with_held_gate().await;
    let token = app.token("agent", "bots").await;
    let config = json!({"key_column": "company", "max_tries": 3, "gate": {"kind": "command", "name": "held"}});
    let session = app.scan(config, companies(1)).await;
    let bot = Shell::new(&app, &token, Some(&session), "bot");
    let leased = bot.run(&["next", "--json"]).await;
    exits(&leased, 0);
    let quest = leased.json()["quest"]["id"].as_str().unwrap().to_owned();

    // The server holds the answer (the gate waits), so the CLI is killed
    // after it sent the submit, and before it printed anything.
    let mut first = bot
        .command(&["submit", "--field", "email=nope"])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while submissions(&app, &quest).await.is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await.unwrap();
    let killed = first.wait_with_output().await.unwrap();
    assert!(
        killed.stdout.is_empty(),
        "killed before it printed a verdict"
    );
    std::fs::write(gate.path().join("release"), "").unwrap();
    while app.quest(&quest).await["tries"] != 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let rerun = bot.run(&["submit", "--field", "email=nope"]).await;
    exits(&rerun, 1);
    assert!(
        rerun.stdout.contains("already recorded"),
        "{}",
        rerun.stdout
    );
    let view = app.quest(&quest).await;
    assert_eq!(view["tries"], 1, "the rerun used no try: {view}");
    let subs = submissions(&app, &quest).await;
    assert_eq!(subs.len(), 1, "and made no submission");

    // Its verdict printed, the same result again is a new try.
    let again = bot.run(&["submit", "--field", "email=nope"]).await;
    exits(&again, 1);
    assert_eq!(app.quest(&quest).await["tries"], 2);
    let subs = submissions(&app, &quest).await;
    assert_eq!(subs.len(), 2);
    assert_eq!(subs[1]["facts"][0]["check"], "unchanged", "{}", subs[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_wait_sleeps_out_nothing_open_and_asks_again_itself() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let mut config = contact_config(3);
    // The server's clock stands still in tests: the lease never expires, and
    // `next` says to retry in 1 s.
    config["lease_seconds"] = json!(1);
    let session = app.scan(config, companies(1)).await;
    let (quest, lease) = assigned(&app.next(&token, &session, "one").await);
    let two = Shell::new(&app, &token, Some(&session), "two");
    let mut waiting = two
        .command(&["next", "--wait", "--json"])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // It asked at least once and was told to wait (it says so on stderr).
    let mut stderr = waiting.stderr.take().unwrap();
    let mut said = Vec::new();
    while !String::from_utf8_lossy(&said).contains("Asking again in 1 s") {
        let mut chunk = [0u8; 256];
        let n = tokio::io::AsyncReadExt::read(&mut stderr, &mut chunk)
            .await
            .unwrap();
        assert!(n > 0, "stderr ended: {}", String::from_utf8_lossy(&said));
        said.extend_from_slice(&chunk[..n]);
    }
    app.post(
        &format!("/v1/quests/{quest}/release"),
        &token,
        json!({"lease_id": lease}),
    )
    .await
    .expect(204);
    let out = waiting.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "assigned after the release");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (answer["status"].as_str(), answer["quest"]["id"].as_str()),
        (Some("assigned"), Some(quest.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quest_mcp_follows_a_pending_verdict_with_the_same_key_at_no_try() {
    let (app, gate) = spawn_app_with_held_gate().await;
    let token = app.token("agent", "bots").await;
    let config = json!({"key_column": "company", "max_tries": 3, "gate": {"kind": "command", "name": "held"}});
    let session = app.scan(config, companies(1)).await;
    let env = crate::mcp::AgentEnv::new(&app, &token, &session, "mcp-1");
    let mcp = env.mcp().await;
    let next = crate::mcp::data(&mcp.call("quest_next", None).await);
    let quest = next["quest"]["id"].as_str().unwrap().to_owned();
    let result = Some(json!({"result": {"email": "nope"}}));

    // The gate holds its verdict past the tool's wait: PENDING.
    let pending = crate::mcp::data(&mcp.call("quest_submit", result.clone()).await);
    assert_eq!(pending["verdict"], "PENDING", "{pending}");
    std::fs::write(gate.path().join("release"), "").unwrap();
    while app.quest(&quest).await["tries"] != 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Following it is the same submit again: its key, its verdict, no try.
    let followed = crate::mcp::data(&mcp.call("quest_submit", result.clone()).await);
    assert_eq!(
        (
            followed["submission_id"].clone(),
            followed["verdict"].as_str(),
            followed["tries"].as_u64()
        ),
        (pending["submission_id"].clone(), Some("FAIL"), Some(1))
    );
    assert_eq!(submissions(&app, &quest).await.len(), 1);
    // The verdict given, the same result once more is a new try.
    let again = crate::mcp::data(&mcp.call("quest_submit", result).await);
    assert_eq!(
        (again["tries"].as_u64(), again["facts"][0]["check"].as_str()),
        (Some(2), Some("unchanged"))
    );
}
