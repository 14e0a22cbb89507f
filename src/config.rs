//! The server's one configuration, read once at start-up from flags and their
//! `QUEST_*` environment variables, then passed down. Nothing below this module
//! reads the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `quest serve` needs to run.
#[derive(Clone, clap::Args)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "QUEST_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Directory holding the SQLite database and the generated admin token.
    #[arg(long, env = "QUEST_DATA_DIR", default_value = "./quest-data")]
    pub data_dir: PathBuf,
    /// The admin bearer token. When unset, one is generated into `<data-dir>/admin.token`.
    #[arg(long, env = "QUEST_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Gate checks that may run at once.
    #[arg(long, env = "QUEST_GATE_WORKERS", default_value_t = 16)]
    pub gate_workers: usize,
    /// Longest a gate may take on one submission before its verdict is REVIEW.
    #[arg(long, env = "QUEST_GATE_TIMEOUT_SECONDS", default_value_t = 120)]
    pub gate_timeout_seconds: u64,
    /// How often expired leases are swept back to `open`.
    #[arg(long, env = "QUEST_SWEEP_SECONDS", default_value_t = 5)]
    pub sweep_seconds: u64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "QUEST_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl Config {
    /// The defaults, as `quest serve` with no flags and no environment would use them.
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> Config {
        Config {
            bind: "127.0.0.1:8080".parse().expect("a valid literal address"),
            data_dir: data_dir.into(),
            admin_token: None,
            gate_workers: 16,
            gate_timeout_seconds: 120,
            sweep_seconds: 5,
            log_format: "text".into(),
        }
    }

    /// The SQLite database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("quest.db")
    }

    /// Where a generated admin token is kept.
    pub fn admin_token_path(&self) -> PathBuf {
        self.data_dir.join("admin.token")
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("bind", &self.bind)
            .field("data_dir", &self.data_dir)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("gate_workers", &self.gate_workers)
            .field("gate_timeout_seconds", &self.gate_timeout_seconds)
            .field("sweep_seconds", &self.sweep_seconds)
            .field("log_format", &self.log_format)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_redacts_the_admin_token() {
        let mut c = Config::with_data_dir("d");
        c.admin_token = Some("s3cret".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"));
    }
}
