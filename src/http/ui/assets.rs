//! The console's style sheet, script and icon, compiled into the binary and
//! served from this origin, so that the console works without the internet.

use std::sync::LazyLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::{PageError, PagePath};

const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

/// A digest of every asset: pages ask for `?v=<it>`, so a new build is never
/// served a stale copy while the browser may keep one for a long time.
pub fn version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        let mut hash = Sha256::new();
        for (name, _, body) in ASSETS {
            hash.update(name.as_bytes());
            hash.update(body.as_bytes());
        }
        hex::encode(hash.finalize())[..12].to_owned()
    });
    &VERSION
}

/// One asset by name.
pub async fn serve(PagePath(name): PagePath<String>) -> Result<Response, PageError> {
    let (_, media_type, body) = ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| PageError::new(StatusCode::NOT_FOUND, "Not found", "No such file."))?;
    Ok((
        [
            (header::CONTENT_TYPE, *media_type),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        *body,
    )
        .into_response())
}
