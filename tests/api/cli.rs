//! The `quest` binary driven as a subprocess against a real server on a random
//! port: every exit status, the state file, `--json` shapes and the error cases.

use std::process::Stdio;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

use crate::helpers::*;

/// One agent's shell: the binary with its environment.
pub(crate) struct Shell {
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) session: Option<String>,
    pub(crate) agent: String,
    pub(crate) state: TempDir,
}

pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl Shell {
    pub(crate) fn new(app: &TestApp, token: &str, session: Option<&str>, agent: &str) -> Shell {
        Shell {
            url: app.base.clone(),
            token: token.to_owned(),
            session: session.map(String::from),
            agent: agent.to_owned(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    /// The agent's environment on `command`, with piped standard streams.
    pub(crate) fn environ<'a>(
        &self,
        command: &'a mut tokio::process::Command,
    ) -> &'a mut tokio::process::Command {
        command
            .env("QUEST_URL", &self.url)
            .env("QUEST_TOKEN", &self.token)
            .env("QUEST_AGENT", &self.agent)
            .env("QUEST_STATE_DIR", self.state.path())
            .env("QUEST_DATA_DIR", self.state.path().join("no-data-dir"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The developer's own shell may set it: a Shell without a session has none.
        match &self.session {
            Some(session) => command.env("QUEST_SESSION", session),
            None => command.env_remove("QUEST_SESSION"),
        };
        command
    }

    /// The binary with `args` in the agent's environment, not started.
    pub(crate) fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = crate::helpers::quest_binary();
        self.environ(command.args(args));
        command
    }

    async fn run_with_input(&self, args: &[&str], input: &str) -> Run {
        let mut child = self.command(args).spawn().expect("the quest binary runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub(crate) async fn run(&self, args: &[&str]) -> Run {
        self.run_with_input(args, "").await
    }
}

#[track_caller]
pub(crate) fn exits(run: &Run, code: i32) {
    assert_eq!(
        run.code, code,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_exits_with_a_status_for_every_outcome() {
    let (app, _gate) = spawn_app_with_slow_gate().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(2), companies(3)).await;
    let bot = Shell::new(&app, &token, Some(&session), "bot-1");
    // A gate that runs a process: its submissions are PENDING until it decides.
    let slow = app.scan(slow_config(2), companies(1)).await;
    let slow_bot = Shell::new(&app, &token, Some(&slow), "bot-1");

    let next = bot.run(&["next"]).await;
    exits(&next, 0);
    assert!(
        next.stdout.contains("Find the contact email") && next.stdout.contains("Company 0000"),
        "{}",
        next.stdout
    );
    assert!(
        next.stdout.contains("quest submit --field email=<email>"),
        "{}",
        next.stdout
    );

    let fail = bot.run(&["submit", "--field", "email=nope"]).await;
    exits(&fail, 1);
    assert!(
        fail.stdout.contains("FAIL") && fail.stdout.contains("hint:"),
        "{}",
        fail.stdout
    );
    let done = bot.run(&["submit", "--field", "email=still-nope"]).await;
    exits(&done, 3);
    assert!(
        bot.run(&["submit", "--field", "email=a@b.test"])
            .await
            .stderr
            .contains("quest next"),
        "the lease is forgotten after DONE"
    );

    exits(&bot.run(&["next"]).await, 0);
    exits(
        &bot.run(&[
            "submit",
            "--data",
            r#"{"email": "a@b.test", "confidence": "low"}"#,
        ])
        .await,
        2,
    );

    exits(&bot.run(&["next"]).await, 0);
    let result = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(result.path(), r#"{"email": "c@d.test"}"#).unwrap();
    exits(
        &bot.run(&["submit", "--file", result.path().to_str().unwrap()])
            .await,
        0,
    );

    exits(&slow_bot.run(&["next"]).await, 0);
    let pending = slow_bot.run(&["submit", "--wait", "0", "--json"]).await;
    exits(&pending, 64);
    let pending = slow_bot
        .run_with_input(
            &["submit", "--wait", "0", "--file", "-"],
            r#"{"email": "e@f.test"}"#,
        )
        .await;
    exits(&pending, 4);
    assert!(pending.stdout.contains("quest wait"), "{}", pending.stdout);
    exits(&slow_bot.run(&["wait"]).await, 0);
    exits(&slow_bot.run(&["next"]).await, 11);

    let finished = bot.run(&["next"]).await;
    exits(&finished, 11);
    // The quest that went to a person is a person's now: the agents are done.
    assert_eq!(app.status(&session).await["review"], 1);
    assert_eq!(
        finished.stdout.trim(),
        "Stop here: agents are done; 1 waits for a person."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_says_wait_while_others_hold_the_last_quest() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let one = Shell::new(&app, &token, Some(&session), "one");
    let two = Shell::new(&app, &token, Some(&session), "two");
    exits(&one.run(&["next"]).await, 0);
    let wait = two.run(&["next"]).await;
    exits(&wait, 10);
    // On stderr, so that a loop writing stdout to its prompt file still sees it.
    assert!(
        wait.stderr.contains("retry_after_seconds=30") && wait.stdout.is_empty(),
        "{}|{}",
        wait.stdout,
        wait.stderr
    );
    let json = two.run(&["next", "--json"]).await;
    exits(&json, 10);
    assert_eq!(json.json()["retry_after_seconds"], 30, "{}", json.stdout);
    let again = one.run(&["next", "--json"]).await;
    exits(&again, 0);
    assert_eq!(
        again.json()["status"],
        "assigned",
        "the held quest is returned again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_is_the_servers_json() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let bot = Shell::new(&app, &token, Some(&session), "bot");
    let next = bot.run(&["next", "--json"]).await;
    exits(&next, 0);
    let body = next.json();
    assert_eq!(body["status"], "assigned");
    for key in ["quest", "lease", "prompt", "submit"] {
        assert!(body.get(key).is_some(), "missing {key}: {body}");
    }
    let submit = bot
        .run(&["submit", "--json", "--field", "email=a@b.test"])
        .await;
    exits(&submit, 0);
    let body = submit.json();
    assert_eq!(
        (body["verdict"].as_str(), body["state"].as_str()),
        (Some("PASS"), Some("PASS"))
    );
    assert!(body["submission_id"].is_string() && body["remaining"] == 0);
    let finished = bot.run(&["next", "--json"]).await;
    exits(&finished, 11);
    assert_eq!(finished.json(), json!({"status": "finished"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_with_their_own_exit_status() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bots").await;
    let viewer = app.token("viewer", "eyes").await;
    let session = app.scan(contact_config(3), companies(2)).await;

    let mut down = Shell::new(&app, &agent, Some(&session), "bot");
    down.url = "http://127.0.0.1:9".into();
    let run = down.run(&["next"]).await;
    exits(&run, 69);
    assert!(
        run.stderr.contains("quest serve") && run.stderr.contains("QUEST_URL"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stderr.trim().lines().count(),
        1,
        "one line: {}",
        run.stderr
    );

    let run = Shell::new(&app, "qst_wrong", Some(&session), "bot")
        .run(&["next"])
        .await;
    exits(&run, 77);
    assert!(run.stderr.contains("QUEST_TOKEN"), "{}", run.stderr);

    let run = Shell::new(&app, &viewer, Some(&session), "bot")
        .run(&["next"])
        .await;
    exits(&run, 77);
    assert!(
        run.stderr.contains("agent"),
        "says which role is needed: {}",
        run.stderr
    );

    let bot = Shell::new(&app, &agent, Some(&session), "bot");
    exits(&bot.run(&["submit", "--field", "email=a@b.test"]).await, 64);
    exits(&bot.run(&["next"]).await, 0);
    app.clock.advance(std::time::Duration::from_secs(301));
    exits(
        &Shell::new(&app, &agent, Some(&session), "thief")
            .run(&["next"])
            .await,
        0,
    );
    let lost = bot.run(&["submit", "--field", "email=a@b.test"]).await;
    exits(&lost, 75);
    assert!(lost.stderr.contains("quest next"), "{}", lost.stderr);

    exits(&bot.run(&["submit", "--field", "broken"]).await, 64);
    exits(&bot.run(&["no-such-verb"]).await, 64);
    let help = bot.run(&["--help"]).await;
    exits(&help, 0);
    assert!(
        help.stdout.contains("Exit statuses") && help.stdout.contains("75"),
        "{}",
        help.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_scan_watch_review_export_and_manage_tokens() {
    let app = spawn_app().await;
    let admin = Shell::new(&app, &app.admin, None, "ops");
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("firms.csv");
    std::fs::write(&table, "firm,city\nAcme,Seoul\nBeta,Busan\nGamma,Daegu\n").unwrap();
    let config = dir.path().join("session.json");
    let mut session_config = contact_config(3);
    session_config["gate"]["kind"] = json!("not-this-one");
    std::fs::write(&config, session_config.to_string()).unwrap();

    let scan = admin
        .run(&[
            "scan",
            table.to_str().unwrap(),
            "--key",
            "firm",
            "--gate",
            "schema",
            "--config",
            config.to_str().unwrap(),
            "--name",
            "firms",
        ])
        .await;
    exits(&scan, 0);
    assert!(scan.stdout.contains("3 quests"), "{}", scan.stdout);
    let bad = admin
        .run(&[
            "scan",
            table.to_str().unwrap(),
            "--key",
            "nope",
            "--gate",
            "schema",
            "--config",
            config.to_str().unwrap(),
        ])
        .await;
    exits(&bad, 65);
    assert!(bad.stderr.contains("nope"), "{}", bad.stderr);

    let created = admin
        .run(&["token", "create", "--role", "agent", "--name", "cli-bot"])
        .await;
    exits(&created, 0);
    let secret = created.stdout.trim().to_owned();
    assert!(secret.starts_with("qst_"));
    // An agent verb never guesses its session: the most recent one may be
    // someone else's. It asks for QUEST_SESSION, which the scan printed.
    let unbound = Shell::new(&app, &secret, None, "b");
    let refused = unbound.run(&["next"]).await;
    exits(&refused, 64);
    assert!(
        refused.stderr.contains("QUEST_SESSION"),
        "{}",
        refused.stderr
    );
    let firms = scan
        .stdout
        .split("QUEST_SESSION=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the scan prints the session for the agents")
        .to_owned();
    let bot = Shell::new(&app, &secret, Some(&firms), "b");
    for result in [
        r#"{"email": "a@acme.test", "confidence": "low"}"#,
        r#"{"email": "b@beta.test", "confidence": "low"}"#,
    ] {
        exits(&bot.run(&["next"]).await, 0);
        exits(&bot.run(&["submit", "--data", result]).await, 2);
    }

    let list = admin.run(&["review", "list", "--json"]).await;
    exits(&list, 0);
    let queue = list.json();
    assert_eq!(queue.as_array().unwrap().len(), 2);
    let first = queue[0]["id"].as_str().unwrap().to_owned();
    exits(
        &admin
            .run(&["review", "approve", &first, "--note", "ok"])
            .await,
        0,
    );
    exits(&admin.run(&["review", "approve", &first]).await, 75);
    let interactive = admin
        .run_with_input(&["review"], "r\nwrong company\n")
        .await;
    exits(&interactive, 0);
    assert!(
        interactive.stdout.contains("rejected 1"),
        "{}",
        interactive.stdout
    );

    let status = admin.run(&["status"]).await;
    exits(&status, 0);
    assert!(
        status.stdout.contains("firms") && status.stdout.contains('#'),
        "{}",
        status.stdout
    );

    // A re-check of the PASS quests; status then says what it found.
    let recheck = admin.run(&["recheck"]).await;
    exits(&recheck, 0);
    assert!(recheck.stdout.contains("PASS quests"), "{}", recheck.stdout);
    let mut shown = String::new();
    for _ in 0..500 {
        shown = admin.run(&["status"]).await.stdout;
        if shown.contains("re-checked ") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        shown.contains("0 stale, 0 unconfirmed (they stay PASS)"),
        "{shown}"
    );

    let out = dir.path().join("firms.result.csv");
    exits(
        &admin.run(&["export", "-o", out.to_str().unwrap()]).await,
        0,
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("firm,city,quest_state"), "{text}");
    assert!(text.contains("Acme,Seoul,PASS,reviewer:admin"), "{text}");
    exits(
        &admin
            .run(&["export", "-o", dir.path().join("x.pdf").to_str().unwrap()])
            .await,
        64,
    );

    let tokens = admin.run(&["token", "list", "--json"]).await;
    exits(&tokens, 0);
    let id = tokens
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "cli-bot")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    exits(&admin.run(&["token", "revoke", &id]).await, 0);
    exits(&bot.run(&["next"]).await, 77);

    let prompt = admin.run(&["agent-prompt"]).await;
    exits(&prompt, 0);
    assert!(
        prompt.stdout.contains("quest next")
            && prompt.stdout.contains(&format!("QUEST_SESSION={firms} ")),
        "the instruction names the session: {}",
        prompt.stdout
    );
    assert!(
        prompt
            .stderr
            .contains(&format!("using session firms ({firms}), the most recent")),
        "an operator verb says which session it took: {}",
        prompt.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_different_tokens_never_share_a_remembered_lease() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (a, b) = (app.token("agent", "a").await, app.token("agent", "b").await);
    let state = tempfile::tempdir().unwrap();
    let one = Shell::new(&app, &a, Some(&session), "");
    let two = Shell::new(&app, &b, Some(&session), "");
    // The same state dir for both and no agent names, as two tools on one machine.
    let shared = state.path().to_owned();
    let run = |shell: &Shell, args: &'static [&'static str]| {
        let mut command = crate::helpers::quest_binary();
        command
            .args(args)
            .env("QUEST_URL", &shell.url)
            .env("QUEST_TOKEN", &shell.token)
            .env("QUEST_SESSION", shell.session.as_deref().unwrap())
            .env("QUEST_STATE_DIR", &shared);
        async move { command.output().await.unwrap().status.code() }
    };
    assert_eq!(run(&one, &["next"]).await, Some(0));
    assert_eq!(run(&two, &["next"]).await, Some(0));
    assert_eq!(
        run(&one, &["submit", "--field", "email=a@a.test"]).await,
        Some(0)
    );
    assert_eq!(
        run(&two, &["submit", "--field", "email=b@b.test"]).await,
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_says_when_a_result_repeats_a_fail_and_keeps_leases_alive() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    // `note` is declared, so that the export has a `result_note` column.
    let session = app
        .scan(declaring(contact_config(3), &["note"]), companies(2))
        .await;
    let bot = Shell::new(&app, &token, Some(&session), "bot");
    exits(&bot.run(&["next"]).await, 0);
    exits(&bot.run(&["submit", "--field", "email=bad"]).await, 1);
    // Issue 18: the same result after a printed FAIL is checked again and
    // costs a try, and its first fact says that nothing changed.
    let again = bot.run(&["submit", "--field", "email=bad"]).await;
    exits(&again, 1);
    assert!(
        again.stdout.contains("FAIL: 1 try left.")
            && again.stdout.contains("unchanged")
            && again
                .stdout
                .contains("this result is identical to submission"),
        "{}",
        again.stdout
    );
    exits(&bot.run(&["heartbeat"]).await, 0);
    exits(&bot.run(&["release"]).await, 0);
    exits(&bot.run(&["heartbeat"]).await, 64);
    let pending_field = bot.run(&["next"]).await;
    exits(&pending_field, 0);
    let odd = bot
        .run(&[
            "submit",
            "--json",
            "--field",
            "email=x@y.test",
            "--field",
            "note=ratio:=1",
        ])
        .await;
    exits(&odd, 0);
    let mut bad_url = Shell::new(&app, &token, Some(&session), "bot");
    bad_url.url = "127.0.0.1:8080".into();
    let run = bad_url.run(&["next"]).await;
    exits(&run, 64);
    assert!(run.stderr.contains("http://"), "{}", run.stderr);
    let quest = app.get("/v1/review", &app.admin).await.expect(200);
    assert!(quest.as_array().unwrap().is_empty());
    let export = app
        .bytes(&format!("/v1/sessions/{session}/export?format=jsonl"))
        .await
        .1;
    assert!(
        String::from_utf8_lossy(&export).contains(r#""result_note":"ratio:=1""#),
        "a value may contain `:=`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_review_is_released_and_a_rejection_needs_a_note() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(
        &agent,
        &q,
        &l,
        json!({"email": "a@b.test", "confidence": "low"}),
    )
    .await
    .expect(200);
    let ana = Shell::new(
        &app,
        &app.token("reviewer", "ana").await,
        Some(&session),
        "",
    );
    let skipped = ana.run_with_input(&["review"], "s\n").await;
    exits(&skipped, 0);
    assert!(skipped.stdout.contains("skipped 1"), "{}", skipped.stdout);
    let ben = app.token("reviewer", "ben").await;
    app.post(&format!("/v1/review/{q}/claim"), &ben, json!({}))
        .await
        .expect(200);
    app.post(
        &format!("/v1/review/{q}"),
        &ben,
        json!({"decision": "reject", "note": " "}),
    )
    .await
    .refused(422, "note_required");
    let rejected = ana
        .run(&["review", "reject", &q, "--note", "wrong company"])
        .await;
    exits(&rejected, 75);
}

#[tokio::test]
async fn token_create_sets_the_lease_cap_and_token_list_shows_it() {
    let app = spawn_app().await;
    let admin = Shell::new(&app, &app.admin, None, "ops");
    let created = admin
        .run(&[
            "token",
            "create",
            "--role",
            "agent",
            "--name",
            "capped",
            "--max-leases",
            "3",
            "--json",
        ])
        .await;
    exits(&created, 0);
    assert_eq!(created.json()["max_leases"], 3, "{}", created.stdout);
    let refused = admin
        .run(&[
            "token",
            "create",
            "--role",
            "viewer",
            "--name",
            "eve",
            "--max-leases",
            "3",
        ])
        .await;
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("max_leases"), "{}", refused.stderr);
    let list = admin.run(&["token", "list"]).await;
    exits(&list, 0);
    let line = list
        .stdout
        .lines()
        .find(|l| l.contains("capped"))
        .unwrap_or_default();
    assert!(
        list.stdout.contains("MAX LEASES") && line.split_whitespace().any(|w| w == "3"),
        "{}",
        list.stdout
    );
}

#[tokio::test]
async fn agent_verbs_never_borrow_the_admin_token_file_and_operator_verbs_still_do() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(2), companies(1)).await;
    // An agent harness started in the server's directory: the admin token
    // file is right there, and the agent has no token of its own.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin.token"), &app.admin).unwrap();
    let run = |args: &'static [&'static str]| {
        let mut command = crate::helpers::quest_binary();
        command
            .args(args)
            .env("QUEST_URL", &app.base)
            .env("QUEST_AGENT", "harness")
            .env("QUEST_DATA_DIR", dir.path())
            .env("QUEST_STATE_DIR", dir.path().join("state"))
            .stdin(Stdio::null());
        async move {
            let out = command.output().await.unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    for verb in [
        &["next"][..],
        &["submit", "--field", "email=a@b.test"],
        &["heartbeat"],
        &["release"],
        &["wait"],
        &["mcp"],
        &["guard"],
    ] {
        let (code, stderr) = run(verb).await;
        assert_eq!(code, 77, "{verb:?}: {stderr}");
        assert!(stderr.contains("QUEST_TOKEN"), "{verb:?}: {stderr}");
    }
    let (code, stderr) = run(&["status"]).await;
    assert_eq!(code, 0, "an operator verb keeps the fallback: {stderr}");
    let (code, stderr) = run(&["token", "list"]).await;
    assert_eq!(code, 0, "{stderr}");
    let status = app.status(&session).await;
    assert_eq!(status["leased"], 0, "nothing was leased as admin: {status}");
}
