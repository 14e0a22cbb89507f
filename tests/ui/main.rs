//! The web console, end to end: its pages and forms over HTTP, and the same
//! console in a real headless Chromium driven over WebDriver (skipped with a
//! message when Chromium or its driver is missing; a failure under CI=true).

#[expect(
    dead_code,
    reason = "the API tests' helpers; the console's tests use some of them"
)]
#[path = "../api/helpers.rs"]
mod helpers;
#[expect(
    dead_code,
    reason = "the API tests' databases; the console's tests do not install triggers"
)]
#[path = "../api/postgres.rs"]
mod postgres;

mod backlog;
mod browser;
mod browsing;
mod calibration;
mod console;
mod pages;
mod pauses;
mod rechecks;
mod review_layout;
mod review_pages;
mod review_queue;
mod review_skips;
mod review_undo;
mod reviewer_tokens;
mod reviewers;
mod shots;
