//! [`Browser`]: Debian's Chromium, headless, with a fresh profile, driven by
//! its own chromedriver on a free loopback port; both are killed when the
//! browser is dropped. [`screenshot_on_failure`] keeps a picture of every
//! browser of a failed test.

use std::future::Future;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::Duration;

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::{Client, ClientBuilder, Locator};
use futures_util::FutureExt;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Chromium is heavy: at most two run at once, whatever the test threads.
static SLOTS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(2));

/// The Chromium flags that keep it headless, quiet and off the network.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

/// A headless Chromium and its driver.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    _slot: SemaphorePermit<'static>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}

/// Kills chromedriver and the Chromium it started: they share a process group.
fn kill_group(child: &mut Child) {
    let group = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let _ = child.kill();
    let _ = child.wait();
}

fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/lib/chromium"].map(PathBuf::from))
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What a browser is started with besides the fixed flags.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub width: u32,
    pub height: u32,
    pub dark: bool,
    /// Whether pages may run their script (WebDriver's own scripts run either way).
    pub scripts: bool,
}

impl Window {
    /// A desktop window, 1280 px wide, in the light scheme.
    pub const DESKTOP: Window = Window {
        width: 1280,
        height: 900,
        dark: false,
        scripts: true,
    };
}

/// Starts a browser, or returns `None` after saying why `test` is skipped.
/// With `CI=true` a missing Chromium is a failure, never a skip.
pub async fn launch(test: &str) -> Option<Browser> {
    launch_with(test, Window::DESKTOP).await
}

/// [`launch`] with another window.
pub async fn launch_with(test: &str, window: Window) -> Option<Browser> {
    let binaries = binaries(test)?;
    let slot = SLOTS
        .acquire()
        .await
        .expect("the semaphore is never closed");
    Some(start(test, &binaries, window, slot).await)
}

/// Two desktop browsers at once (two people), or `None` as [`launch`] says.
/// Both slots are taken together, so two such tests cannot each hold one and wait.
pub async fn launch_two(test: &str) -> Option<(Browser, Browser)> {
    let binaries = binaries(test)?;
    let mut slots = SLOTS
        .acquire_many(2)
        .await
        .expect("the semaphore is never closed");
    let other = slots.split(1).expect("two permits");
    let first = start(test, &binaries, Window::DESKTOP, slots).await;
    let second = start(test, &binaries, Window::DESKTOP, other).await;
    Some((first, second))
}

/// Chromium and chromedriver, or `None` after saying why `test` is skipped.
fn binaries(test: &str) -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(driver)) = (
        find(&["chromium", "chromium-browser"]),
        find(&["chromedriver"]),
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: chromium and chromedriver are not installed, and CI=true makes that a failure; \
             install them with `apt-get install -y chromium chromium-driver`"
        );
        eprintln!(
            "SKIPPED {test}: chromium or chromedriver is not installed (apt-get install -y chromium chromium-driver); with CI=true this is a failure"
        );
        return None;
    };
    Some((chromium, driver))
}

async fn start(
    test: &str,
    (chromium, driver): &(PathBuf, PathBuf),
    window: Window,
    slot: SemaphorePermit<'static>,
) -> Browser {
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    args.push(format!("--window-size={},{}", window.width, window.height));
    let mut blink = Vec::new();
    if window.dark {
        args.push("--force-dark-mode".into());
        blink.push("preferredColorScheme=0");
    }
    if !window.scripts {
        blink.push("scriptEnabled=false");
    }
    if !blink.is_empty() {
        args.push(format!("--blink-settings={}", blink.join(",")));
    }
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": chromium, "args": args}),
    );
    let mut last_error = String::new();
    // A port found free can be taken before the driver binds it: try another.
    for _ in 0..5 {
        let port = free_port();
        let mut child = Command::new(driver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        // chromedriver answers once it listens; this waits for that, it measures nothing.
        for _ in 0..200 {
            match ClientBuilder::rustls()
                .expect("rustls")
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    client
                        .set_window_size(window.width, window.height)
                        .await
                        .unwrap();
                    return Browser {
                        client,
                        driver: child,
                        _profile: profile,
                        _slot: slot,
                    };
                }
                Err(e) => last_error = e.to_string(),
            }
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        kill_group(&mut child);
    }
    panic!("{test}: chromedriver did not start a browser: {last_error}");
}

impl Browser {
    /// Opens `url` and waits for the page to be loaded.
    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Signs in through the sign-in form and waits for the page after it.
    pub async fn sign_in(&self, base: &str, secret: &str) {
        self.open(&format!("{base}/ui")).await;
        let url = self.client.current_url().await.unwrap();
        assert_eq!(
            url.path(),
            "/ui/login",
            "a browser without a session is sent to sign in"
        );
        self.client
            .find(Locator::Css("input[name=token]"))
            .await
            .unwrap()
            .send_keys(secret)
            .await
            .unwrap();
        self.client
            .find(Locator::Css("form[action='/ui/login'] button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.until(
            "the dashboard after sign-in",
            "return location.pathname === '/ui' && !!document.querySelector('.me-name')",
        )
        .await;
    }

    /// Runs a script and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script `{script}`: {e}"))
    }

    /// Waits until `script` returns true; fails saying `what` after a generous time.
    pub async fn until(&self, what: &str, script: &str) {
        for _ in 0..300 {
            if let Ok(Value::Bool(true)) = self.client.execute(script, vec![]).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("waited in vain for {what}");
    }

    /// Presses one key, as a person would, on whatever has the focus.
    pub async fn press(&self, key: char) {
        let keys = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
        self.client.perform_actions(keys).await.unwrap();
        self.client.release_actions().await.unwrap();
    }

    /// Types `text` into the focused element.
    pub async fn type_text(&self, text: &str) {
        let mut keys = KeyActions::new("typing".into());
        for c in text.chars() {
            keys = keys
                .then(KeyAction::Down { value: c })
                .then(KeyAction::Up { value: c });
        }
        self.client.perform_actions(keys).await.unwrap();
        self.client.release_actions().await.unwrap();
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client.screenshot().await.expect("a screenshot")
    }

    /// The whole page as a PNG: the window made as tall as the page's content first.
    pub async fn full_page(&self, width: u32) -> Vec<u8> {
        let content = "return Math.ceil(document.querySelector('main').getBoundingClientRect().bottom + window.scrollY)";
        let wanted = self.js(content).await.as_u64().unwrap_or(900) as u32;
        let inner = self.resize(width, wanted).await;
        // The window's frame takes some height: add it back.
        self.resize(width, wanted + wanted.saturating_sub(inner))
            .await;
        self.screenshot().await
    }

    /// Resizes the window and returns the page's height once the page has seen the new size.
    async fn resize(&self, width: u32, height: u32) -> u32 {
        let height = height.clamp(400, 8000);
        self.client.set_window_size(width, height).await.unwrap();
        let mut last = 0;
        // A resize reaches the page a moment later: read until the height holds.
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let inner = self
                .js("return window.innerHeight")
                .await
                .as_u64()
                .unwrap_or(0) as u32;
            if inner == last {
                break;
            }
            last = inner;
        }
        last
    }
}

/// Runs a browser test's body; when it fails, saves a screenshot of each
/// browser under the test's temporary directory and says where.
pub async fn screenshot_on_failure<F: Future<Output = ()>>(
    test: &str,
    browsers: &[&Browser],
    body: F,
) {
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    if let Err(panic) = outcome {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-failures");
        std::fs::create_dir_all(&dir).unwrap();
        for (i, b) in browsers.iter().enumerate() {
            if let Ok(png) = b.client.screenshot().await {
                let path = dir.join(format!("{test}-{i}.png"));
                std::fs::write(&path, png).unwrap();
                eprintln!("{test}: screenshot of browser {i} at {}", path.display());
            }
        }
        std::panic::resume_unwind(panic);
    }
}
