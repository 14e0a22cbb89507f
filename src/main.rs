//! The `quest` binary: parses the command line and hands off.

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use quest::app::App;
use quest::cli::{self, ClientArgs, EXIT_STATUSES, Verb};
use quest::config::Config;
use tracing_subscriber::EnvFilter;

/// quest: agents lease quests, a deterministic gate decides when they are done.
///
/// The agent loop: run `quest next`, do what the prompt says, `quest submit` the
/// result, and repeat until `quest next` says the session is finished.
#[derive(Parser)]
#[command(version, about, after_help = EXIT_STATUSES)]
struct Cli {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (SQLite in ./quest-data by default).
    Serve(Config),
    /// Print the OpenAPI document.
    Openapi,
    /// Run the whole loop against a simulated world: a server, agents of
    /// different quality, the review queue and an export. Nothing to set up.
    Demo(cli::demo::DemoArgs),
    #[command(flatten)]
    Client(Verb),
    /// The trampoline of operator programs: run PROGRAM with the limits the
    /// configuration names, then kill whatever it left behind (used by the server).
    #[command(name = "__run-limited", hide = true)]
    RunLimited(quest::process::limits::LimitedRun),
}

/// The commands that are no client: the options of the client verbs are not theirs.
const NOT_CLIENTS: [&str; 3] = ["serve", "demo", "openapi"];

/// The command line's grammar: the client options are global, so that they
/// may follow any client verb, but `serve`, `demo` and `openapi` neither list
/// them in `--help` nor take them.
fn grammar() -> clap::Command {
    // A command that has an argument of a global's id keeps its own: a hidden copy.
    let hidden: Vec<clap::Arg> = client_options()
        .get_arguments()
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    let mut command = Cli::command();
    for name in NOT_CLIENTS {
        command = command.mut_subcommand(name, |sub| sub.args(hidden.clone()));
    }
    command
}

/// The client options, alone.
fn client_options() -> clap::Command {
    ClientArgs::augment_args(clap::Command::new("client"))
}

/// Parses the command line; a client option given to a command that is no client is a usage error.
fn parse() -> Result<Cli, clap::Error> {
    let mut command = grammar();
    let matches = command.try_get_matches_from_mut(std::env::args_os())?;
    if let Some((name, sub)) = matches
        .subcommand()
        .filter(|(n, _)| NOT_CLIENTS.contains(n))
    {
        let given = client_options()
            .get_arguments()
            .find(|a| sub.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
            .map(|a| a.get_long().unwrap_or_default().to_owned());
        if let Some(flag) = given {
            return Err(command.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("--{flag} is an option of the client verbs (next, submit, status, ...); `quest {name}` does not take it"),
            ));
        }
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; usage errors get their own status, not clap's 2 (REVIEW).
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(cli::client::status::USAGE),
            };
        }
    };
    // The trampoline runs before any runtime exists: it must stay one thread,
    // whose children are all the processes it watches.
    if let Command::RunLimited(run) = cli.command {
        return match quest::process::trampoline::run(run) {
            Ok(code) => std::process::exit(code),
            Err(why) => {
                eprintln!("{}{why}", quest::process::limits::TRAMPOLINE_MARK);
                ExitCode::from(quest::process::limits::TRAMPOLINE_FAILED as u8)
            }
        };
    }
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run(cli.client, cli.command)),
        Err(e) => {
            eprintln!("quest: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs every command but the trampoline.
async fn run(client: ClientArgs, command: Command) -> ExitCode {
    match command {
        Command::Serve(config) => {
            init_tracing(&config.log_format);
            let served = async { App::build(config).await?.run(shutdown_signal()).await };
            match served.await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("quest: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Openapi => match quest::http::openapi().to_pretty_json() {
            Ok(doc) => {
                println!("{doc}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("quest: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Demo(args) => cli::demo::run(args).await,
        Command::Client(verb) => cli::run(client, verb).await,
        Command::RunLimited(_) => unreachable!("the trampoline runs before the runtime starts"),
    }
}

/// What the server logs unless `QUEST_LOG` says otherwise: INFO, with
/// PostgreSQL's notices (a migration's "already exists, skipping") at WARN.
const DEFAULT_LOG: &str = "info,sqlx::postgres::notice=warn";

fn init_tracing(format: &str) {
    // An empty QUEST_LOG is unset, like every other QUEST_ variable.
    let filter = std::env::var("QUEST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_LOG));
    // Colour codes are for a terminal; a file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down");
}
