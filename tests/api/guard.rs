//! `quest guard` fed the hook JSON that Claude Code and Codex CLI send, against a
//! real server: refusals with the next step and the facts, allowances when the
//! session is finished or the rest is held by others, the give-up after refusals
//! without progress, failing open (and closed on request), and a scripted agent
//! that only uses the MCP tools and is kept working until every quest is decided.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::helpers::*;
use crate::mcp::{AgentEnv, data};

/// What the guard answered.
#[derive(Debug)]
pub(crate) struct Stop {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Stop {
    /// The refusal's reason; fails unless the guard refused with the hook's JSON.
    #[track_caller]
    fn refused(&self) -> String {
        assert_eq!(self.code, 0, "{self:?}");
        let body: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("a refusal is the hook's JSON ({e}): {self:?}"));
        assert_eq!(body["decision"], "block", "{self:?}");
        body["reason"].as_str().unwrap().to_owned()
    }

    /// The stderr line; fails unless the guard allowed the stop (exit 0, no stdout).
    #[track_caller]
    pub(crate) fn allowed(&self) -> String {
        assert_eq!(self.code, 0, "{self:?}");
        assert_eq!(
            self.stdout, "",
            "an allowance prints nothing on stdout: {self:?}"
        );
        assert_eq!(
            self.stderr.lines().count(),
            1,
            "one line says why: {self:?}"
        );
        self.stderr.clone()
    }
}

/// Claude Code's Stop hook input.
pub(crate) fn stop_hook(session: &str) -> String {
    json!({
        "session_id": session,
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/work",
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": false
    })
    .to_string()
}

/// Runs `quest guard` with `input` on stdin.
pub(crate) async fn guard(env: &AgentEnv, args: &[&str], input: &str) -> Stop {
    let mut full = vec!["guard"];
    full.extend_from_slice(args);
    let mut child = env
        .command(&full)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    Stop {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_quest_is_refused_with_the_next_command_and_after_a_fail_with_its_facts() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bot = AgentEnv::new(&app, &token, &session, "bot-1");
    let (code, out) = bot.cli(&["next", "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let next: Value = serde_json::from_str(&out).unwrap();
    let quest = next["quest"]["id"].as_str().unwrap().to_owned();

    let reason = guard(&bot, &[], &stop_hook("h1")).await.refused();
    assert!(
        reason.contains("You still hold quest `Company 0000`"),
        "{reason}"
    );
    assert!(
        reason.contains("`quest next`") && reason.contains("quest_next"),
        "{reason}"
    );
    assert!(
        reason.contains("quest_submit") && reason.contains("`quest submit"),
        "{reason}"
    );

    assert_eq!(bot.cli(&["submit", "--field", "email=nope"]).await.0, 1);
    let reason = guard(&bot, &[], &stop_hook("h1")).await.refused();
    assert!(
        reason.contains("quest `Company 0000` failed these checks (2 tries left)"),
        "{reason}"
    );
    let facts = app.quest(&quest).await["last_facts"].clone();
    assert!(!facts.as_array().unwrap().is_empty());
    for fact in facts.as_array().unwrap() {
        for part in ["check", "expected", "hint"] {
            let said = fact[part].as_str().unwrap();
            assert!(reason.contains(said), "{reason} lacks the {part} of {fact}");
        }
    }
    // Looking changed nothing: the quest is still the agent's, nothing else was leased.
    let status = app.status(&session).await;
    assert_eq!(
        (status["leased"].as_u64(), status["open"].as_u64()),
        (Some(1), Some(1)),
        "{status}"
    );
    assert_eq!(status["submissions"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_session_lets_the_agent_stop() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let bot = AgentEnv::new(&app, &token, &session, "bot-1");
    assert_eq!(bot.cli(&["next"]).await.0, 0);
    assert_eq!(
        bot.cli(&["submit", "--field", "email=info@c.test"]).await.0,
        0
    );

    let line = guard(&bot, &[], &stop_hook("h1")).await.allowed();
    assert!(
        line.contains("the session is finished") && line.contains("the stop is allowed"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_held_by_other_agents_lets_the_agent_stop() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bot = AgentEnv::new(&app, &token, &session, "bot-1");
    // bot-1 passes one quest; bot-2 holds the other.
    assert_eq!(bot.cli(&["next"]).await.0, 0);
    assert_eq!(
        bot.cli(&["submit", "--field", "email=info@c.test"]).await.0,
        0
    );
    assigned(&app.next(&token, &session, "bot-2").await);

    let line = guard(&bot, &[], &stop_hook("h1")).await.allowed();
    assert!(line.contains("held by other agents"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_refusals_without_progress_let_the_agent_stop_with_the_give_up_line() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bot = AgentEnv::new(&app, &token, &session, "bot-1");

    for _ in 0..3 {
        let reason = guard(&bot, &[], &stop_hook("h1")).await.refused();
        assert!(
            reason.contains("2 quests of this session are open"),
            "{reason}"
        );
    }
    let line = guard(&bot, &[], &stop_hook("h1")).await.allowed();
    assert!(
        line.contains("gave up after 3 refusals without progress")
            && line.contains("remaining still 2"),
        "{line}"
    );
    // Another harness session is counted apart; progress starts a new count.
    guard(&bot, &[], &stop_hook("h2")).await.refused();
    assert_eq!(bot.cli(&["next"]).await.0, 0);
    assert_eq!(
        bot.cli(&["submit", "--field", "email=info@c.test"]).await.0,
        0
    );
    let reason = guard(&bot, &[], &stop_hook("h1")).await.refused();
    assert!(reason.contains("1 remaining"), "{reason}");
    // --max-blocks sets the limit.
    let line = guard(&bot, &["--max-blocks", "1"], &stop_hook("h1"))
        .await
        .allowed();
    assert!(line.contains("gave up after 1 refusals"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_be_reached_fails_open_unless_told_to_fail_closed() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let mut bot = AgentEnv::new(&app, &token, &session, "bot-1");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    bot.url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);

    let line = guard(&bot, &[], &stop_hook("h1")).await.allowed();
    assert!(
        line.contains("cannot reach the quest server") && line.contains("failing open"),
        "{line}"
    );
    let reason = guard(&bot, &["--fail-closed"], &stop_hook("h1"))
        .await
        .refused();
    assert!(
        reason.contains("cannot check your quest session") && reason.contains("fail closed"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_that_is_no_stop_hook_fails_open_with_a_clear_line() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bot = AgentEnv::new(&app, &token, &session, "bot-1");
    for (input, says) in [
        ("not json", "not a Stop hook's JSON"),
        ("", "stdin is empty"),
        (
            r#"{"hook_event_name": "PreToolUse", "session_id": "h1"}"#,
            "PreToolUse",
        ),
    ] {
        let line = guard(&bot, &[], input).await.allowed();
        assert!(
            line.contains(says) && line.contains("failing open"),
            "{line}"
        );
    }
    guard(&bot, &["--fail-closed"], "not json").await.refused();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_that_never_took_a_quest_is_let_go_and_one_holding_a_quest_is_not() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let helper = AgentEnv::new(&app, &token, &session, "researcher");
    let subagent_stop = json!({
        "session_id": "h1", "transcript_path": "/tmp/t.jsonl", "cwd": "/work",
        "hook_event_name": "SubagentStop", "stop_hook_active": false,
        "agent_id": "a1", "agent_type": "researcher"
    })
    .to_string();
    let line = guard(&helper, &[], &subagent_stop).await.allowed();
    assert!(line.contains("never took a quest"), "{line}");

    let worker = AgentEnv::new(&app, &token, &session, "worker");
    assert_eq!(worker.cli(&["next"]).await.0, 0);
    let reason = guard(&worker, &[], &subagent_stop).await.refused();
    assert!(reason.contains("You still hold quest"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_config_binds_the_guard_and_the_server_to_the_session_for_claude_and_codex() {
    let app = spawn_app().await;
    let session = uuid::Uuid::now_v7().to_string();
    let bot = AgentEnv::new(&app, "unused", &session, "bot-1");
    let (code, claude) = bot.cli(&["guard", "--print-config", "claude"]).await;
    assert_eq!(code, 0);
    // One file, saved as it is: .claude/settings.json.
    let settings: Value = serde_json::from_str(&claude).expect("the Claude Code settings are JSON");
    let guard = format!("quest guard --session {session}");
    for event in ["Stop", "SubagentStop"] {
        assert_eq!(
            settings["hooks"][event][0]["hooks"][0]["command"],
            guard.as_str(),
            "{claude}"
        );
    }
    assert_eq!(
        settings["env"]["QUEST_SESSION"],
        session.as_str(),
        "{claude}"
    );
    assert_eq!(settings["env"]["QUEST_URL"], app.base.as_str(), "{claude}");
    let (code, codex) = bot.cli(&["guard", "--print-config", "codex"]).await;
    assert_eq!(code, 0);
    let parsed: toml::Table = toml::from_str(&codex).expect("the Codex config is TOML");
    let command = parsed["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(
        command.starts_with("quest guard") && command.ends_with(&session),
        "{codex}"
    );
    assert_eq!(
        parsed["mcp_servers"]["quest"]["command"].as_str(),
        Some("quest")
    );
}

/// A lazy agent that only uses the MCP tools: it does one quest per turn and
/// then tries to stop; the guard sends it back until the session is finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_mcp_agent_is_kept_working_by_the_guard_until_every_quest_is_decided() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(2), companies(5)).await;
    let env = AgentEnv::new(&app, &token, &session, "lazy-1");
    let mcp = env.mcp().await;

    let mut turns = 0;
    let mut refusals = Vec::new();
    let allowed = loop {
        turns += 1;
        assert!(turns < 20, "the agent never finished: {refusals:#?}");
        let next = data(&mcp.call("quest_next", None).await);
        if next["status"] == "assigned" {
            let key = next["quest"]["key"].as_str().unwrap();
            let row: usize = key.trim_start_matches("Company ").parse().unwrap();
            // Every quest: first a careless try, then what the facts ask for;
            // row 3 stays wrong (DONE) and row 4 is unsure (REVIEW).
            let first = data(
                &mcp.call("quest_submit", Some(json!({"result": {"email": "n/a"}})))
                    .await,
            );
            assert_eq!(first["verdict"], "FAIL", "{first}");
            let second = match row {
                3 => json!({"email": "still n/a"}),
                4 => json!({"email": format!("info@company{row:04}.test"), "confidence": "low"}),
                _ => json!({"email": format!("info@company{row:04}.test")}),
            };
            let verdict = data(
                &mcp.call("quest_submit", Some(json!({"result": second})))
                    .await,
            );
            assert_ne!(
                verdict["state"], "TODO",
                "max_tries is 2: the second try decides: {verdict}"
            );
        }
        // The agent says "done" and tries to stop.
        let stop = guard(&env, &[], &stop_hook("run-1")).await;
        if stop.stdout.is_empty() {
            break stop.allowed();
        }
        refusals.push(stop.refused());
    };
    // Row 4 went to REVIEW: the agents are done, a person is not.
    assert!(
        allowed.contains("agents are done; 1 waits for a person"),
        "{allowed}"
    );
    assert_eq!(
        refusals.len(),
        4,
        "refused after every turn but the one that decided the last quest: {refusals:#?}"
    );
    assert!(
        refusals.iter().all(|r| r.contains("quest_next")),
        "{refusals:#?}"
    );
    let status = app.status(&session).await;
    assert_sums(&status);
    assert_eq!(
        (
            &status["remaining"],
            &status["pass"],
            &status["review"],
            &status["done"]
        ),
        (&json!(0), &json!(3), &json!(1), &json!(1)),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_lease_read_renews_nothing_and_answers_for_the_callers_own_agents() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let viewer = app.token("viewer", "watcher").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let next = app.next(&token, &session, "bot-1").await;
    let (quest, lease) = assigned(&next);
    let path = format!("/v1/sessions/{session}/lease?agent=bot-1");

    let held = app.get(&path, &token).await.expect(200);
    assert_eq!(held["agent"], "bot-1");
    assert_eq!(held["lease"]["id"], lease.as_str());
    assert_eq!(held["lease"]["quest_id"], quest.as_str());
    assert_eq!(held["lease"]["key"], "Company 0000");
    assert_eq!(held["lease"]["phase"], "leased");
    assert_eq!(
        held["lease"]["expires_at"], next["lease"]["expires_at"],
        "reading renews nothing"
    );
    let again = app.get(&path, &token).await.expect(200);
    assert_eq!(again, held);

    // Another name, another token, the admin: none of them is bot-1 of this token.
    let other = app.token("agent", "others").await;
    for (token, path) in [
        (&token, format!("/v1/sessions/{session}/lease?agent=bot-2")),
        (&token, format!("/v1/sessions/{session}/lease")),
        (&other, path.clone()),
        (&app.admin, path.clone()),
    ] {
        assert_eq!(
            app.get(&path, token).await.expect(200)["lease"],
            Value::Null,
            "{path}"
        );
    }
    app.get(&path, &viewer).await.refused(403, "forbidden");
    let missing = format!("/v1/sessions/{}/lease", uuid::Uuid::new_v4());
    app.get(&missing, &token).await.refused(404, "not_found");
    let long = format!("/v1/sessions/{session}/lease?agent={}", "x".repeat(300));
    app.get(&long, &token).await.refused(422, "invalid_agent");

    // Once decided, the quest is no longer held.
    app.submit(&token, &quest, &lease, json!({"email": "a@b.test"}))
        .await
        .expect(200);
    assert_eq!(
        app.get(&path, &token).await.expect(200)["lease"],
        Value::Null
    );
    let status = app.status(&session).await;
    assert_eq!(
        (status["open"].as_u64(), status["leased"].as_u64()),
        (Some(1), Some(0)),
        "{status}"
    );
}

/// An agent that finished its session is not sent into one an operator
/// scanned afterwards: with no session configured (QUEST_SESSION empty, which
/// is unset), the guard, the tools and the CLI stay on the session of the
/// agent's last lease; an agent that never held one is refused, naming
/// QUEST_SESSION, and its guard fails open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harnesses_stay_bound_to_the_agents_own_session_when_none_is_configured() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let mine = app.scan(contact_config(3), companies(1)).await;
    let bot = AgentEnv::new(&app, &token, &mine, "bot-1");
    assert_eq!(bot.cli(&["next"]).await.0, 0);
    let (code, out) = bot
        .cli(&["submit", "--field", "email=info@company0000.test"])
        .await;
    assert_eq!(code, 0, "{out}");
    let later = app.scan(contact_config(3), companies(4)).await;

    let unset = AgentEnv {
        session: String::new(),
        ..bot.clone()
    };
    let allowed = guard(&unset, &[], &stop_hook("h1")).await.allowed();
    assert!(allowed.contains("the session is finished"), "{allowed}");
    let mcp = unset.mcp().await;
    let next = data(&mcp.call("quest_next", None).await);
    assert_eq!(next["status"], "finished", "{next}");
    mcp.client.cancel().await.unwrap();
    assert_eq!(unset.cli(&["next"]).await.0, 11, "the CLI stays on it too");
    assert_eq!(
        app.status(&later).await["leased"],
        0,
        "nothing of the later session was leased"
    );

    let stranger = AgentEnv::new(&app, &token, "", "stranger");
    let refused = stranger
        .command(&["next"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(64));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("QUEST_SESSION"), "{said}");
    let allowed = guard(&stranger, &["--fail-closed"], &stop_hook("h2"))
        .await
        .allowed();
    assert!(allowed.contains("QUEST_SESSION"), "{allowed}");
    let mcp = stranger.mcp().await;
    let refused = mcp.call("quest_next", None).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        crate::mcp::text(&refused).contains("QUEST_SESSION in its environment"),
        "{}",
        crate::mcp::text(&refused)
    );
    assert_eq!(app.status(&later).await["leased"], 0);
}
