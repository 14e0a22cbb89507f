//! The `quest` binary: parses the command line and hands off.

use clap::{Parser, Subcommand};
use quest::app::App;
use quest::config::Config;
use tracing_subscriber::EnvFilter;

/// quest: agents lease quests, a deterministic gate decides when they are done.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (SQLite in ./quest-data by default).
    Serve(Config),
    /// Print the OpenAPI document.
    Openapi,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(config) => {
            init_tracing(&config.log_format);
            let app = App::build(config).await?;
            app.run(shutdown_signal()).await
        }
        Command::Openapi => {
            println!("{}", quest::http::openapi().to_pretty_json()?);
            Ok(())
        }
    }
}

fn init_tracing(format: &str) {
    let filter = EnvFilter::try_from_env("QUEST_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
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
