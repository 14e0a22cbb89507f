//! Browser sign-in: the session cookie, the extractors that turn it into the
//! signed-in token ([`Signed`], and [`SignedForm`] for forms, which also
//! checks the per-session CSRF token; both refuse what a limited token may
//! not see, by [`super::scope`]), and the cross-site check every
//! state-changing request passes first.

use std::marker::PhantomData;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use serde::Serialize;

use super::{PageError, scope};
use crate::domain::ids::TokenId;
use crate::domain::work::ReviewerId;
use crate::domain::{Permission, Role};
use crate::http::AppState;
use crate::http::extract::Need;
use crate::service::console::{BROWSER_SESSION_SECONDS, BrowserSession};

/// The cookie that carries a browser session's id.
pub const COOKIE: &str = "quest_console";

/// The signed-in token, as the pages show it.
#[derive(Debug, Clone, Serialize)]
pub struct Me {
    /// The signed-in token: claims and decisions belong to it, not to its name.
    pub token_id: TokenId,
    pub name: String,
    pub role: Role,
    /// Whether the role may decide REVIEW quests.
    pub can_review: bool,
    /// Whether it may resume paused tokens (an admin).
    pub can_resume: bool,
    /// The sessions the token is limited to; `None`: every session.
    #[serde(skip)]
    pub sessions: Option<Vec<crate::domain::ids::SessionId>>,
    /// The token every form of this browser session carries.
    pub csrf: String,
    /// The browser session's name in the store (its review skips).
    #[serde(skip)]
    pub browser_session: String,
    /// A reviewer token that adjudicates.
    pub adjudicate: bool,
}

impl From<BrowserSession> for Me {
    fn from(s: BrowserSession) -> Self {
        Me {
            can_review: s.role.allows(Permission::Review),
            can_resume: s.role.allows(Permission::Administer),
            sessions: s.sessions,
            token_id: s.token_id,
            name: s.name,
            role: s.role,
            csrf: s.csrf,
            browser_session: s.hash,
            adjudicate: s.adjudicate,
        }
    }
}

impl Me {
    /// The signed-in token as a reviewer.
    pub fn reviewer(&self) -> ReviewerId {
        ReviewerId::new(self.token_id, self.name.clone())
    }

    /// The signed-in token, as the review's visibility rules see it.
    pub fn viewer(&self) -> crate::domain::review::Viewer {
        crate::domain::review::Viewer {
            token: self.token_id,
            role: self.role,
            adjudicate: self.adjudicate,
        }
    }
}

/// A browser signed in with a token whose role allows `N`.
pub struct Signed<N: Need> {
    pub me: Me,
    /// The cookie's session id (to sign out, or to re-check a long stream).
    pub cookie: String,
    need: PhantomData<N>,
}

/// The value of the session cookie, if the request carries one.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
}

/// Whether the browser says the request came over HTTPS: directly, or as a
/// proxy in front of the server reports it.
pub fn over_https(parts_uri: &axum::http::Uri, headers: &HeaderMap) -> bool {
    let header_text = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
            .to_ascii_lowercase()
    };
    parts_uri.scheme_str() == Some("https")
        || header_text("x-forwarded-proto")
            .split(',')
            .next()
            .is_some_and(|p| p.trim() == "https")
        || header_text("forwarded")
            .split([';', ','])
            .any(|p| p.trim() == "proto=https")
}

/// The `Set-Cookie` value that starts a browser session.
pub fn start_cookie(secret: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={secret}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={BROWSER_SESSION_SECONDS}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn end_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Whether a request was sent by a page of another site: its `Origin` is not
/// this server's, or the browser's `Sec-Fetch-Site` says so. Requests without
/// either header (not from a browser) still need the session's CSRF token.
pub fn cross_site(headers: &HeaderMap) -> bool {
    let value = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return true;
    }
    let Some(origin) = value(header::ORIGIN) else {
        return false;
    };
    let Some(origin_host) = url::Url::parse(origin).ok().and_then(|u| {
        u.host_str().map(|h| match u.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        })
    }) else {
        return true; // `null` or garbage: a sandboxed or privacy-stripped sender
    };
    // The browser cannot forge Host or X-Forwarded-Host on a cross-site request.
    let hosts = [
        value(header::HOST),
        value(header::HeaderName::from_static("x-forwarded-host")),
    ];
    !hosts
        .into_iter()
        .flatten()
        .flat_map(|h| h.split(','))
        .any(|h| h.trim().eq_ignore_ascii_case(&origin_host))
}

/// Where a sign-in may send the browser back to: a console path, nothing else.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/ui")
                && !n.contains("//")
                && !n.contains('\\')
                && matches!(n.as_bytes().get(3), None | Some(b'/' | b'?')) =>
        {
            n.to_owned()
        }
        _ => "/ui".to_owned(),
    }
}

impl<N: Need> FromRequestParts<AppState> for Signed<N> {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let session = match session_cookie(&parts.headers) {
            Some(cookie) => state
                .service
                .browser_session(&cookie)
                .await?
                .map(|s| (cookie, s)),
            None => None,
        };
        let Some((cookie, session)) = session else {
            return Err(
                if parts.method == Method::GET || parts.method == Method::HEAD {
                    // Inside the console's nested router the path has lost its `/ui`.
                    let uri = parts
                        .extensions
                        .get::<axum::extract::OriginalUri>()
                        .map_or(&parts.uri, |o| &o.0);
                    let next = uri
                        .path_and_query()
                        .map_or("/ui", |p| p.as_str())
                        .to_owned();
                    PageError::SignIn { next }
                } else {
                    PageError::new(
                        StatusCode::UNAUTHORIZED,
                        "Signed out",
                        "Your browser session has ended (signed out, expired, or its token was revoked). Sign in again.",
                    )
                },
            );
        };
        if !session.role.allows(N::PERMISSION) {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                "Not allowed",
                format!(
                    "This needs {}; you are signed in as `{}` with the `{}` role.",
                    N::ROLES,
                    session.name,
                    session.role
                ),
            ));
        }
        if let Some(limit) = session.sessions.as_deref() {
            scope::check_address(parts, state, limit).await?;
        }
        if session.role == Role::Agent {
            scope::check_agent(parts, state).await?;
        }
        Ok(Signed {
            me: session.into(),
            cookie,
            need: PhantomData,
        })
    }
}

/// The fields of a urlencoded form, in order; a name may repeat.
#[derive(Debug, Default)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// Parses a urlencoded body.
    pub fn parse(body: &[u8]) -> Fields {
        Fields(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl<S: Send + Sync> FromRequest<S> for Fields {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !is_form {
            return Err(PageError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Bad request",
                "Send the console's form (application/x-www-form-urlencoded).",
            ));
        }
        let body = Bytes::from_request(req, state).await.map_err(|e| {
            PageError::new(
                e.status(),
                "Bad request",
                "The form could not be read; it may be too large.",
            )
        })?;
        Ok(Fields::parse(&body))
    }
}

/// A form sent by a browser signed in with a role that allows `N`, carrying
/// that browser session's CSRF token.
pub struct SignedForm<N: Need> {
    pub me: Me,
    pub cookie: String,
    pub fields: Fields,
    need: PhantomData<N>,
}

impl<N: Need> FromRequest<AppState> for SignedForm<N> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let signed = Signed::<N>::from_request_parts(&mut parts, state).await?;
        let fields = Fields::from_request(Request::from_parts(parts, body), state).await?;
        let sent = fields.get("csrf").unwrap_or_default();
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            sent.as_bytes(),
            signed.me.csrf.as_bytes(),
        )) {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                "Refused",
                "This form does not carry this browser session's token (it may come from another site, \
                 or from before you signed in again). Reload the page and try again.",
            ));
        }
        if let Some(limit) = signed.me.sessions.as_deref() {
            scope::check_named(state, limit, &fields).await?;
        }
        Ok(SignedForm {
            me: signed.me,
            cookie: signed.cookie,
            fields,
            need: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_request_from_another_origin_is_cross_site_and_one_from_here_is_not() {
        let here = [("host", "127.0.0.1:8080")];
        assert!(
            !cross_site(&headers(&here)),
            "no Origin: not a browser form"
        );
        assert!(!cross_site(&headers(&[
            here[0],
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(cross_site(&headers(&[
            here[0],
            ("origin", "http://evil.test")
        ])));
        assert!(cross_site(&headers(&[
            here[0],
            ("origin", "http://127.0.0.1:9999")
        ])));
        assert!(cross_site(&headers(&[here[0], ("origin", "null")])));
        assert!(cross_site(&headers(&[
            here[0],
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(cross_site(&headers(&[
            here[0],
            ("sec-fetch-site", "same-site")
        ])));
        assert!(!cross_site(&headers(&[
            ("host", "backend:8080"),
            ("x-forwarded-host", "quest.example.org"),
            ("origin", "https://quest.example.org"),
        ])));
    }

    #[test]
    fn the_cookie_is_secure_only_over_https_or_behind_a_proxy_that_says_so() {
        let uri: axum::http::Uri = "/ui/login".parse().unwrap();
        assert!(!over_https(&uri, &headers(&[])));
        assert!(over_https(
            &uri,
            &headers(&[("x-forwarded-proto", "https")])
        ));
        assert!(over_https(
            &uri,
            &headers(&[("forwarded", "for=1.2.3.4;proto=https")])
        ));
        assert!(!over_https(
            &uri,
            &headers(&[("x-forwarded-proto", "http")])
        ));
        let cookie = start_cookie("abc", true);
        for part in [
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Path=/ui",
            "Max-Age=",
        ] {
            assert!(cookie.contains(part), "{cookie}");
        }
        assert!(!start_cookie("abc", false).contains("Secure"));
    }

    #[test]
    fn sign_in_sends_the_browser_back_only_to_a_console_page() {
        assert_eq!(
            safe_next(Some("/ui/review?session=x")),
            "/ui/review?session=x"
        );
        assert_eq!(safe_next(Some("/ui")), "/ui");
        for bad in [
            "//evil.test",
            "https://evil.test",
            "/uix",
            "/ui//evil.test",
            "/ui\\x",
            "/v1/tokens",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; quest_console=s3cr3t; b=2")]);
        assert_eq!(session_cookie(&h).as_deref(), Some("s3cr3t"));
        assert_eq!(session_cookie(&headers(&[("cookie", "a=1")])), None);
    }
}
