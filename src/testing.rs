//! Fakes and helpers for tests: a [`FakeFetcher`] and a [`FakeResolver`] so that
//! gates run offline, and [`Dnsmasq`], a real DNS server on loopback for the
//! tests that need one. The server never uses this module; `quest demo` builds
//! its simulated world from the same fakes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};

use crate::domain::Clock;
use crate::gates::dns::{HickoryResolver, LookupError, MailAnswer, MxHost, Resolver};
use crate::gates::fetch::{FetchError, Fetcher, Page};

/// The time every fake page says it was fetched at.
pub fn fake_fetch_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
}

/// A page as the real fetcher would return it.
pub fn page(url: &str, status: u16, content_type: Option<&str>, body: &str) -> Page {
    Page {
        url: url.to_owned(),
        final_url: url.to_owned(),
        status,
        content_type: content_type.map(str::to_owned),
        body: Arc::from(body.as_bytes()),
        truncated: false,
        fetched_at: fake_fetch_time(),
    }
}

/// A clock that stands still until told to move.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// A clock showing [`fake_fetch_time`].
    pub fn new() -> ManualClock {
        ManualClock(Mutex::new(fake_fetch_time()))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap();
        *now += chrono::Duration::from_std(by).expect("a sane duration");
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A [`Fetcher`] that serves canned answers by URL and records every request.
/// An unknown URL is a host that does not exist.
#[derive(Default)]
pub struct FakeFetcher {
    answers: Mutex<HashMap<String, Result<Page, FetchError>>>,
    calls: Mutex<Vec<String>>,
}

impl FakeFetcher {
    pub fn new() -> FakeFetcher {
        FakeFetcher::default()
    }

    /// Serves `body` as HTML with status 200 at `url`.
    pub fn html(self, url: &str, body: &str) -> FakeFetcher {
        self.answer(
            url,
            Ok(page(url, 200, Some("text/html; charset=utf-8"), body)),
        )
    }

    /// Serves a canned answer at `url`.
    pub fn answer(self, url: &str, answer: Result<Page, FetchError>) -> FakeFetcher {
        self.answers.lock().unwrap().insert(url.to_owned(), answer);
        self
    }

    /// Every URL asked for, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Fetcher for FakeFetcher {
    async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        self.calls.lock().unwrap().push(url.to_owned());
        self.answers
            .lock()
            .unwrap()
            .get(url)
            .cloned()
            .unwrap_or_else(|| {
                Err(FetchError::NoSuchHost(
                    url::Url::parse(url)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_owned))
                        .unwrap_or_default(),
                ))
            })
    }
}

/// A [`Resolver`] with canned answers. Unknown names do not exist.
#[derive(Default)]
pub struct FakeResolver {
    mail: HashMap<String, MailAnswer>,
    hosts: HashMap<String, Result<Vec<IpAddr>, LookupError>>,
    calls: Mutex<Vec<String>>,
}

impl FakeResolver {
    pub fn new() -> FakeResolver {
        FakeResolver::default()
    }

    /// `domain` has one MX record, `10 mx.<domain>`.
    pub fn with_mx(self, domain: &str) -> FakeResolver {
        let hosts = vec![MxHost {
            preference: 10,
            exchange: format!("mx.{domain}"),
        }];
        self.mail(domain, MailAnswer::Mx(hosts))
    }

    /// Answers MX questions about `domain` with `answer`.
    pub fn mail(mut self, domain: &str, answer: MailAnswer) -> FakeResolver {
        self.mail.insert(domain.to_owned(), answer);
        self
    }

    /// Answers address questions about `host` with `ips`.
    pub fn host(mut self, host: &str, ips: &[&str]) -> FakeResolver {
        let ips = ips
            .iter()
            .map(|ip| ip.parse().expect("an IP address"))
            .collect();
        self.hosts.insert(host.to_owned(), Ok(ips));
        self
    }

    /// Answers address questions about `host` with an error.
    pub fn host_error(mut self, host: &str, error: LookupError) -> FakeResolver {
        self.hosts.insert(host.to_owned(), Err(error));
        self
    }

    /// Every question asked, as `MX name` or `A name`, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Resolver for FakeResolver {
    async fn mail_hosts(&self, domain: &str) -> MailAnswer {
        self.calls.lock().unwrap().push(format!("MX {domain}"));
        self.mail
            .get(domain)
            .cloned()
            .unwrap_or(MailAnswer::NoDomain)
    }

    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        self.calls.lock().unwrap().push(format!("A {host}"));
        self.hosts
            .get(host)
            .cloned()
            .unwrap_or_else(|| Err(LookupError::NoDomain(host.to_owned())))
    }
}

/// A dnsmasq process serving the `.test` zone on 127.0.0.1 at a free high
/// port; killed when dropped (also when the test panics).
pub struct Dnsmasq {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Dnsmasq {
    /// The dnsmasq binary, looked up on `PATH` and in the sbin folders that a
    /// non-root `PATH` often lacks.
    pub fn binary() -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
            .map(|dir| dir.join("dnsmasq"))
            .find(|candidate| candidate.is_file())
    }

    /// Starts dnsmasq with `records` (extra dnsmasq flags such as
    /// `--mx-host=...`), or returns `None` after printing why the test named
    /// `test` is skipped. With `CI=true` a missing dnsmasq is a failure, never a skip.
    pub async fn start_or_skip(test: &str, records: &[String]) -> Option<Dnsmasq> {
        let Some(binary) = Dnsmasq::binary() else {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
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
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// Polls until the server answers a question (any answer but silence), or it exits.
async fn wait_until_answering(child: &mut Child, addr: SocketAddr) -> Result<(), String> {
    let probe = HickoryResolver::new(&[addr], Duration::from_millis(200))
        .map_err(|e| format!("cannot build a probe resolver: {e}"))?;
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("dnsmasq exited with {status}"));
        }
        match probe.addresses("readiness-probe.test").await {
            Err(LookupError::Unavailable { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => return Ok(()),
        }
    }
    Err(format!("dnsmasq did not answer on {addr}"))
}
