//! Web pages as the gates see them: the [`Fetcher`] trait, the [`Page`] it
//! returns, and the [`PageCache`] in front of it, which every session's gate
//! uses through its own [`CachedFetcher`]. The real fetcher is [`HttpFetcher`]
//! (reqwest behind an SSRF guard, see [`guard`]).
//!
//! This module reports what the web answered; it decides no verdicts.

pub mod guard;
mod http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Why a page could not be fetched. The texts are shown to agents, so they
/// name nothing the agent did not write itself (no resolved addresses, no
/// library error chains); the details go to the server's log.
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
    /// No complete answer within the time limit (waiting for a turn at the host included).
    #[error("no complete answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// No connection could be made: refused, reset, a failed TLS handshake, or
    /// no answer to the connection attempt. `port` is the port of the URL that
    /// was dialled when it is not its scheme's standard one.
    #[error("no connection to {}: {reason}", port.map_or_else(|| "the web server".to_owned(), |p| format!("port {p}")))]
    NoConnection { port: Option<u16>, reason: String },
    /// The connection broke off, DNS gave no answer, and the like.
    #[error("{0}")]
    Unreachable(String),
}

impl FetchError {
    /// Whether the world gave no answer (a timeout, no connection to the web
    /// server, a broken connection), as opposed to an answer that contradicts
    /// the URL (no such host, a refused address, a port nothing listens on).
    pub fn is_no_answer(&self) -> bool {
        matches!(
            self,
            FetchError::Timeout(_)
                | FetchError::Unreachable(_)
                | FetchError::NoConnection { port: None, .. }
        )
    }
}

/// Whether an HTTP status says the server could not answer now (a timeout,
/// too many requests, a server error), not that the page is wrong.
pub fn is_unwell(status: u16) -> bool {
    matches!(status, 408 | 429 | 500..=599)
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
/// Body bytes the server's page cache keeps, over all sessions together; the
/// oldest pages go first beyond it.
pub const CACHE_BUDGET: usize = 64 * 1024 * 1024;

type Slot = Arc<tokio::sync::Mutex<Option<(DateTime<Utc>, Result<Page, FetchError>)>>>;

/// The pages the gates fetched recently, under one byte budget for the whole
/// server. Each session's gate reads and fills it through its own
/// [`CachedFetcher`], in its own namespace: one page cited by many quests of a
/// session is fetched once per [`PAGE_TTL`], and concurrent requests for one
/// URL wait for the single fetch in flight. Because the budget is shared, the
/// memory the cache holds does not grow with the number of sessions.
pub struct PageCache {
    slots: Mutex<HashMap<(u64, String), Slot>>,
    budget: usize,
    clock: Arc<dyn Clock>,
    namespaces: AtomicU64,
}

impl PageCache {
    /// A cache of at most [`CACHE_BUDGET`] body bytes.
    pub fn new() -> PageCache {
        PageCache::with_limits(CACHE_BUDGET, Arc::new(SystemClock))
    }

    /// A cache of at most `budget` body bytes, telling time by `clock`.
    pub fn with_limits(budget: usize, clock: Arc<dyn Clock>) -> PageCache {
        PageCache {
            slots: Mutex::new(HashMap::new()),
            budget,
            clock,
            namespaces: AtomicU64::new(0),
        }
    }

    /// An empty cache with this one's budget and clock, sharing nothing with it.
    pub fn empty_like(&self) -> PageCache {
        PageCache::with_limits(self.budget, self.clock.clone())
    }

    /// A fetcher in front of `inner` with a namespace of its own in this cache.
    pub fn fetcher(self: &Arc<Self>, inner: Arc<dyn Fetcher>) -> CachedFetcher {
        CachedFetcher {
            cache: self.clone(),
            namespace: self.namespaces.fetch_add(1, Ordering::Relaxed),
            inner,
        }
    }

    /// Body bytes held now.
    pub fn bytes(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .values()
            .filter_map(|slot| slot.try_lock().ok().and_then(|e| size(&e)))
            .sum()
    }

    /// The slot for `key`, after dropping expired slots and, beyond the budget,
    /// the oldest ones. Slots being filled right now are never dropped.
    fn slot(&self, key: (u64, String)) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now();
        let mut kept = Vec::new();
        slots.retain(|k, slot| {
            let Ok(entry) = slot.try_lock() else {
                return true;
            };
            match &*entry {
                Some((at, result)) if fresh(now, *at, result) => {
                    kept.push((*at, size(&entry).unwrap_or(0), k.clone()));
                    true
                }
                Some(_) => false,
                None => true,
            }
        });
        let mut total: usize = kept.iter().map(|(_, size, _)| size).sum();
        if total > self.budget {
            kept.sort();
            for (_, size, k) in kept {
                if total <= self.budget {
                    break;
                }
                slots.remove(&k);
                total -= size;
            }
        }
        slots.entry(key).or_default().clone()
    }
}

impl Default for PageCache {
    fn default() -> Self {
        PageCache::new()
    }
}

/// The body bytes a filled slot holds.
fn size(entry: &Option<(DateTime<Utc>, Result<Page, FetchError>)>) -> Option<usize> {
    entry
        .as_ref()
        .map(|(_, result)| result.as_ref().map_or(0, |p| p.body.len()))
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

/// One session's view of the [`PageCache`], in front of the real fetcher.
pub struct CachedFetcher {
    cache: Arc<PageCache>,
    namespace: u64,
    inner: Arc<dyn Fetcher>,
}

#[async_trait]
impl Fetcher for CachedFetcher {
    async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let slot = self.cache.slot((self.namespace, cache_key(url).to_owned()));
        let mut entry = slot.lock().await;
        let result = match &*entry {
            Some((at, result)) if fresh(self.cache.clock.now(), *at, result) => result.clone(),
            _ => {
                let result = self.inner.fetch(url).await;
                *entry = Some((self.cache.clock.now(), result.clone()));
                result
            }
        };
        // The page another URL of the same key filled (another fragment) is
        // this caller's page: its evidence names the URL this caller asked for.
        result.map(|mut page| {
            page.url = url.to_owned();
            page
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeFetcher, ManualClock};

    fn cached(fake: &Arc<FakeFetcher>, budget: usize) -> (CachedFetcher, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let cache = Arc::new(PageCache::with_limits(budget, clock.clone()));
        (cache.fetcher(fake.clone()), clock)
    }

    #[tokio::test]
    async fn a_page_is_fetched_once_until_it_expires() {
        let fake = Arc::new(FakeFetcher::new().html("https://acme.test/contact", "hi"));
        let (cache, clock) = cached(&fake, CACHE_BUDGET);
        for _ in 0..3 {
            let page = cache.fetch("https://acme.test/contact").await.unwrap();
            assert_eq!(&*page.body, b"hi");
        }
        let team = cache.fetch("https://acme.test/contact#team").await.unwrap();
        assert_eq!(fake.calls().len(), 1, "the fragment is not part of the key");
        assert_eq!(
            team.url, "https://acme.test/contact#team",
            "the page names the URL its caller asked for"
        );
        let again = cache.fetch("https://acme.test/contact").await.unwrap();
        assert_eq!(again.url, "https://acme.test/contact");
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

    #[tokio::test]
    async fn sessions_share_one_budget_but_not_their_pages() {
        let fake = Arc::new(
            FakeFetcher::new()
                .html("https://a.test/", "aaaa")
                .html("https://b.test/", "bbbb")
                .html("https://c.test/", "cccc"),
        );
        let clock = Arc::new(ManualClock::new());
        let cache = Arc::new(PageCache::with_limits(8, clock.clone()));
        let sessions: Vec<CachedFetcher> = (0..3).map(|_| cache.fetcher(fake.clone())).collect();
        sessions[0].fetch("https://a.test/").await.unwrap();
        sessions[1].fetch("https://a.test/").await.unwrap();
        assert_eq!(fake.calls().len(), 2, "each session fetches for itself");
        for (session, url) in
            sessions
                .iter()
                .zip(["https://a.test/", "https://b.test/", "https://c.test/"])
        {
            clock.advance(Duration::from_secs(1));
            session.fetch(url).await.unwrap();
        }
        // Many sessions, one budget: the next fetch prunes down to 8 bytes.
        sessions[2].fetch("https://c.test/").await.unwrap();
        assert!(cache.bytes() <= 8, "{} bytes kept", cache.bytes());
    }
}
