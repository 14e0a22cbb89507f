//! Web pages as the gates see them: the [`Fetcher`] trait, the [`Page`] it
//! returns, and [`CachedFetcher`], the per-session cache in front of it.
//! The real fetcher is [`HttpFetcher`] (reqwest behind an SSRF guard, see
//! [`guard`]).
//!
//! This module reports what the web answered; it decides no verdicts.

pub mod guard;
mod http;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{Clock, SystemClock};

pub use guard::AddressPolicy;
pub use http::{FetchSettings, HttpFetcher};

/// One fetched page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The URL asked for.
    pub url: String,
    /// The URL answered, after redirects.
    pub final_url: String,
    pub status: u16,
    pub content_type: Option<String>,
    /// The body, at most the fetcher's cap.
    pub body: Arc<[u8]>,
    /// True when the body was longer than the cap and the rest was not read.
    pub truncated: bool,
    pub fetched_at: DateTime<Utc>,
}

/// Why a page could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The SSRF guard refused the URL or every address its host resolves to; nothing was sent.
    #[error("refused before connecting: {0}")]
    Refused(String),
    /// The host does not exist or has no address.
    #[error("{0} has no address in DNS")]
    NoSuchHost(String),
    /// The redirect chain was longer than the limit.
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    /// No complete answer within the time limit.
    #[error("no complete answer within {0} ms")]
    Timeout(u128),
    /// Connection refused or reset, TLS failure, DNS unavailable, and the like.
    #[error("{0}")]
    Unreachable(String),
}

/// Fetches web pages.
#[async_trait]
pub trait Fetcher: Send + Sync {
    /// GETs `url`, following redirects.
    async fn fetch(&self, url: &str) -> Result<Page, FetchError>;
}

/// How long a fetched page is reused.
pub const PAGE_TTL: Duration = Duration::from_secs(300);
/// How long a failed fetch is reused: long enough for the quests that cite the
/// same page at the same moment, short enough that a passing hiccup does not
/// send a whole session to review.
pub const ERROR_TTL: Duration = Duration::from_secs(30);
/// Body bytes one cache keeps; the oldest pages go first beyond it.
pub const CACHE_BUDGET: usize = 32 * 1024 * 1024;

type Slot = Arc<tokio::sync::Mutex<Option<(DateTime<Utc>, Result<Page, FetchError>)>>>;

/// A cache in front of a [`Fetcher`]: one page cited by many quests is fetched
/// once per [`PAGE_TTL`], and concurrent requests for one URL wait for the
/// single fetch in flight. Each email gate (so each session) has its own.
pub struct CachedFetcher {
    inner: Arc<dyn Fetcher>,
    slots: Mutex<HashMap<String, Slot>>,
    budget: usize,
    clock: Arc<dyn Clock>,
}

impl CachedFetcher {
    /// A cache of at most [`CACHE_BUDGET`] body bytes in front of `inner`.
    pub fn new(inner: Arc<dyn Fetcher>) -> CachedFetcher {
        CachedFetcher::with_limits(inner, CACHE_BUDGET, Arc::new(SystemClock))
    }

    /// A cache of at most `budget` body bytes in front of `inner`, telling time by `clock`.
    pub fn with_limits(
        inner: Arc<dyn Fetcher>,
        budget: usize,
        clock: Arc<dyn Clock>,
    ) -> CachedFetcher {
        CachedFetcher {
            inner,
            slots: Mutex::new(HashMap::new()),
            budget,
            clock,
        }
    }

    /// The slot for `key`, after dropping expired slots and, beyond the budget,
    /// the oldest ones. Slots being filled right now are never dropped.
    fn slot(&self, key: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now();
        let mut kept = Vec::new();
        slots.retain(|k, slot| {
            let Ok(entry) = slot.try_lock() else {
                return true;
            };
            match &*entry {
                Some((at, result)) if fresh(now, *at, result) => {
                    let size = result.as_ref().map_or(0, |p| p.body.len());
                    kept.push((*at, size, k.clone()));
                    true
                }
                Some(_) => false,
                None => true,
            }
        });
        let mut total: usize = kept.iter().map(|(_, size, _)| size).sum();
        kept.sort();
        for (_, size, k) in kept {
            if total <= self.budget {
                break;
            }
            slots.remove(&k);
            total -= size;
        }
        slots.entry(key.to_owned()).or_default().clone()
    }
}

fn fresh(now: DateTime<Utc>, at: DateTime<Utc>, result: &Result<Page, FetchError>) -> bool {
    let ttl = if result.is_ok() { PAGE_TTL } else { ERROR_TTL };
    // A clock that stepped back counts as no time passed.
    (now - at).to_std().unwrap_or_default() < ttl
}

/// The cache key: the URL without its fragment, which is never sent.
fn cache_key(url: &str) -> &str {
    url.split_once('#').map_or(url, |(before, _)| before)
}

#[async_trait]
impl Fetcher for CachedFetcher {
    async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let slot = self.slot(cache_key(url));
        let mut entry = slot.lock().await;
        if let Some((at, result)) = &*entry
            && fresh(self.clock.now(), *at, result)
        {
            return result.clone();
        }
        let result = self.inner.fetch(url).await;
        *entry = Some((self.clock.now(), result.clone()));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeFetcher, ManualClock};

    fn cached(fake: &Arc<FakeFetcher>, budget: usize) -> (CachedFetcher, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (
            CachedFetcher::with_limits(fake.clone(), budget, clock.clone()),
            clock,
        )
    }

    #[tokio::test]
    async fn a_page_is_fetched_once_until_it_expires() {
        let fake = Arc::new(FakeFetcher::new().html("https://acme.test/contact", "hi"));
        let (cache, clock) = cached(&fake, CACHE_BUDGET);
        for _ in 0..3 {
            let page = cache.fetch("https://acme.test/contact").await.unwrap();
            assert_eq!(&*page.body, b"hi");
        }
        cache.fetch("https://acme.test/contact#team").await.unwrap();
        assert_eq!(fake.calls().len(), 1, "the fragment is not part of the key");
        clock.advance(PAGE_TTL);
        cache.fetch("https://acme.test/contact").await.unwrap();
        assert_eq!(fake.calls().len(), 2);
    }

    #[tokio::test]
    async fn a_failure_is_remembered_briefly() {
        let fake = Arc::new(FakeFetcher::new());
        let (cache, clock) = cached(&fake, CACHE_BUDGET);
        let url = "https://gone.test/";
        assert!(cache.fetch(url).await.is_err());
        assert!(cache.fetch(url).await.is_err());
        assert_eq!(fake.calls().len(), 1);
        clock.advance(ERROR_TTL);
        assert!(cache.fetch(url).await.is_err());
        assert_eq!(fake.calls().len(), 2);
    }

    #[tokio::test]
    async fn concurrent_requests_for_one_page_share_one_fetch() {
        let fake = Arc::new(FakeFetcher::new().html("https://acme.test/", "x"));
        let cache = Arc::new(cached(&fake, CACHE_BUDGET).0);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.fetch("https://acme.test/").await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(fake.calls().len(), 1);
    }

    #[tokio::test]
    async fn beyond_the_budget_the_oldest_pages_are_dropped() {
        let fake = Arc::new(
            FakeFetcher::new()
                .html("https://a.test/", "aaaa")
                .html("https://b.test/", "bbbb")
                .html("https://c.test/", "cccc"),
        );
        let (cache, clock) = cached(&fake, 8);
        for url in ["https://a.test/", "https://b.test/", "https://c.test/"] {
            cache.fetch(url).await.unwrap();
            clock.advance(Duration::from_secs(1));
        }
        // a, b and c hold 12 bytes: fetching c dropped nothing yet (it prunes
        // before storing), so asking for b prunes a, the oldest.
        cache.fetch("https://b.test/").await.unwrap();
        cache.fetch("https://a.test/").await.unwrap();
        assert_eq!(
            fake.calls(),
            [
                "https://a.test/",
                "https://b.test/",
                "https://c.test/",
                "https://a.test/"
            ]
        );
    }
}
