//! [`Dnsmasq`]: a real DNS server on loopback for the tests that need one.
//! Test code only: the end-to-end tests take it in as `mod support`, and the
//! resolver's unit tests include this file by path. It depends on nothing of
//! the crate, so that both can.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A dnsmasq process serving the `.test` zone on 127.0.0.1 at a free high
/// port; killed when dropped (also when the test panics).
pub struct Dnsmasq {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

/// The dnsmasq binary in the folders of `path` (a `PATH` value) or in the
/// sbin folders that a non-root `PATH` often lacks.
pub fn find_binary(path: Option<OsString>) -> Option<PathBuf> {
    let path = path.unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("dnsmasq"))
        .find(|candidate| candidate.is_file())
}

/// Whether a missing dnsmasq fails the test rather than skipping it: under
/// CI (the value of `CI` is `true`), where it must be installed.
pub fn missing_is_a_failure(ci: Option<&str>) -> bool {
    ci == Some("true")
}

impl Dnsmasq {
    /// Starts dnsmasq with `records` (extra dnsmasq flags such as
    /// `--mx-host=...`), or returns `None` after printing why the test named
    /// `test` is skipped. With `CI=true` a missing dnsmasq is a failure, never a skip.
    pub async fn start_or_skip(test: &str, records: &[String]) -> Option<Dnsmasq> {
        let Some(binary) = find_binary(std::env::var_os("PATH")) else {
            assert!(
                !missing_is_a_failure(std::env::var("CI").ok().as_deref()),
                "{test}: dnsmasq is not installed, and CI=true makes that a failure; \
                 install it with `apt-get install -y dnsmasq-base`"
            );
            eprintln!(
                "SKIPPED {test}: dnsmasq is not installed (apt-get install -y dnsmasq-base); \
                 with CI=true this is a failure"
            );
            return None;
        };
        let mut last_error = String::new();
        // A port picked as free can be taken before dnsmasq binds it: try again on another.
        for _ in 0..5 {
            let port = free_udp_port();
            let log = std::env::temp_dir()
                .join(format!("quest-dnsmasq-{}-{port}.log", std::process::id()));
            let mut child = Command::new(&binary)
                .args([
                    "--keep-in-foreground",
                    "--conf-file=/dev/null",
                    "--pid-file=",
                    "--no-resolv",
                    "--no-hosts",
                    "--no-poll",
                    "--listen-address=127.0.0.1",
                    "--bind-interfaces",
                    "--local=/test/",
                ])
                .arg(format!("--port={port}"))
                .arg(format!("--log-facility={}", log.display()))
                .args(records)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("dnsmasq starts");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            match wait_until_answering(&mut child, addr).await {
                Ok(()) => return Some(Dnsmasq { child, addr, log }),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    let _ = std::fs::remove_file(&log);
                    last_error = format!("{e}; dnsmasq logged: {said}");
                }
            }
        }
        panic!("{test}: dnsmasq did not start: {last_error}");
    }

    /// The address dnsmasq answers on (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A UDP port on 127.0.0.1 that was free a moment ago.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// A DNS query for the A record of `readiness-probe.test`.
fn probe_query() -> Vec<u8> {
    let mut query = vec![0x51, 0x17, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["readiness-probe", "test"] {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

/// Polls until the server answers a question (any answer but silence), or it exits.
async fn wait_until_answering(child: &mut Child, addr: SocketAddr) -> Result<(), String> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind a probe socket: {e}"))?;
    let query = probe_query();
    let mut answer = [0u8; 512];
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("dnsmasq exited with {status}"));
        }
        let _ = socket.send_to(&query, addr).await;
        let reply = tokio::time::timeout(Duration::from_millis(50), socket.recv_from(&mut answer));
        if let Ok(Ok((n, from))) = reply.await
            && from == addr
            && n >= 12
            && answer[..2] == query[..2]
        {
            return Ok(());
        }
    }
    Err(format!("dnsmasq did not answer on {addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ci_true_makes_a_missing_dnsmasq_a_failure() {
        assert!(missing_is_a_failure(Some("true")));
        assert!(!missing_is_a_failure(Some("false")));
        assert!(!missing_is_a_failure(None));
    }
}
