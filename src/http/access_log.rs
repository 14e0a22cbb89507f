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

/// How long a submit waits for its gate unless `?wait=` says otherwise.
const SUBMIT_WAIT: Duration = Duration::from_secs(30);

/// The level of one request's line.
pub fn level(status: StatusCode, took: Duration, patience: Duration, slow: Duration) -> Level {
    if status.is_server_error() {
        Level::WARN
    } else if took > patience + slow {
        Level::INFO
    } else {
        Level::DEBUG
    }
}

/// How long the request may wait by its own terms: `?wait=N`, a submit's default.
fn own_wait(uri: &Uri) -> Duration {
    let asked = uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| {
            pair.strip_prefix("wait=")
                .and_then(|n| n.parse::<u64>().ok())
        });
    match asked {
        Some(seconds) => Duration::from_secs(seconds),
        None if uri.path().ends_with("/submit") => SUBMIT_WAIT,
        None => Duration::ZERO,
    }
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
        Duration::MAX / 2
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
        assert_eq!(wait("/v1/submissions/x?wait=20"), Duration::from_secs(20));
        assert_eq!(wait("/v1/quests/q/submit"), SUBMIT_WAIT);
        assert_eq!(wait("/v1/quests/q/submit?wait=0"), Duration::ZERO);
        assert_eq!(wait("/v1/sessions"), Duration::ZERO);
        assert_eq!(wait("/v1/sessions?x=1&wait=nope"), Duration::ZERO);
    }
}
