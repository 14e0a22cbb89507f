//! The console's templates, compiled into the binary, and the one place they
//! are rendered. Auto-escaping is HTML for every template, so anything an
//! agent, a page or a model wrote is shown as text; nothing is marked safe.

use std::sync::LazyLock;

use axum::response::Html;
use chrono::{DateTime, Utc};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};
use serde::Serialize;

use super::PageError;
use super::auth::Me;

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("error.html", include_str!("templates/error.html")),
    ("login.html", include_str!("templates/login.html")),
    ("dashboard.html", include_str!("templates/dashboard.html")),
    ("session.html", include_str!("templates/session.html")),
    ("quest.html", include_str!("templates/quest.html")),
    ("review.html", include_str!("templates/review.html")),
    ("bulk.html", include_str!("templates/bulk.html")),
];

static ENV: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    for (name, source) in TEMPLATES {
        env.add_template(name, source)
            .unwrap_or_else(|e| panic!("the console template {name} is broken: {e:#}"));
    }
    env.add_filter("dt", datetime);
    env.add_filter("pretty", pretty);
    env.add_filter("duration", super::view::duration);
    env.add_filter("num", number);
    env.add_global("asset_version", super::assets::version());
    env
});

/// Renders a page for a signed-in browser: `me` plus the page's own values.
pub fn page(name: &str, me: &Me, values: impl Serialize) -> Result<Html<String>, PageError> {
    let nav = if name.starts_with("review") || name.starts_with("bulk") {
        "review"
    } else {
        "dashboard"
    };
    render(
        name,
        minijinja::context! { me => Serde(me), nav => nav, ..Value::from(Serde(&values)) },
    )
}

/// Renders a template with exactly `context`.
pub fn render(name: &str, context: Value) -> Result<Html<String>, PageError> {
    ENV.get_template(name)
        .and_then(|t| t.render(context))
        .map(Html)
        .map_err(|e| {
            tracing::error!(template = name, error = %format!("{e:#}"), "a console template failed");
            PageError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "The page could not be drawn; try again, and report it if it persists.",
            )
        })
}

/// `2026-12-01 10:04 UTC` from an RFC 3339 time; other text unchanged.
fn datetime(value: String) -> String {
    DateTime::parse_from_rfc3339(&value)
        .map(|t| {
            t.with_timezone(&Utc)
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string()
        })
        .unwrap_or(value)
}

/// Any value as indented JSON text (escaped like any other text).
fn pretty(value: Value) -> String {
    serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
}

/// A count with thin separators of thousands: `1 234 567`.
fn number(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::view::duration;

    #[test]
    fn every_template_compiles() {
        for (name, _) in TEMPLATES {
            assert!(ENV.get_template(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn markup_in_a_value_is_escaped_in_every_template() {
        let html = render(
            "error.html",
            minijinja::context! { me => (), title => "<b>t</b>", message => "<script>alert(1)</script>", status => 400 },
        )
        .unwrap()
        .0;
        assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "{html}");
        assert!(html.contains("&lt;b&gt;t&lt;"), "{html}");
        assert!(!html.contains("<script>alert"), "{html}");
    }

    #[test]
    fn durations_and_numbers_read_like_a_person_writes_them() {
        assert_eq!(duration(None), "—");
        assert_eq!(duration(Some(42)), "42 s");
        assert_eq!(duration(Some(61)), "2 min");
        assert_eq!(duration(Some(3 * 3600 + 20 * 60)), "3 h 20 min");
        assert_eq!(duration(Some(2 * 86400 + 4 * 3600)), "2 d 4 h");
        assert_eq!(number(7), "7");
        assert_eq!(number(1234567), "1\u{2009}234\u{2009}567");
        assert_eq!(
            datetime("2026-12-01T10:04:05.123Z".into()),
            "2026-12-01 10:04:05 UTC"
        );
    }
}
