//! The server's one configuration, read once at start-up from flags and their
//! `QUEST_*` environment variables, then passed down. Nothing below this module
//! reads the environment.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use ipnet::IpNet;

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
    /// DNS servers the gates ask, comma-separated `ip:port` (port 53 when left
    /// out); the system's resolver when unset. Page fetches resolve through them too.
    #[arg(long, env = "QUEST_DNS_SERVERS", default_value = "", hide_default_value = true,
          value_parser = |text: &str| parse_list(text, parse_dns_server))]
    // The full path keeps clap from reading a Vec as "repeat the flag": the
    // whole comma-separated value is one, and an empty one means none.
    pub dns_servers: ::std::vec::Vec<SocketAddr>,
    /// Comma-separated CIDR ranges the page fetcher may reach although they are
    /// not public (loopback, private, ...). Empty by default: for tests and private deployments.
    #[arg(long, env = "QUEST_FETCH_ALLOW", default_value = "", hide_default_value = true,
          value_parser = |text: &str| parse_list(text, parse_cidr))]
    pub fetch_allow: ::std::vec::Vec<IpNet>,
    /// Longest one page fetch may take, body included, in milliseconds.
    #[arg(long, env = "QUEST_FETCH_TIMEOUT_MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub fetch_timeout_ms: u64,
    /// Longest one DNS question may take, retries included, in milliseconds.
    #[arg(long, env = "QUEST_DNS_TIMEOUT_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub dns_timeout_ms: u64,
}

/// A comma-separated list; empty entries (and an empty value) are skipped.
fn parse_list<T>(text: &str, item: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(item)
        .collect()
}

/// `ip:port`, or a bare IP meaning port 53.
fn parse_dns_server(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    text.parse::<SocketAddr>()
        .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| format!("`{text}` is not a DNS server address; write ip:port, e.g. 127.0.0.1:53 or [::1]:5353"))
}

/// A CIDR range, or a bare IP meaning that one address.
fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is not a CIDR range; write e.g. 127.0.0.0/8 or ::1/128"))
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
            dns_servers: Vec::new(),
            fetch_allow: Vec::new(),
            fetch_timeout_ms: 15_000,
            dns_timeout_ms: 5_000,
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
            .field("dns_servers", &self.dns_servers)
            .field("fetch_allow", &self.fetch_allow)
            .field("fetch_timeout_ms", &self.fetch_timeout_ms)
            .field("dns_timeout_ms", &self.dns_timeout_ms)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Cli::try_parse_from(std::iter::once("quest").chain(args.iter().copied())).map(|c| c.config)
    }

    #[test]
    fn the_gate_settings_default_to_the_system_resolver_and_no_exemptions() {
        let c = parse(&[]).unwrap();
        let d = Config::with_data_dir("./quest-data");
        assert!(c.dns_servers.is_empty() && c.fetch_allow.is_empty());
        assert_eq!((c.fetch_timeout_ms, c.dns_timeout_ms), (15_000, 5_000));
        assert_eq!(
            format!("{c:?}"),
            format!("{d:?}"),
            "with_data_dir holds the same defaults"
        );
    }

    #[test]
    fn dns_servers_and_allowed_ranges_are_comma_separated() {
        let c = parse(&[
            "--dns-servers",
            "127.0.0.1:5353, [::1]:53,10.0.0.2",
            "--fetch-allow",
            "127.0.0.0/8,::1",
            "--fetch-timeout-ms",
            "2000",
            "--dns-timeout-ms",
            "700",
        ])
        .unwrap();
        assert_eq!(
            c.dns_servers,
            ["127.0.0.1:5353", "[::1]:53", "10.0.0.2:53"].map(|s| s.parse::<SocketAddr>().unwrap())
        );
        assert_eq!(
            c.fetch_allow,
            ["127.0.0.0/8", "::1/128"].map(|s| s.parse::<IpNet>().unwrap())
        );
        assert_eq!((c.fetch_timeout_ms, c.dns_timeout_ms), (2000, 700));
    }

    #[test]
    fn an_empty_list_means_none() {
        let c = parse(&["--dns-servers", "", "--fetch-allow", " , "]).unwrap();
        assert!(c.dns_servers.is_empty() && c.fetch_allow.is_empty());
    }

    #[test]
    fn bad_gate_settings_are_refused_with_a_clear_message() {
        for (args, says) in [
            (
                ["--dns-servers", "localhost:53"],
                "not a DNS server address",
            ),
            (["--fetch-allow", "10.0.0.0/33"], "not a CIDR range"),
            (
                ["--fetch-allow", "127.0.0.0/8,bogus"],
                "`bogus` is not a CIDR range",
            ),
            (["--fetch-timeout-ms", "0"], "fetch-timeout-ms"),
            (["--dns-timeout-ms", "soon"], "dns-timeout-ms"),
        ] {
            let err = parse(&args).err().unwrap().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }

    #[test]
    fn debug_output_redacts_the_admin_token() {
        let mut c = Config::with_data_dir("d");
        c.admin_token = Some("s3cret".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"));
    }
}
