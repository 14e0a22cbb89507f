//! [`HttpFetcher`]: the real [`Fetcher`] on reqwest, behind the SSRF guard.
//!
//! The guard has four parts, because each closes a different door:
//! 1. names resolve through [`GuardedResolve`], which asks the gates'
//!    [`Resolver`] and hands the connector only the addresses the
//!    [`AddressPolicy`] permits (DNS rebinding cannot slip between check and use);
//! 2. IP-literal URLs never reach a resolver, so they are checked before the
//!    request and again on every redirect hop;
//! 3. proxies are off, because a proxy would resolve the target itself;
//! 4. time, redirects and body size are capped.
//!
//! Redirects are followed here, not inside reqwest, so that every hop is
//! checked by the guard and waits for its own host's turn, and so that one
//! deadline covers the whole fetch: waiting for a turn, every hop and the body.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use tokio::sync::Semaphore;
use url::Url;

use super::{AddressPolicy, FetchError, Fetcher, Page};
use crate::domain::Clock;
use crate::gates::dns::{LookupError, Resolver};

/// The `User-Agent` every request carries.
pub const USER_AGENT: &str = concat!("quest/", env!("CARGO_PKG_VERSION"));

/// Limits of the real fetcher.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    /// The longest one fetch may take: waiting for a turn at a host, every
    /// redirect hop and the body included.
    pub timeout: Duration,
    /// The longest establishing a connection may take.
    pub connect_timeout: Duration,
    pub max_redirects: usize,
    /// Body bytes read; the rest is not read.
    pub max_body: usize,
    /// Requests in flight to one host at once.
    pub per_host: usize,
    /// Ranges exempt from the SSRF guard.
    pub allow: Vec<IpNet>,
}

impl FetchSettings {
    /// The defaults with a total `timeout` and an allow-list.
    pub fn new(timeout: Duration, allow: Vec<IpNet>) -> FetchSettings {
        FetchSettings {
            timeout,
            connect_timeout: timeout.min(Duration::from_secs(5)),
            max_redirects: 5,
            max_body: 2 * 1024 * 1024,
            per_host: 2,
            allow,
        }
    }
}

/// Fetches pages over HTTP(S) for the gates, politely and safely.
pub struct HttpFetcher {
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    settings: FetchSettings,
    clock: Arc<dyn Clock>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The key of a host's turn: its name in lowercase without a trailing dot,
/// so that `ACME.test.` waits in the same line as `acme.test`.
fn host_key(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl HttpFetcher {
    /// A fetcher whose names resolve through `resolver` and whose pages are
    /// stamped with the time `clock` tells.
    pub fn new(
        settings: FetchSettings,
        resolver: Arc<dyn Resolver>,
        clock: Arc<dyn Clock>,
    ) -> Result<HttpFetcher, reqwest::Error> {
        let policy = Arc::new(AddressPolicy::new(settings.allow.clone()));
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolve {
                resolver,
                policy: policy.clone(),
            }))
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .build()?;
        Ok(HttpFetcher {
            client,
            policy,
            settings,
            clock,
            hosts: Mutex::new(HashMap::new()),
        })
    }

    /// The semaphore that bounds requests in flight to `host`.
    fn host_slot(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if hosts.len() >= 1024 {
            // Forget idle hosts, so the map does not grow with every host ever seen.
            hosts.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        hosts
            .entry(host_key(host))
            .or_insert_with(|| Arc::new(Semaphore::new(self.settings.per_host.max(1))))
            .clone()
    }

    /// Follows `url` hop by hop: each hop passes the guard and waits for its
    /// host's turn, which it holds until its body is read.
    async fn follow(&self, url: &str, fetched_at: DateTime<Utc>) -> Result<Page, FetchError> {
        let mut current =
            Url::parse(url).map_err(|e| FetchError::Refused(format!("{url} is not a URL: {e}")))?;
        let mut redirects = 0;
        loop {
            self.policy.check_url(&current)?;
            let slot = self.host_slot(current.host_str().unwrap_or_default());
            let _turn = slot.acquire().await.expect("host slots are never closed");
            let mut response = self
                .client
                .get(current.clone())
                .header(
                    ACCEPT,
                    "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
                )
                .send()
                .await
                .map_err(|e| self.classify(e, &current))?;
            let status = response.status().as_u16();
            let next = matches!(status, 301 | 302 | 303 | 307 | 308)
                .then(|| response.headers().get(LOCATION))
                .flatten()
                .and_then(|location| location.to_str().ok())
                .and_then(|location| current.join(location).ok());
            if let Some(next) = next {
                if redirects == self.settings.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.settings.max_redirects));
                }
                redirects += 1;
                current = next;
                continue;
            }
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut body = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| self.classify(e, &current))?
            {
                let room = self.settings.max_body - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(Page {
                url: url.to_owned(),
                final_url: current.to_string(),
                status,
                content_type,
                body: body.into(),
                truncated,
                fetched_at,
            });
        }
    }

    /// Our own error if the guard raised it; else what kind of failure it was,
    /// in words that name nothing internal. The whole chain goes to the log.
    fn classify(&self, error: reqwest::Error, url: &Url) -> FetchError {
        let mut source: Option<&(dyn StdError + 'static)> = Some(&error);
        let mut chain: Vec<String> = Vec::new();
        let mut io_kind = None;
        while let Some(e) = source {
            if let Some(ours) = e.downcast_ref::<FetchError>() {
                return ours.clone();
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                io_kind.get_or_insert(io.kind());
            }
            chain.push(e.to_string());
            source = e.source();
        }
        tracing::info!(url = %url, error = %chain.join(": "), "a page fetch failed");
        if error.is_connect() {
            use std::io::ErrorKind;
            let reason = match io_kind {
                _ if error.is_timeout() => "no answer to the connection attempt",
                Some(ErrorKind::ConnectionRefused) => "connection refused",
                Some(ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {
                    "the connection was reset"
                }
                Some(ErrorKind::TimedOut) => "no answer to the connection attempt",
                _ => "the connection or its TLS handshake failed",
            };
            return FetchError::NoConnection {
                port: url.port(),
                reason: reason.into(),
            };
        }
        if error.is_timeout() {
            return FetchError::Timeout(self.settings.timeout);
        }
        FetchError::Unreachable("the connection broke off before the page was read".into())
    }
}

#[async_trait]
impl Fetcher for HttpFetcher {
    async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let fetched_at = self.clock.now();
        tokio::time::timeout(self.settings.timeout, self.follow(url, fetched_at))
            .await
            .unwrap_or(Err(FetchError::Timeout(self.settings.timeout)))
    }
}

/// reqwest's resolver: the gates' [`Resolver`], filtered by the [`AddressPolicy`].
struct GuardedResolve {
    resolver: Arc<dyn Resolver>,
    policy: Arc<AddressPolicy>,
}

impl Resolve for GuardedResolve {
    fn resolve(&self, name: Name) -> Resolving {
        let resolver = self.resolver.clone();
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // `?` boxes a FetchError as itself, so that `classify` can downcast it.
            let ips = resolver.addresses(&host).await.map_err(|e| match e {
                LookupError::NoDomain(h) | LookupError::NoRecords(h) => FetchError::NoSuchHost(h),
                unavailable => FetchError::Unreachable(unavailable.to_string()),
            })?;
            let mut refusals = Vec::new();
            let allowed: Vec<SocketAddr> = ips
                .into_iter()
                .filter_map(|ip| match policy.check(ip) {
                    Ok(()) => Some(SocketAddr::new(ip, 0)),
                    Err(why) => {
                        refusals.push(why);
                        None
                    }
                })
                .collect();
            if allowed.is_empty() {
                // The addresses stay in the log: a fact would tell agents
                // what the server's own network looks like.
                tracing::info!(host, refused = ?refusals, "the SSRF guard refused every address of a host");
                return Err(FetchError::Refused(format!(
                    "{host} resolves only to non-public addresses"
                ))
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests;
