use super::*;
use crate::domain::SystemClock;
use crate::testing::{FakeResolver, ManualClock, fake_fetch_time};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone)]
struct Site {
    active: Arc<AtomicUsize>,
    max_active: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
    redirect_to: Arc<Mutex<String>>,
}

impl Default for Site {
    fn default() -> Self {
        Site {
            active: Arc::default(),
            max_active: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
            redirect_to: Arc::default(),
        }
    }
}

async fn chain(Path(n): Path<u32>) -> Response {
    if n == 0 {
        "end of the chain".into_response()
    } else {
        Redirect::to(&format!("/chain/{}", n - 1)).into_response()
    }
}

async fn held(State(site): State<Site>) -> &'static str {
    let now = site.active.fetch_add(1, Ordering::SeqCst) + 1;
    site.max_active.fetch_max(now, Ordering::SeqCst);
    site.release.acquire().await.unwrap().forget();
    site.active.fetch_sub(1, Ordering::SeqCst);
    "held"
}

/// A web server on 127.0.0.1 and its port.
async fn serve(site: Site) -> u16 {
    let app = Router::new()
        .route(
            "/ok",
            get(|| async { "<a href=\"mailto:info@acme.test\">mail</a>" }),
        )
        .route("/chain/{n}", get(chain))
        .route(
            "/ua",
            get(|headers: HeaderMap| async move {
                headers[header::USER_AGENT].to_str().unwrap().to_owned()
            }),
        )
        .route("/big", get(|| async { "x".repeat(5000) }))
        .route("/slow", get(std::future::pending::<&'static str>))
        .route(
            "/stall",
            get(|| async {
                // The head and a first chunk, then nothing: the body never ends.
                let first = futures_util::stream::once(async {
                    Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"<p>info@"))
                });
                axum::body::Body::from_stream(futures_util::StreamExt::chain(
                    first,
                    futures_util::stream::pending(),
                ))
            }),
        )
        .route("/held/{i}", get(held))
        .route(
            "/away",
            get(|State(site): State<Site>| async move {
                Redirect::to(&site.redirect_to.lock().unwrap()).into_response()
            }),
        )
        .route("/gone", get(|| async { (StatusCode::NOT_FOUND, "no") }))
        .with_state(site);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

fn fetcher(allow: &[&str], resolver: FakeResolver) -> HttpFetcher {
    let allow = allow.iter().map(|n| n.parse().unwrap()).collect();
    with_settings(FetchSettings::new(Duration::from_secs(10), allow), resolver)
}

fn with_settings(settings: FetchSettings, resolver: FakeResolver) -> HttpFetcher {
    HttpFetcher::new(settings, Arc::new(resolver), Arc::new(SystemClock)).unwrap()
}

fn loopback_settings(timeout: Duration) -> FetchSettings {
    FetchSettings::new(timeout, vec!["127.0.0.0/8".parse().unwrap()])
}

fn loopback_world() -> FakeResolver {
    FakeResolver::new().host("acme.test", &["127.0.0.1"])
}

/// A listener that proves no connection reached it: a completed TCP
/// handshake waits in the backlog, so a non-blocking accept finds it.
struct Tripwire(std::net::TcpListener);

impl Tripwire {
    fn bind(addr: &str) -> Option<Tripwire> {
        let listener = std::net::TcpListener::bind(addr).ok()?;
        listener.set_nonblocking(true).unwrap();
        Some(Tripwire(listener))
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    fn assert_untouched(&self) {
        match self.0.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("a connection reached {:?}: {other:?}", self.0.local_addr()),
        }
    }
}

fn assert_refused(result: Result<Page, FetchError>, mentions: &str) {
    match result {
        Err(FetchError::Refused(why)) => assert!(why.contains(mentions), "{why}"),
        other => panic!("expected a refusal mentioning {mentions}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_page_comes_back_with_status_final_url_and_an_honest_user_agent() {
    let port = serve(Site::default()).await;
    let f = HttpFetcher::new(
        loopback_settings(Duration::from_secs(10)),
        Arc::new(loopback_world()),
        Arc::new(ManualClock::new()),
    )
    .unwrap();
    let page = f
        .fetch(&format!("http://acme.test:{port}/ok"))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert_eq!(page.final_url, format!("http://acme.test:{port}/ok"));
    assert!(page.content_type.unwrap().starts_with("text/plain"));
    assert!(!page.truncated);
    assert_eq!(&*page.body, b"<a href=\"mailto:info@acme.test\">mail</a>");
    assert_eq!(
        page.fetched_at,
        fake_fetch_time(),
        "the time comes from the clock"
    );

    let ua = f
        .fetch(&format!("http://acme.test:{port}/ua"))
        .await
        .unwrap();
    assert_eq!(
        &*ua.body,
        format!("quest/{}", env!("CARGO_PKG_VERSION")).as_bytes()
    );

    let gone = f
        .fetch(&format!("http://acme.test:{port}/gone"))
        .await
        .unwrap();
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn five_redirects_are_followed_and_a_sixth_is_refused() {
    let port = serve(Site::default()).await;
    let f = fetcher(&["127.0.0.0/8"], loopback_world());
    let page = f
        .fetch(&format!("http://acme.test:{port}/chain/5"))
        .await
        .unwrap();
    assert_eq!(page.final_url, format!("http://acme.test:{port}/chain/0"));
    assert_eq!(&*page.body, b"end of the chain");
    assert_eq!(
        f.fetch(&format!("http://acme.test:{port}/chain/6")).await,
        Err(FetchError::TooManyRedirects(5))
    );
}

#[tokio::test]
async fn the_body_is_read_up_to_the_cap_and_no_further() {
    let port = serve(Site::default()).await;
    let mut settings = loopback_settings(Duration::from_secs(10));
    settings.max_body = 1024;
    let f = with_settings(settings, loopback_world());
    let page = f
        .fetch(&format!("http://acme.test:{port}/big"))
        .await
        .unwrap();
    assert!(page.truncated);
    assert_eq!(page.body.len(), 1024);
}

#[tokio::test]
async fn a_page_that_never_answers_times_out() {
    let port = serve(Site::default()).await;
    let limit = Duration::from_millis(300);
    let f = with_settings(loopback_settings(limit), loopback_world());
    assert_eq!(
        f.fetch(&format!("http://acme.test:{port}/slow")).await,
        Err(FetchError::Timeout(limit))
    );
    // The limit covers the body too: a server that stalls mid-body times out.
    assert_eq!(
        f.fetch(&format!("http://acme.test:{port}/stall")).await,
        Err(FetchError::Timeout(limit))
    );
    assert_eq!(
        FetchError::Timeout(limit).to_string(),
        "no complete answer within 300 ms"
    );
}

#[tokio::test]
async fn dns_and_connection_failures_are_told_apart() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let resolver = loopback_world().host_error(
        "flaky.test",
        LookupError::Unavailable {
            name: "flaky.test".into(),
            reason: "SERVFAIL".into(),
        },
    );
    let f = fetcher(&["127.0.0.0/8"], resolver);
    assert_eq!(
        f.fetch("http://missing.test/").await,
        Err(FetchError::NoSuchHost("missing.test".into()))
    );
    match f.fetch("http://flaky.test/").await {
        Err(FetchError::Unreachable(why)) => assert!(why.contains("SERVFAIL"), "{why}"),
        other => panic!("{other:?}"),
    }
    let refused = f.fetch(&format!("http://acme.test:{closed}/")).await;
    assert_eq!(
        refused,
        Err(FetchError::NoConnection {
            port: Some(closed),
            reason: "connection refused".into()
        })
    );
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!("no connection to port {closed}: connection refused")
    );
    assert!(matches!(
        f.fetch("not a url").await,
        Err(FetchError::Refused(_))
    ));
}

#[tokio::test]
async fn a_body_cut_off_is_unreachable_in_a_few_words() {
    // A server that promises 100 bytes, sends 5 and hangs up.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 1024];
        let _ = socket.read(&mut request).await;
        let _ = socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
            .await;
    });
    let f = fetcher(&["127.0.0.0/8"], loopback_world());
    assert_eq!(
        f.fetch(&format!("http://acme.test:{port}/")).await,
        Err(FetchError::Unreachable(
            "the connection broke off before the page was read".into()
        ))
    );
}

#[tokio::test]
async fn at_most_two_requests_to_one_host_are_in_flight() {
    let site = Site::default();
    let port = serve(site.clone()).await;
    let f = Arc::new(fetcher(&["127.0.0.0/8"], loopback_world()));
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let f = f.clone();
            tokio::spawn(async move { f.fetch(&format!("http://acme.test:{port}/held/{i}")).await })
        })
        .collect();
    while site.active.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    let slot = f.host_slot("ACME.test");
    assert_eq!(
        slot.available_permits(),
        0,
        "both slots of the host are taken"
    );
    drop(slot);
    site.release.add_permits(5);
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().status, 200);
    }
    assert_eq!(site.max_active.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn idle_hosts_are_forgotten_when_the_table_is_full() {
    let f = fetcher(&[], FakeResolver::new());
    for i in 0..1030 {
        f.host_slot(&format!("h{i}.test"));
    }
    assert!(f.hosts.lock().unwrap().len() < 1030);
}

// The SSRF guard with an empty allow-list: every refusal happens before
// any connection, which the tripwire listeners prove.

#[tokio::test]
async fn with_no_allow_list_a_loopback_ip_literal_is_refused_unconnected() {
    let wire = Tripwire::bind("127.0.0.1:0").unwrap();
    let f = fetcher(&[], FakeResolver::new());
    assert_refused(
        f.fetch(&format!("http://127.0.0.1:{}/contact", wire.port()))
            .await,
        "loopback",
    );
    wire.assert_untouched();
}

#[tokio::test]
async fn with_no_allow_list_ipv6_loopback_is_refused_unconnected() {
    let f = fetcher(&[], FakeResolver::new());
    let Some(wire) = Tripwire::bind("[::1]:0") else {
        // No IPv6 on this machine: the refusal still holds, only the tripwire is missing.
        assert_refused(f.fetch("http://[::1]:9/").await, "loopback");
        return;
    };
    assert_refused(
        f.fetch(&format!("http://[::1]:{}/", wire.port())).await,
        "loopback",
    );
    wire.assert_untouched();
}

#[tokio::test]
async fn with_no_allow_list_a_name_resolving_to_a_private_address_is_refused() {
    let wire = Tripwire::bind("127.0.0.1:0").unwrap();
    let resolver = FakeResolver::new()
        .host("intranet.test", &["10.0.0.1"])
        .host("sneaky.test", &["127.0.0.1"])
        .host("mapped.test", &["::ffff:127.0.0.1"]);
    let f = fetcher(&[], resolver);
    // The fact an agent reads names the host it gave, never the addresses
    // behind it: those would map the server's own network.
    for host in ["intranet.test", "sneaky.test", "mapped.test"] {
        match f.fetch(&format!("http://{host}:{}/", wire.port())).await {
            Err(FetchError::Refused(why)) => {
                assert_eq!(why, format!("{host} resolves only to non-public addresses"));
            }
            other => panic!("{host}: {other:?}"),
        }
    }
    wire.assert_untouched();
}

/// A name that answers an allowed address first and a refused one after:
/// DNS rebinding.
struct Rebinding {
    calls: AtomicUsize,
}

#[async_trait]
impl Resolver for Rebinding {
    async fn mail_hosts(&self, _domain: &str) -> crate::gates::dns::MailAnswer {
        crate::gates::dns::MailAnswer::NoDomain
    }
    async fn addresses(&self, _host: &str) -> Result<Vec<std::net::IpAddr>, LookupError> {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        Ok(vec![
            if first { "127.0.0.1" } else { "127.0.0.2" }
                .parse()
                .unwrap(),
        ])
    }
}

#[tokio::test]
async fn a_rebinding_name_is_resolved_once_and_only_the_checked_address_is_dialled() {
    let port = serve(Site::default()).await;
    // The refused address, at the same port: a connection there would show.
    let wire = Tripwire::bind(&format!("127.0.0.2:{port}")).expect("127.0.0.2 is loopback");
    let resolver = Arc::new(Rebinding {
        calls: AtomicUsize::new(0),
    });
    let f = HttpFetcher::new(
        FetchSettings::new(
            Duration::from_secs(10),
            vec!["127.0.0.1/32".parse().unwrap()],
        ),
        resolver.clone(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let page = f
        .fetch(&format!("http://rebind.test:{port}/ok"))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert_eq!(
        resolver.calls.load(Ordering::SeqCst),
        1,
        "no separate check to outrun: the connector's lookup is the only one"
    );
    wire.assert_untouched();
}

#[tokio::test]
async fn with_no_allow_list_the_cloud_metadata_address_is_refused() {
    let f = fetcher(
        &[],
        FakeResolver::new().host("metadata.test", &["169.254.169.254"]),
    );
    assert_refused(
        f.fetch("http://169.254.169.254/latest/meta-data/").await,
        "link-local",
    );
    assert_refused(
        f.fetch("http://metadata.test/").await,
        "metadata.test resolves only to non-public addresses",
    );
}

#[tokio::test]
async fn a_redirect_from_an_allowed_host_to_a_refused_one_is_not_followed() {
    // Only 127.0.0.1 is allowed, so the site can be served at all; every
    // redirect target below is outside that allow-list.
    let site = Site::default();
    let port = serve(site.clone()).await;
    let wire = Tripwire::bind("127.0.0.2:0").unwrap();
    let resolver = loopback_world().host("intranet.test", &["10.0.0.1"]);
    let f = fetcher(&["127.0.0.1/32"], resolver);
    let away = format!("http://acme.test:{port}/away");
    for (target, mentions) in [
        (format!("http://127.0.0.2:{}/", wire.port()), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "link-local",
        ),
        (
            "http://intranet.test/".to_owned(),
            "intranet.test resolves only to non-public addresses",
        ),
        ("http://[::1]/".to_owned(), "loopback"),
    ] {
        *site.redirect_to.lock().unwrap() = target.clone();
        assert_refused(f.fetch(&away).await, mentions);
    }
    wire.assert_untouched();
    // A redirect to another scheme is refused like any other hop.
    *site.redirect_to.lock().unwrap() = "file:///etc/passwd".into();
    assert_refused(f.fetch(&away).await, "only http and https are fetched");
}

/// Takes every turn of `host` and keeps them until dropped.
fn occupy(f: &HttpFetcher, host: &str) -> tokio::sync::OwnedSemaphorePermit {
    f.host_slot(host).try_acquire_many_owned(2).unwrap()
}

/// The fetch, or a panic if it does not end at all (the bug this guards against).
async fn ends(f: &HttpFetcher, url: &str) -> Result<Page, FetchError> {
    tokio::time::timeout(Duration::from_secs(10), f.fetch(url))
        .await
        .unwrap_or_else(|_| panic!("{url}: the fetch waited past its own time limit"))
}

#[tokio::test]
async fn waiting_for_a_busy_host_counts_against_the_time_limit() {
    let port = serve(Site::default()).await;
    let limit = Duration::from_millis(300);
    let f = with_settings(loopback_settings(limit), loopback_world());
    let busy = occupy(&f, "acme.test");
    assert_eq!(
        ends(&f, &format!("http://acme.test:{port}/ok")).await,
        Err(FetchError::Timeout(limit))
    );
    // Other spellings of the host wait in the same line.
    for url in [
        format!("http://ACME.test:{port}/ok"),
        format!("http://acme.test.:{port}/ok"),
    ] {
        assert_eq!(
            ends(&f, &url).await,
            Err(FetchError::Timeout(limit)),
            "{url}"
        );
    }
    drop(busy);
    assert_eq!(
        ends(&f, &format!("http://acme.test:{port}/ok"))
            .await
            .unwrap()
            .status,
        200
    );
}

#[tokio::test]
async fn every_redirect_hop_waits_for_its_own_host() {
    let site = Site::default();
    let port = serve(site.clone()).await;
    let limit = Duration::from_millis(300);
    let resolver = loopback_world().host("other.test", &["127.0.0.1"]);
    let f = with_settings(loopback_settings(limit), resolver);
    *site.redirect_to.lock().unwrap() = format!("http://other.test:{port}/ok");
    let away = format!("http://acme.test:{port}/away");
    assert_eq!(
        ends(&f, &away).await.unwrap().final_url,
        format!("http://other.test:{port}/ok")
    );
    let busy = occupy(&f, "other.test");
    assert_eq!(ends(&f, &away).await, Err(FetchError::Timeout(limit)));
    drop(busy);
}
