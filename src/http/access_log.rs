//! One line per request, at a level that keeps a day's log small: WARN for a
//! server error, INFO for a request slower than `QUEST_SLOW_MS`, DEBUG for
//! everything else. An event stream is never slow (its response is its
//! headers), and a long poll is slow only past its own wait.

use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Level;

use crate::service::MAX_WAIT_SECONDS;

/// How long a submit waits for its gate unless `?wait=` says otherwise.
const SUBMIT_WAIT: Duration = Duration::from_secs(30);

/// The level of one request's line.
pub fn level(status: StatusCode, took: Duration, patience: Duration, slow: Duration) -> Level {
    if status.is_server_error() {
        Level::WARN
    } else if took > patience.saturating_add(slow) {
        Level::INFO
    } else {
        Level::DEBUG
    }
}

/// How long the request may wait by its own terms: a submit's `?wait=N`
/// (at most what a submit may ask for), else its default. Nothing else waits.
fn own_wait(uri: &Uri) -> Duration {
    if !uri.path().ends_with("/submit") {
        return Duration::ZERO;
    }
    let asked = uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| {
            pair.strip_prefix("wait=")
                .and_then(|n| n.parse::<u64>().ok())
        });
    asked.map_or(SUBMIT_WAIT, |seconds| {
        Duration::from_secs(seconds.min(MAX_WAIT_SECONDS.into()))
    })
}

/// The middleware: times the request and logs its line at [`level`].
pub async fn log(slow: Duration, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status();
    let stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let patience = if stream {
        Duration::MAX
    } else {
        own_wait(&uri)
    };
    let ms = took.as_millis() as u64;
    let status = status.as_u16();
    match level(response.status(), took, patience, slow) {
        Level::WARN => tracing::warn!(%method, %uri, status, ms, "request failed"),
        Level::INFO => tracing::info!(%method, %uri, status, ms, "slow request"),
        _ => tracing::debug!(%method, %uri, status, ms, "request"),
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOW: Duration = Duration::from_secs(1);

    #[test]
    fn server_errors_warn_slow_requests_inform_and_the_rest_is_debug() {
        let ms = Duration::from_millis;
        let none = Duration::ZERO;
        assert_eq!(
            level(StatusCode::INTERNAL_SERVER_ERROR, ms(3), none, SLOW),
            Level::WARN
        );
        assert_eq!(level(StatusCode::OK, ms(1500), none, SLOW), Level::INFO);
        assert_eq!(
            level(StatusCode::NOT_FOUND, ms(20), none, SLOW),
            Level::DEBUG
        );
        // A long poll that ended within its own wait is not slow.
        assert_eq!(
            level(StatusCode::ACCEPTED, ms(30_200), SUBMIT_WAIT, SLOW),
            Level::DEBUG
        );
        assert_eq!(
            level(StatusCode::OK, ms(32_000), SUBMIT_WAIT, SLOW),
            Level::INFO
        );
    }

    #[test]
    fn a_request_waits_what_it_asked_for_and_a_submit_its_default() {
        let wait = |uri: &str| own_wait(&uri.parse().unwrap());
        assert_eq!(wait("/v1/quests/q/submit?wait=20"), Duration::from_secs(20));
        assert_eq!(wait("/v1/quests/q/submit"), SUBMIT_WAIT);
        assert_eq!(wait("/v1/quests/q/submit?wait=0"), Duration::ZERO);
        assert_eq!(wait("/v1/quests/q/submit?x=1&wait=nope"), SUBMIT_WAIT);
        // Only a submit waits: a `wait` elsewhere cannot hide a slow request.
        assert_eq!(wait("/v1/sessions?wait=300"), Duration::ZERO);
        // A wait past the limit (or past what a Duration holds) is the limit.
        let huge = wait("/v1/quests/q/submit?wait=18446744073709551615");
        assert_eq!(huge, Duration::from_secs(MAX_WAIT_SECONDS.into()));
        assert_eq!(
            level(StatusCode::OK, Duration::MAX, Duration::MAX, SLOW),
            Level::DEBUG
        );
    }
}
