//! The client verbs of the `quest` binary: the agent loop (`next`, `submit`,
//! `wait`), its harness entries (`mcp`, `guard`) and the operator verbs (`scan`,
//! `status`, `export`, `review`, `token`, `agent-prompt`). Each verb parses its
//! arguments, calls the API through [`client::Client`] (the agent loop through
//! [`agent`]) and prints through [`text::clean`]; exit statuses are listed in
//! [`EXIT_STATUSES`].

pub mod agent;
pub mod backup;
pub mod client;
pub mod demo;
mod gold;
pub mod guard;
pub mod mcp;
mod operator;
pub mod quality;
pub mod recheck;
pub mod review;
mod session;
pub mod state;
pub mod text;

use crate::domain::ids::{SessionId, SubmissionId, TokenId};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value};

use self::agent::Surface;
use self::client::{CliError, print_json};
pub use self::operator::{bar, status_table};
use self::operator::{export, scan, status, token};
pub use self::session::{Ctx, SessionArg};
use self::text::say;
use crate::api::{CreateTokenRequest, CreatedToken, NextResponse, Session, Status, Token};
use crate::domain::{Role, State, SubmissionVerdict};

/// Exit statuses an agent loop can branch on.
pub mod exit {
    /// `next`: a quest is assigned; `submit`: PASS (also while AI verifiers still look).
    pub const OK: u8 = 0;
    /// `submit`: FAIL; fix the facts and submit again.
    pub const FAIL: u8 = 1;
    /// `submit`: REVIEW; a person decides.
    pub const REVIEW: u8 = 2;
    /// `submit`: DONE; out of tries.
    pub const DONE: u8 = 3;
    /// `submit`: PENDING; the gate needs longer (`quest wait` follows it).
    pub const PENDING: u8 = 4;
    /// `next`: nothing open now; retry later.
    pub const WAIT: u8 = 10;
    /// `next`: the session is finished.
    pub const FINISHED: u8 = 11;
    /// `next`: this token is paused in the session; stop and tell the operator.
    pub const PAUSED: u8 = 12;
}

/// The exit statuses, as `quest help` and the README list them.
pub const EXIT_STATUSES: &str = "\
Exit statuses:
  next:    0 a quest is assigned · 10 nothing open now (it prints retry_after_seconds; `quest next --wait`
           sleeps that long and asks again itself) · 11 the session is finished
           12 paused: stop and tell the operator
  submit:  0 PASS · 1 FAIL (fix and submit again) · 2 REVIEW · 3 DONE (out of tries) · 4 PENDING (`quest wait`)
  errors:  64 bad arguments or local input · 65 the server refused the request as invalid · 66 unknown id
           69 server unreachable (retry with back-off, 1 s doubling to 60 s; never stop) · 70 server error
           75 lease lost or quest already decided (`quest next`) · 77 token missing, bad or lacking the role";

/// Where and as whom a client verb talks to the server.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server's URL.
    #[arg(
        long,
        env = "QUEST_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Bearer token. Operator verbs default to ./quest-data/admin.token when
    /// that file exists; agent verbs (next, submit, wait, heartbeat, release,
    /// mcp, guard) never do.
    #[arg(long, env = "QUEST_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Session id. Agent verbs (next, submit, wait, heartbeat, release, mcp,
    /// guard) otherwise use the session of this agent's last lease, and refuse
    /// when there is none; operator verbs use the most recent session.
    #[arg(long, env = "QUEST_SESSION", global = true)]
    pub session: Option<SessionArg>,
    /// This agent's name, so that many agents can share one token.
    #[arg(long, env = "QUEST_AGENT", global = true)]
    pub agent: Option<String>,
    /// Print the server's JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Where the client remembers leases (default: $XDG_STATE_HOME/quest or ~/.local/state/quest).
    #[arg(long, env = "QUEST_STATE_DIR", global = true)]
    pub state_dir: Option<PathBuf>,
}

/// The client verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Lease a quest and print its prompt.
    Next(NextArgs),
    /// Submit a result for the leased quest.
    Submit(SubmitArgs),
    /// Follow a PENDING submission until it has a verdict.
    Wait(WaitArgs),
    /// Extend the lease on the quest this agent holds (for work longer than the lease).
    Heartbeat,
    /// Give the quest this agent holds back, without using a try.
    Release,
    /// Progress of every session, with bars.
    Status(StatusArgs),
    /// Create a session from a table (CSV, XLSX, JSONL, TXT).
    Scan(ScanArgs),
    /// Export the original rows plus result columns.
    Export(ExportArgs),
    /// How wrong the session's PASS rows may be, from its random audits.
    Quality(quality::QualityArgs),
    /// Known-answer items that measure the session's agents.
    #[command(subcommand)]
    Gold(gold::GoldVerb),
    /// Re-check the session's PASS quests against the world as it is now (admin).
    Recheck(recheck::RecheckArgs),
    /// Work the human review queue (interactive without a subcommand).
    Review(review::ReviewArgs),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenVerb),
    /// Save a consistent copy of the server's database while it keeps serving (admin).
    Backup(backup::BackupArgs),
    /// Print the one-paragraph instruction to paste into an agent.
    AgentPrompt,
    /// Operate on an agent's token (admin).
    #[command(subcommand)]
    Agent(AgentVerb),
    /// Serve the agent loop as MCP tools over stdio (quest_next, quest_submit,
    /// quest_status, quest_release), sharing this CLI's lease state.
    Mcp,
    /// A stop hook for agent harnesses: refuses the end of the agent's turn
    /// while it holds a quest or open quests remain (reads the hook's JSON on stdin).
    Guard(guard::GuardArgs),
}

impl Verb {
    /// The verb's name when it is one an agent runs, else `None`.
    fn agent_name(&self) -> Option<&'static str> {
        match self {
            Verb::Next(_) => Some("next"),
            Verb::Submit(_) => Some("submit"),
            Verb::Wait(_) => Some("wait"),
            Verb::Heartbeat => Some("heartbeat"),
            Verb::Release => Some("release"),
            Verb::Mcp => Some("mcp"),
            // Printing the harness configuration needs no agent's token (it asks
            // the server only for the most recent session, when none is given).
            Verb::Guard(a) if a.print_config.is_none() => Some("guard"),
            _ => None,
        }
    }
}

/// `quest next`.
#[derive(Debug, clap::Args)]
pub struct NextArgs {
    /// When nothing is open now, sleep the seconds the server says and ask
    /// again, until a quest is assigned or the session is finished (never exit 10).
    #[arg(long)]
    pub wait: bool,
}

/// `quest submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// A result field: `name=text`, or `name:=json` for a number, list or object. Repeatable.
    #[arg(long = "field", value_name = "NAME=VALUE")]
    pub fields: Vec<String>,
    /// The whole result as a JSON object.
    #[arg(long, conflicts_with = "file")]
    pub data: Option<String>,
    /// A file holding the result as a JSON object, or `-` for stdin.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Seconds to wait for the verdict before answering PENDING.
    #[arg(long, default_value_t = 30)]
    pub wait: u32,
}

/// `quest wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// The submission to follow (default: this agent's last one).
    pub submission: Option<SubmissionId>,
    /// Give up after this many seconds (exit 4).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// `quest status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Refresh every two seconds until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// `quest scan`.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// The table to upload.
    pub file: PathBuf,
    /// The column that names each quest.
    #[arg(long)]
    pub key: Option<String>,
    /// The gate kind (e.g. `email`, `schema`).
    #[arg(long)]
    pub gate: Option<String>,
    /// A session config JSON file; the flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The session's name.
    #[arg(long)]
    pub name: Option<String>,
    /// The XLSX sheet to read.
    #[arg(long)]
    pub sheet: Option<String>,
}

/// `quest export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The file to write; its extension picks the format (.csv, .jsonl, .xlsx).
    #[arg(short, long)]
    pub output: PathBuf,
}

/// `quest agent`.
#[derive(Debug, clap::Subcommand)]
pub enum AgentVerb {
    /// Resume a token paused in the session (`--session`, else the newest).
    Resume {
        /// The paused token's id (`quest agent pauses` and the session's page
        /// show it). `--token` stays the bearer secret the CLI sends.
        token_id: TokenId,
    },
    /// List the pauses of the session's tokens (`--session`, else the newest).
    Pauses,
}

/// `quest token`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenVerb {
    /// Create a token; its secret is printed once.
    Create {
        #[arg(long)]
        role: Role,
        #[arg(long)]
        name: String,
        /// The most leases it may hold at once (default: 64 for an agent, no cap for an admin).
        #[arg(long, value_name = "N")]
        max_leases: Option<u32>,
        /// Limit the token to these sessions (comma-separated ids; not for an
        /// admin token). `--session` is the session the CLI works on, so the
        /// limit has a name of its own.
        #[arg(long, value_name = "ID,...", value_delimiter = ',')]
        sessions: Vec<SessionId>,
        /// A reviewer token that may adjudicate: decide a quest whose
        /// reviewers disagree (sessions with `review.reviewers` above 1).
        #[arg(long)]
        adjudicate: bool,
    },
    /// List tokens.
    List,
    /// Revoke a token.
    Revoke { id: TokenId },
}

impl clap::ValueEnum for Role {
    fn value_variants<'a>() -> &'a [Self] {
        &[Role::Admin, Role::Agent, Role::Reviewer, Role::Viewer]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// Runs a client verb and returns its exit status.
pub async fn run(args: ClientArgs, verb: Verb) -> ExitCode {
    let ctx = match Ctx::new(args, verb.agent_name()) {
        Ok(ctx) => ctx,
        Err(e) => return e.report(),
    };
    let outcome = match verb {
        Verb::Next(a) => next(&ctx, a).await,
        Verb::Submit(a) => submit(&ctx, a).await,
        Verb::Wait(a) => wait(&ctx, a).await,
        Verb::Status(a) => status(&ctx, a).await,
        Verb::Scan(a) => scan(&ctx, a).await,
        Verb::Export(a) => export(&ctx, a).await,
        Verb::Quality(a) => quality::run(&ctx, a).await,
        Verb::Gold(v) => gold::run(&ctx, v).await,
        Verb::Recheck(a) => recheck::run(&ctx, a).await,
        Verb::Review(a) => review::run(&ctx, a).await,
        Verb::Token(t) => token(&ctx, t).await,
        Verb::Backup(args) => backup::run(&ctx, args).await,
        Verb::AgentPrompt => agent_prompt(&ctx).await,
        Verb::Agent(verb) => operator::agent(&ctx, verb).await,
        Verb::Heartbeat => heartbeat(&ctx).await,
        Verb::Release => release(&ctx).await,
        Verb::Mcp => mcp::serve(ctx).await,
        Verb::Guard(a) => guard::run(&ctx, a).await,
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => e.report(),
    }
}

async fn next(ctx: &Ctx, args: NextArgs) -> Result<u8, CliError> {
    let answer = loop {
        match agent::lease(ctx).await? {
            NextResponse::Wait {
                retry_after_seconds,
            } if args.wait => {
                text::say_err!(
                    "quest: nothing is open right now; other agents hold the remaining quests. \
                     Asking again in {retry_after_seconds} s."
                );
                tokio::time::sleep(Duration::from_secs(retry_after_seconds.max(1).into())).await;
            }
            answer => break answer,
        }
    };
    if ctx.args.json {
        print_json(&answer);
    }
    Ok(match answer {
        NextResponse::Assigned { prompt, .. } => {
            if !ctx.args.json {
                say!("{prompt}");
            }
            exit::OK
        }
        NextResponse::Wait {
            retry_after_seconds,
        } => {
            // On stderr, so that a loop that keeps stdout as the prompt file still sees it.
            if !ctx.args.json {
                text::say_err!(
                    "quest: nothing is open right now; other agents hold the remaining quests. \
                     retry_after_seconds={retry_after_seconds}: run `quest next` again in {retry_after_seconds} s \
                     (`quest next --wait` does so itself)."
                );
            }
            exit::WAIT
        }
        NextResponse::Finished => {
            if !ctx.args.json {
                say!("Stop here: {}.", agent::done_words(ctx).await);
            }
            exit::FINISHED
        }
    })
}

/// Builds the result object from `--field`, `--data` or `--file`.
fn result_of(args: &SubmitArgs) -> Result<Map<String, Value>, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let mut result = match (&args.data, &args.file) {
        (Some(data), _) => parse_object(data, "--data")?,
        (None, Some(path)) if path == Path::new("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| usage(format!("cannot read stdin: {e}")))?;
            parse_object(&text, "stdin")?
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
            parse_object(&text, &path.display().to_string())?
        }
        (None, None) => Map::new(),
    };
    for field in &args.fields {
        // The first `=` splits name from value; `name:=json` marks a JSON value.
        let json_form = field
            .find('=')
            .is_some_and(|i| i > 0 && field.as_bytes()[i - 1] == b':');
        let (name, value) = if let Some((name, json)) = field.split_once(":=").filter(|_| json_form)
        {
            let value = serde_json::from_str(json).map_err(|e| {
                usage(format!(
                    "--field {field}: the value after `:=` must be JSON ({e})"
                ))
            })?;
            (name, value)
        } else if let Some((name, text)) = field.split_once('=') {
            (name, Value::String(text.to_owned()))
        } else {
            return Err(usage(format!(
                "--field {field}: write NAME=VALUE (or NAME:=JSON)"
            )));
        };
        if name.is_empty() {
            return Err(usage(format!("--field {field}: the field needs a name")));
        }
        result.insert(name.to_owned(), value);
    }
    if result.is_empty() {
        return Err(usage(
            "give the result with --field NAME=VALUE, --data '{...}' or --file FILE".into(),
        ));
    }
    Ok(result)
}

fn parse_object(text: &str, source: &str) -> Result<Map<String, Value>, CliError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(CliError::Usage(format!(
            "{source}: the result must be a JSON object"
        ))),
        Err(e) => Err(CliError::Usage(format!("{source}: not valid JSON ({e})"))),
    }
}

async fn submit(ctx: &Ctx, args: SubmitArgs) -> Result<u8, CliError> {
    let result = result_of(&args)?;
    let answer = agent::submit(ctx, result, args.wait).await?;
    if ctx.args.json {
        print_json(&answer);
    } else {
        let left = answer.max_tries.saturating_sub(answer.tries);
        let text = agent::verdict_text(
            Surface::Cli,
            answer.verdict,
            answer.state,
            Some(left),
            &answer.facts,
        );
        say!("{text}");
        if answer.replayed && answer.state == State::Todo {
            println!("{}", agent::REPLAYED_NOTE);
        }
        if answer.verdict == SubmissionVerdict::Pending {
            println!(
                "Run `quest wait` to follow submission {}.",
                answer.submission_id
            );
        } else {
            println!("{}", text::remain(answer.remaining));
        }
    }
    agent::settled(ctx, answer.verdict)?;
    Ok(agent::verdict_status(answer.verdict, answer.state))
}

async fn heartbeat(ctx: &Ctx) -> Result<u8, CliError> {
    let (held, renewed) = agent::heartbeat(ctx).await?;
    if ctx.args.json {
        print_json(&renewed);
    } else {
        say!(
            "The lease on {} runs until {}.",
            held.key.unwrap_or_default(),
            renewed.expires_at
        );
    }
    Ok(exit::OK)
}

async fn release(ctx: &Ctx) -> Result<u8, CliError> {
    let released = agent::release(ctx).await?;
    say!(
        "Released {}; another agent can take it. Run `quest next` for a quest.",
        released.key.unwrap_or_default()
    );
    Ok(exit::OK)
}

async fn wait(ctx: &Ctx, args: WaitArgs) -> Result<u8, CliError> {
    let id = args
        .submission
        .or(ctx.state.load().submission_id)
        .ok_or_else(|| CliError::Usage("no submission to follow: pass its id".into()))?;
    let detail = agent::follow(ctx, id, Duration::from_secs(args.timeout)).await?;
    let verdict = detail.submission.verdict;
    let state = detail.submission.state_after.unwrap_or(detail.state);
    if ctx.args.json {
        print_json(&detail);
    } else {
        let left = detail
            .max_tries
            .saturating_sub(detail.submission.tries_after.unwrap_or(detail.tries));
        let text = agent::verdict_text(
            Surface::Cli,
            verdict,
            state,
            Some(left),
            &detail.submission.facts,
        );
        say!("{text}");
    }
    agent::settled(ctx, verdict)?;
    Ok(agent::verdict_status(verdict, state))
}

/// The instruction for an agent, for one session.
pub fn agent_instruction(url: &str, session: SessionId) -> String {
    format!(
        "You work through the quests of a quest session. Set up once:\n\
         \n  export QUEST_URL={url} QUEST_SESSION={session} QUEST_TOKEN=<your agent token> QUEST_AGENT=<a name for you>\n\
         \nThen: run `quest next --wait`, do what the prompt says, `quest submit` the result, and repeat until \
         `quest next --wait` says the session is finished.\n\
         \n- `quest next --wait` exits 0 with a quest's prompt and 11 when the session is finished (stop). When nothing \
         is open yet it sleeps the seconds the server says and asks again itself (plain `quest next` exits 10 and \
         prints retry_after_seconds instead).\n\
         - `quest submit --field NAME=VALUE ...` exits 0 on PASS, 1 on FAIL (read every fact and hint, fix the \
         result, submit again), 2 on REVIEW and 3 on DONE (both: move on with `quest next --wait`), 4 on PENDING (run `quest wait`).\n\
         - Every submit is checked: the very same result after a FAIL fails again and uses a try, and when the tries \
         are used up the quest is closed for good. Change the result according to the facts.\n\
         - If `quest submit` was interrupted before it printed a verdict, run the same command again: it is answered \
         by the submission already made, without a new try.\n\
         - A lease lasts a few minutes and can be renewed only up to a limit: for long work run `quest heartbeat` now \
         and then; `quest release` gives a quest back.\n\
         - Exit 75 means the lease is gone or the quest is decided: run `quest next --wait`. Exit 69: the server is \
         unreachable: wait and retry (1 s, doubling up to 60 s), never stop. Exit 65: the server refused the result \
         as invalid: read the message, fix it. Exit 77: your token is missing or lacks the agent role: stop and ask.\n\
         - Never claim a quest is done yourself: only the gate's PASS counts. Submit what you found, not what you guess.\n"
    )
}

async fn agent_prompt(ctx: &Ctx) -> Result<u8, CliError> {
    let session = ctx.session().await?;
    print!("{}", agent_instruction(ctx.client.base(), session));
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(fields: &[&str], data: Option<&str>) -> SubmitArgs {
        SubmitArgs {
            fields: fields.iter().map(|f| f.to_string()).collect(),
            data: data.map(String::from),
            file: None,
            wait: 30,
        }
    }

    #[test]
    fn fields_build_the_result_and_bad_ones_say_how_to_fix_them() {
        let r = result_of(&args(&["email=a@b.test", "n:=3", "tags:=[\"x\"]"], None)).unwrap();
        assert_eq!(
            Value::Object(r),
            serde_json::json!({"email": "a@b.test", "n": 3, "tags": ["x"]})
        );
        let merged = result_of(&args(&["b=2"], Some("{\"a\": 1}"))).unwrap();
        assert_eq!(Value::Object(merged), serde_json::json!({"a": 1, "b": "2"}));
        for bad in [
            args(&["novalue"], None),
            args(&["=x"], None),
            args(&["n:=nope"], None),
            args(&[], Some("[1]")),
            args(&[], None),
        ] {
            assert!(matches!(result_of(&bad), Err(CliError::Usage(_))));
        }
    }

    #[test]
    fn bars_show_each_terminal_state() {
        let s = Status {
            session_id: SessionId::new(),
            total: 10,
            remaining: 4,
            finished: false,
            open: 4,
            leased: 0,
            checking: 0,
            verifying: 0,
            pass: 4,
            review: 1,
            done: 1,
            submissions: 9,
            agents_active: 0,
            rate_per_minute: 0.0,
            eta_seconds: None,
            review_rate_per_hour: 0.0,
            review_eta_seconds: None,
            verifiers: Vec::new(),
            agreement: Vec::new(),
            stale: 0,
            unconfirmed: 0,
            suspect: 0,
            audit_rejected: 0,
            rechecked_at: None,
            recheck: None,
            calibration: Vec::new(),
            quality: None,
        };
        assert_eq!(bar(&s, 10), "[####?x....]");
    }
}
