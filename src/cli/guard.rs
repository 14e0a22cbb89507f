//! `quest guard`: a stop hook that takes the word "done" away from the agent.
//!
//! A harness (Claude Code's `Stop`/`SubagentStop`, Codex CLI's `Stop`) runs it
//! with the hook's JSON on stdin. It looks, without leasing or renewing
//! anything, at the agent's lease (the CLI's state file, checked against
//! `GET /v1/sessions/{id}/lease`) and the session's counts, then refuses the
//! stop (`{"decision": "block", "reason": ...}` on stdout, exit 0) while the
//! agent holds a quest or open quests remain, and allows it (exit 0, nothing on
//! stdout, one line on stderr) otherwise. It never wedges a harness: after
//! `--max-blocks` refusals in a row without progress it gives up, and when the
//! server or its input fails it fails open unless `--fail-closed` is given.
//! [`decide`] is the whole rule, pure; the rest gathers facts and prints.

use crate::domain::ids::{SessionId, SubmissionId};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;

use super::agent::{self, Surface};
use super::client::CliError;
use super::state::GuardMark;
use super::text::{clean, say, say_err};
use super::{Ctx, exit};
use crate::api::{AgentLease, HeldLease};
use crate::domain::{Fact, Phase};

/// `quest guard`.
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// Allow the stop after this many refusals in a row without progress
    /// (`remaining` unchanged and no new submission from this agent).
    #[arg(long, default_value_t = 3)]
    pub max_blocks: u32,
    /// Refuse the stop when the server cannot be asked or stdin is not a hook's
    /// JSON (default: allow it, so a guard never traps an agent because the server is down).
    #[arg(long)]
    pub fail_closed: bool,
    /// Print the configuration that installs `quest mcp` and this guard in a harness, and exit.
    #[arg(long, value_enum, value_name = "HARNESS")]
    pub print_config: Option<Harness>,
    /// Seconds to wait for stdin and the server before failing open (or closed).
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

/// Harnesses whose configuration `--print-config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Harness {
    /// Claude Code: one `.claude/settings.json` (the session and both hooks).
    Claude,
    /// Codex CLI: `config.toml` MCP server and hooks.
    Codex,
}

/// Which stop the hook reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The agent ends its turn.
    Stop,
    /// A subagent ends (Claude Code).
    SubagentStop,
}

/// The parts of a hook's input the guard reads; other fields are ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub event: Event,
    /// The harness's session, under which refusals are counted.
    pub session: String,
    pub stop_hook_active: bool,
}

#[derive(Deserialize)]
struct HookInput {
    hook_event_name: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    stop_hook_active: Option<bool>,
}

/// Reads a hook's JSON (`hook_event_name`, `session_id`, `stop_hook_active`, ...).
pub fn parse_hook(bytes: &[u8]) -> Result<Hook, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("stdin is empty; the harness must send the hook's JSON".into());
    }
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdin is not a Stop hook's JSON object ({e})"))?;
    // serde reads a struct from an array too, field by field: only an object is a hook.
    if !value.is_object() {
        return Err("stdin is JSON but not a Stop hook's JSON object".into());
    }
    let input: HookInput = serde_json::from_value(value)
        .map_err(|e| format!("stdin is not a Stop hook's JSON object ({e})"))?;
    let event = match input.hook_event_name.as_deref() {
        Some("Stop") => Event::Stop,
        Some("SubagentStop") => Event::SubagentStop,
        Some(other) => {
            return Err(format!(
                "hook_event_name is `{other}`; quest guard handles Stop and SubagentStop"
            ));
        }
        None => return Err("the hook's JSON has no hook_event_name".into()),
    };
    Ok(Hook {
        event,
        session: input.session_id.unwrap_or_default(),
        stop_hook_active: input.stop_hook_active.unwrap_or(false),
    })
}

/// What the guard found out about the agent and its session.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub event: Event,
    pub remaining: u64,
    pub open: u64,
    /// Quests waiting for a person.
    pub review: u64,
    /// The agent's live lease, as the server has it.
    pub lease: Option<HeldLease>,
    /// Facts of the last FAIL of the held quest, with tries left.
    pub last_facts: Vec<Fact>,
    pub tries_left: Option<u32>,
    /// The agent held a quest of this session at some point (now or in its state file).
    pub took_quest: bool,
    /// The agent's last submission, from its state file.
    pub submission: Option<SubmissionId>,
}

/// The guard's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Let the agent stop; the line says why.
    Allow(String),
    /// Refuse the stop; the reason says what to do next.
    Block(String),
}

/// The next step, as a sentence starts it and as a clause continues one.
const NEXT: &str = "Call the quest_next tool (or run `quest next`)";
const NEXT_CLAUSE: &str = "call the quest_next tool (or run `quest next`)";
const SUBMIT: &str = "quest_submit (or `quest submit --field NAME=VALUE ...`)";

fn lease_reason(lease: &HeldLease, facts: &[Fact], tries_left: Option<u32>) -> String {
    let key = &lease.key;
    if lease.phase == Phase::Checking {
        return format!(
            "The gate is still checking your submission for quest `{key}`. Wait for its verdict: call \
             quest_submit again with the same result (it costs no try), or run `quest wait`; then follow it."
        );
    }
    if !facts.is_empty() {
        let left = tries_left
            .map(|n| format!(" ({n} tries left)"))
            .unwrap_or_default();
        return format!(
            "Your last submission for quest `{key}` failed these checks{left}:{}\n\
             Fix each one and submit again with {SUBMIT}. If you lost the prompt, {NEXT_CLAUSE}: it hands \
             back the same quest and renews your lease. Do not stop while the quest is yours.",
            agent::facts_text(facts)
        );
    }
    format!(
        "You still hold quest `{key}`, and only the gate's verdict ends it. {NEXT}: it hands back \
         this quest and renews your lease. Do what its prompt says and submit the result with {SUBMIT}."
    )
}

/// The whole rule: whether to let the agent stop, and the refusal count to keep.
///
/// A refusal is counted per harness session; it is "without progress" when
/// `remaining` and the agent's last submission are what they were at the
/// previous refusal. Past `max_blocks` such refusals the stop is allowed.
pub fn decide(seen: &Seen, mark: Option<&GuardMark>, max_blocks: u32) -> (Decision, Option<u32>) {
    let reason = if seen.remaining == 0 {
        return (
            Decision::Allow(crate::domain::backlog::agents_done(seen.review)),
            None,
        );
    } else if let Some(lease) = &seen.lease {
        lease_reason(lease, &seen.last_facts, seen.tries_left)
    } else if seen.event == Event::SubagentStop && !seen.took_quest {
        return (
            Decision::Allow("this subagent never took a quest of the session".into()),
            None,
        );
    } else if seen.open > 0 {
        format!(
            "{} quests of this session are open ({} remaining) and you hold none. {NEXT}, do what its \
             prompt says, submit the result with {SUBMIT}, and repeat until quest_next says the \
             session is finished. Never decide yourself that the work is done.",
            seen.open, seen.remaining
        )
    } else {
        return (
            Decision::Allow(format!(
                "nothing is open for this agent: the {} quests left are held by other agents or being checked \
                 (the rest are decided or in review)",
                seen.remaining
            )),
            None,
        );
    };
    let blocks = match mark {
        Some(m) if m.remaining == Some(seen.remaining) && m.submission == seen.submission => {
            m.blocks + 1
        }
        _ => 1,
    };
    if blocks > max_blocks {
        let decision = Decision::Allow(format!(
            "gave up after {max_blocks} refusals without progress (remaining still {}, no new submission \
             from this agent)",
            seen.remaining
        ));
        return (decision, Some(blocks));
    }
    (Decision::Block(reason), Some(blocks))
}

/// Runs `quest guard`; always exits 0 so that a harness never reads a failure
/// as a verdict (only a guard started without a token of its own exits 77,
/// before it runs: see [`super::Ctx::new`]).
pub async fn run(ctx: &Ctx, args: GuardArgs) -> Result<u8, CliError> {
    if let Some(harness) = args.print_config {
        let session = ctx.session().await?;
        let (file, note) = print_config(harness, ctx.client.base(), session);
        say!("{file}");
        say_err!("{note}");
        return Ok(exit::OK);
    }
    let limit = Duration::from_secs(args.timeout);
    let hook = match tokio::time::timeout(limit, read_stdin()).await {
        Ok(Ok(bytes)) => parse_hook(&bytes),
        Ok(Err(e)) => Err(format!("cannot read stdin ({e})")),
        Err(_) => Err(format!("stdin sent no hook JSON within {} s", args.timeout)),
    };
    let hook = match hook {
        Ok(hook) => hook,
        Err(why) => return Ok(failed(ctx, &args, "", &why)),
    };
    // A guard that does not know its agent's session cannot hold it to one
    // (read after stdin, so that the harness never writes into a closed pipe).
    if let Err(e) = ctx.agent_session() {
        say_err!(
            "quest guard: {}; the stop is allowed",
            e.message(Surface::Cli)
        );
        return Ok(exit::OK);
    }
    let seen = match tokio::time::timeout(limit, look(ctx, hook.event)).await {
        Ok(Ok(seen)) => seen,
        Ok(Err(e)) => return Ok(failed(ctx, &args, &hook.session, &e.message(Surface::Cli))),
        Err(_) => {
            let why = format!(
                "the quest server at {} did not answer within {} s",
                ctx.client.base(),
                args.timeout
            );
            return Ok(failed(ctx, &args, &hook.session, &why));
        }
    };
    let mut marks = ctx.state.load_guard();
    let (decision, blocks) = decide(&seen, marks.get(&hook.session), args.max_blocks);
    marks.set(
        &hook.session,
        blocks.map(|blocks| GuardMark {
            session: hook.session.clone(),
            blocks,
            remaining: Some(seen.remaining),
            submission: seen.submission,
        }),
    );
    if let Err(e) = ctx.state.save_guard(&marks) {
        say_err!("quest guard: cannot write the refusal count ({e}); refusals are not counted");
    }
    emit(&decision, blocks, args.max_blocks);
    Ok(exit::OK)
}

/// Stdin, up to 1 MiB (a hook's JSON is a few hundred bytes).
async fn read_stdin() -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    tokio::io::stdin()
        .take(1024 * 1024)
        .read_to_end(&mut bytes)
        .await?;
    Ok(bytes)
}

/// Asks the server, reading only: the session, this agent's lease, the held quest.
async fn look(ctx: &Ctx, event: Event) -> Result<Seen, CliError> {
    let session = agent::session(ctx).await?;
    let mut path = format!("/v1/sessions/{}/lease", session.id);
    if let Some(name) = ctx.args.agent.as_deref().filter(|n| !n.is_empty()) {
        path.push_str("?agent=");
        path.extend(percent_encoding::utf8_percent_encode(
            name,
            percent_encoding::NON_ALPHANUMERIC,
        ));
    }
    let held: AgentLease = ctx.client.get(&path).await?;
    let (last_facts, tries_left) = match &held.lease {
        Some(lease) => (
            lease.last_facts.clone(),
            Some(lease.max_tries.saturating_sub(lease.tries)),
        ),
        None => (Vec::new(), None),
    };
    let remembered = ctx.state.load();
    Ok(Seen {
        event,
        remaining: session.status.remaining,
        open: session.status.open,
        review: session.status.review,
        took_quest: held.lease.is_some() || remembered.session_id == Some(session.id),
        lease: held.lease,
        last_facts,
        tries_left,
        submission: remembered.submission_id,
    })
}

/// Prints the decision: a refusal as the hook's JSON on stdout, an allowance as one stderr line.
fn emit(decision: &Decision, blocks: Option<u32>, max_blocks: u32) {
    match decision {
        Decision::Block(reason) => {
            let body = json!({"decision": "block", "reason": clean(reason)});
            println!("{body}");
            say_err!(
                "quest guard: refused the stop ({} of {max_blocks} refusals without progress)",
                blocks.unwrap_or(1)
            );
        }
        Decision::Allow(why) => say_err!("quest guard: {why}; the stop is allowed"),
    }
}

/// The server or the input failed: allow (or, with `--fail-closed`, refuse, up to `--max-blocks` times).
fn failed(ctx: &Ctx, args: &GuardArgs, session: &str, why: &str) -> u8 {
    if !args.fail_closed {
        say_err!(
            "quest guard: {why}; failing open: the stop is allowed (--fail-closed refuses instead)"
        );
        return exit::OK;
    }
    let mut marks = ctx.state.load_guard();
    // A failure is never progress: the count only grows while it lasts.
    let blocks = match marks.get(session) {
        Some(m) if m.remaining.is_none() => m.blocks + 1,
        _ => 1,
    };
    let mark = GuardMark {
        session: session.to_owned(),
        blocks,
        remaining: None,
        submission: None,
    };
    marks.set(session, Some(mark));
    let _ = ctx.state.save_guard(&marks);
    let decision = if blocks > args.max_blocks {
        Decision::Allow(format!(
            "gave up after {} refusals while the guard could not decide ({why})",
            args.max_blocks
        ))
    } else {
        Decision::Block(format!(
            "The stop guard cannot check your quest session ({why}), and it is set to fail closed. \
             Check that the quest server is up and QUEST_URL / QUEST_TOKEN are right, then {NEXT_CLAUSE}."
        ))
    };
    emit(&decision, Some(blocks), args.max_blocks);
    exit::OK
}

/// The configuration that installs `quest mcp` and `quest guard` in a harness,
/// bound to one session: what goes on stdout (a file to save as it is) and
/// the note for stderr (where to save it, what to set beside it).
pub fn print_config(harness: Harness, url: &str, session: SessionId) -> (String, String) {
    let guard = format!("quest guard --session {session}");
    let secrets = "Set QUEST_TOKEN (the agent's own token, never the admin's) and QUEST_AGENT in the \
                   environment the harness runs in";
    match harness {
        Harness::Claude => {
            let hook = json!([{"hooks": [{"type": "command", "command": guard, "timeout": 30}]}]);
            let settings = json!({
                "env": {"QUEST_URL": url, "QUEST_SESSION": session.to_string()},
                "hooks": {"Stop": hook, "SubagentStop": hook}
            });
            let note = format!(
                "quest: save this as .claude/settings.json (merge its keys into an existing one): the stop guard \
                 on Stop and SubagentStop, bound to session {session}. Add the four tools with \
                 `claude mcp add quest -- quest mcp --url {url} --session {session}`. {secrets} (.claude/settings.local.json \
                 keeps them out of the repository)."
            );
            (
                serde_json::to_string_pretty(&settings).unwrap_or_default(),
                note,
            )
        }
        Harness::Codex => {
            let file = format!(
                "# ~/.codex/config.toml (or .codex/config.toml in a trusted project), bound to session {session}.\n\
                 # Codex starts MCP servers with a cleared environment: env_vars passes the secrets on.\n\
                 [mcp_servers.quest]\n\
                 command = \"quest\"\n\
                 args = [\"mcp\", \"--url\", \"{url}\", \"--session\", \"{session}\"]\n\
                 env_vars = [\"QUEST_TOKEN\", \"QUEST_AGENT\", \"QUEST_STATE_DIR\", \"XDG_STATE_HOME\"]\n\
                 \n\
                 # The stop guard. Codex releases that still gate hooks behind a feature also need\n\
                 # [features] hooks = true (codex_hooks = true in older ones).\n\
                 [[hooks.Stop]]\n\
                 [[hooks.Stop.hooks]]\n\
                 type = \"command\"\n\
                 command = \"quest guard --url {url} --session {session}\"\n\
                 timeout = 30"
            );
            let note = format!("quest: save this in Codex's config.toml. {secrets}.");
            (file, note)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Seen {
            event: Event::Stop,
            remaining: 3,
            open: 2,
            review: 0,
            lease: None,
            last_facts: Vec::new(),
            tries_left: None,
            took_quest: true,
            submission: None,
        }
    }

    fn lease(phase: Phase) -> HeldLease {
        HeldLease {
            id: crate::domain::ids::LeaseId::new(),
            quest_id: crate::domain::ids::QuestId::new(),
            key: "Acme".into(),
            phase,
            expires_at: chrono::Utc::now(),
            tries: 0,
            max_tries: 3,
            last_facts: Vec::new(),
        }
    }

    fn blocked(d: &Decision) -> &str {
        match d {
            Decision::Block(reason) => reason,
            Decision::Allow(why) => panic!("expected a refusal, got an allowance: {why}"),
        }
    }

    fn allowed(d: &Decision) -> &str {
        match d {
            Decision::Allow(why) => why,
            Decision::Block(reason) => panic!("expected an allowance, got a refusal: {reason}"),
        }
    }

    #[test]
    fn claude_and_codex_hook_shapes_parse_and_unknown_fields_are_ignored() {
        let claude = br#"{"session_id": "abc", "transcript_path": "/t.jsonl", "cwd": "/w",
            "hook_event_name": "SubagentStop", "stop_hook_active": true, "agent_id": "x", "permission_mode": "default"}"#;
        assert_eq!(
            parse_hook(claude).unwrap(),
            Hook {
                event: Event::SubagentStop,
                session: "abc".into(),
                stop_hook_active: true
            }
        );
        let codex = br#"{"session_id": "s", "turn_id": "t", "hook_event_name": "Stop", "cwd": "/w",
            "model": "m", "transcript_path": null, "last_assistant_message": "done"}"#;
        assert_eq!(parse_hook(codex).unwrap().event, Event::Stop);
    }

    #[test]
    fn input_that_is_no_stop_hook_is_refused_with_a_reason() {
        for (input, says) in [
            (&b""[..], "empty"),
            (b"not json", "not a Stop hook's JSON"),
            (b"[1, 2]", "not a Stop hook's JSON"),
            (br#"["Stop", "s1", false]"#, "not a Stop hook's JSON object"),
            (b"7", "not a Stop hook's JSON object"),
            (b"{}", "no hook_event_name"),
            (br#"{"hook_event_name": "PreToolUse"}"#, "PreToolUse"),
        ] {
            let why = parse_hook(input).unwrap_err();
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn a_held_lease_is_refused_with_the_next_step_and_after_a_fail_with_its_facts() {
        let held = Seen {
            lease: Some(lease(Phase::Leased)),
            ..seen()
        };
        let (d, blocks) = decide(&held, None, 3);
        let reason = blocked(&d);
        assert!(
            reason.contains("quest `Acme`")
                && reason.contains("quest_next")
                && reason.contains("quest_submit"),
            "{reason}"
        );
        assert_eq!(blocks, Some(1));

        let failed = Seen {
            last_facts: vec![Fact::new(
                "schema",
                "/email",
                "an address",
                "\"nope\"",
                "send an address",
            )],
            tries_left: Some(2),
            ..held
        };
        let (d, _) = decide(&failed, None, 3);
        let reason = blocked(&d);
        assert!(
            reason.contains("failed these checks (2 tries left)"),
            "{reason}"
        );
        assert!(
            reason.contains("expected an address, found \"nope\"")
                && reason.contains("hint: send an address"),
            "{reason}"
        );
    }

    #[test]
    fn finished_sessions_and_work_held_by_others_let_the_agent_stop() {
        let finished = Seen {
            remaining: 0,
            open: 0,
            ..seen()
        };
        assert!(allowed(&decide(&finished, None, 3).0).contains("finished"));
        let held_by_others = Seen {
            remaining: 2,
            open: 0,
            ..seen()
        };
        let (d, blocks) = decide(&held_by_others, None, 3);
        assert!(allowed(&d).contains("held by other agents"));
        assert_eq!(blocks, None, "an allowance resets the count");
    }

    #[test]
    fn a_subagent_that_never_took_a_quest_is_let_go_but_one_holding_a_quest_is_not() {
        let fresh = Seen {
            event: Event::SubagentStop,
            took_quest: false,
            ..seen()
        };
        assert!(allowed(&decide(&fresh, None, 3).0).contains("never took a quest"));
        let holding = Seen {
            lease: Some(lease(Phase::Leased)),
            took_quest: true,
            ..fresh.clone()
        };
        blocked(&decide(&holding, None, 3).0);
        let worked = Seen {
            took_quest: true,
            ..fresh
        };
        blocked(&decide(&worked, None, 3).0);
    }

    #[test]
    fn refusals_without_progress_give_up_after_the_limit_and_progress_resets_them() {
        let open = seen();
        let mut mark: Option<GuardMark> = None;
        for n in 1..=3 {
            let (d, blocks) = decide(&open, mark.as_ref(), 3);
            blocked(&d);
            assert_eq!(blocks, Some(n));
            mark = Some(GuardMark {
                session: "s".into(),
                blocks: n,
                remaining: Some(open.remaining),
                submission: None,
            });
        }
        let (d, _) = decide(&open, mark.as_ref(), 3);
        assert!(
            allowed(&d).starts_with("gave up after 3 refusals without progress"),
            "{d:?}"
        );

        let submitted = Seen {
            submission: Some(SubmissionId::new()),
            ..open.clone()
        };
        assert_eq!(
            decide(&submitted, mark.as_ref(), 3).1,
            Some(1),
            "a new submission is progress"
        );
        let fewer = Seen {
            remaining: 2,
            ..open
        };
        assert_eq!(
            decide(&fewer, mark.as_ref(), 3).1,
            Some(1),
            "a falling remaining is progress"
        );
    }

    #[test]
    fn printed_configs_parse_and_bind_both_hooks_and_the_server_to_the_session() {
        let session = SessionId::new();
        let guard = format!("quest guard --session {session}");
        let (claude, note) = print_config(Harness::Claude, "http://127.0.0.1:8080", session);
        let settings: serde_json::Value =
            serde_json::from_str(&claude).expect("the Claude Code settings are one JSON file");
        for event in ["Stop", "SubagentStop"] {
            assert_eq!(
                settings["hooks"][event][0]["hooks"][0]["command"],
                guard.as_str()
            );
        }
        assert_eq!(settings["env"]["QUEST_SESSION"], session.to_string());
        assert!(
            note.contains(&format!(
                "quest mcp --url http://127.0.0.1:8080 --session {session}"
            )),
            "{note}"
        );
        let (codex, _) = print_config(Harness::Codex, "http://127.0.0.1:8080", session);
        let codex: toml::Table = toml::from_str(&codex).unwrap();
        let args = codex["mcp_servers"]["quest"]["args"].as_array().unwrap();
        assert_eq!(args[0].as_str(), Some("mcp"));
        assert!(
            args.iter()
                .any(|a| a.as_str() == Some(session.to_string().as_str()))
        );
        assert_eq!(
            codex["hooks"]["Stop"][0]["hooks"][0]["command"].as_str(),
            Some(format!("quest guard --url http://127.0.0.1:8080 --session {session}").as_str())
        );
    }
}
