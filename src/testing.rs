//! A simulated outside world: a [`FakeFetcher`], a [`FakeResolver`] and a
//! [`FakeRunner`] with canned answers, and a [`ManualClock`]. Unit and API tests run gates offline
//! with them, and `quest demo` builds its simulated world from them; the
//! server itself never uses them. Nothing here reads the environment or
//! starts a process (the real DNS server of the end-to-end tests lives in
//! `tests/support/`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};

use crate::domain::Clock;
use crate::gates::dns::{LookupError, MailAnswer, MxHost, Resolver};
use crate::gates::fetch::{FetchError, Fetcher, Page};
use crate::process::{ProcessError, ProcessOutput, ProcessRunner, ProcessSpec};

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

/// A [`ProcessRunner`] that starts nothing: every run gets the same answer,
/// and the inputs it was given are kept.
pub struct FakeRunner {
    answer: Result<ProcessOutput, ProcessError>,
    inputs: Mutex<Vec<Vec<u8>>>,
}

impl FakeRunner {
    /// A runner whose every run ends with `answer`.
    pub fn answering(answer: Result<ProcessOutput, ProcessError>) -> FakeRunner {
        FakeRunner {
            answer,
            inputs: Mutex::new(Vec::new()),
        }
    }

    /// The stdin of every run, in order.
    pub fn inputs(&self) -> Vec<Vec<u8>> {
        self.inputs.lock().unwrap().clone()
    }
}

#[async_trait]
impl ProcessRunner for FakeRunner {
    async fn run(
        &self,
        _spec: &ProcessSpec,
        stdin: Vec<u8>,
    ) -> Result<ProcessOutput, ProcessError> {
        self.inputs.lock().unwrap().push(stdin);
        self.answer.clone()
    }
}
