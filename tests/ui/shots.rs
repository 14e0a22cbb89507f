//! A tour of the console with realistic work in it, photographed at 1280 px
//! (and a phone's width). The README's pictures come from here:
//! `QUEST_SCREENSHOTS=docs/console cargo test --test ui tour` writes them
//! into the repository; without it they go to a temporary directory, and the
//! test still checks that every page is drawn.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quest::app::App;
use quest::config::Config;
use quest::gates::email::EmailWorld;
use quest::testing::{FakeFetcher, FakeResolver, ManualClock};
use serde_json::{Value, json};

use crate::browser::{Browser, Window, launch_with, screenshot_on_failure};
use crate::helpers::assigned;

const COMPANIES: &[&str] = &[
    "Hanbit Steel",
    "Daewon Optics",
    "Seorin Textiles",
    "Mirae Robotics",
    "Gaon Foods",
    "Nuri Chemical",
    "Boram Motors",
    "Sejin Paper",
    "Hwasung Glass",
    "Dongbang Marine",
    "Ilsan Pharma",
    "Jinro Ceramics",
    "Kumho Valves",
    "Taeyang Solar",
    "Woori Bearings",
    "Sinhan Plastics",
    "Yeonwoo Cables",
    "Pyunghwa Tools",
    "Chunil Electric",
    "Gyeongnam Pumps",
    "Hyopsung Fibers",
    "Samil Lighting",
    "Daesung Filters",
    "Bukwang Dies",
    "Asung Springs",
    "Joongang Casting",
    "Kyungdong Boilers",
    "Namyang Dairy",
    "Sewon Precision",
    "Hankook Molds",
    "Dasan Sensors",
    "Myungjin Gears",
];

fn slug(name: &str) -> String {
    name.to_ascii_lowercase().replace(' ', "")
}

/// Free-mail companies: their page shows only a gmail address.
fn freemail(i: usize) -> bool {
    i % 9 == 4
}

/// Contact pages and mail servers of the companies above.
fn world() -> EmailWorld {
    let mut web = FakeFetcher::new();
    let mut dns = FakeResolver::new().with_mx("gmail.com");
    for (i, name) in COMPANIES.iter().enumerate() {
        let domain = format!("{}.co.kr", slug(name));
        let body = if freemail(i) {
            format!(
                "<h1>{name}</h1><p>Orders and questions: <a href=\"mailto:{0}.shop@gmail.com\">{0}.shop@gmail.com</a> · +82 2 555 01{i:02}</p>",
                slug(name)
            )
        } else {
            format!(
                "<h1>Contact {name}</h1><p>Sales and export enquiries: <a href=\"mailto:sales@{domain}\">sales@{domain}</a>, general: info@{domain}.</p>"
            )
        };
        web = web.html(&format!("https://{domain}/contact"), &body);
        dns = dns.with_mx(&domain);
    }
    EmailWorld::new(Arc::new(web), Arc::new(dns))
}

struct Server {
    base: String,
    admin: String,
    clock: Arc<ManualClock>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn post(&self, path: &str, token: &str, body: Value) -> Value {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    async fn token(&self, role: &str, name: &str) -> String {
        self.post(
            "/v1/tokens",
            &self.admin,
            json!({"name": name, "role": role}),
        )
        .await["secret"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn scan(&self, config: Value, items: Value) -> String {
        self.post(
            "/v1/sessions",
            &self.admin,
            json!({"config": config, "items": items}),
        )
        .await["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// One agent works one quest: `results` in turn until the quest leaves TODO.
    async fn work(
        &self,
        token: &str,
        session: &str,
        agent: &str,
        results: &[Value],
    ) -> Option<String> {
        let next = self
            .post(
                &format!("/v1/sessions/{session}/next"),
                token,
                json!({"agent": agent}),
            )
            .await;
        if next["status"] != "assigned" {
            return None;
        }
        let (quest, lease) = assigned(&next);
        for result in results {
            let answer = self
                .post(
                    &format!("/v1/quests/{quest}/submit"),
                    token,
                    json!({"lease_id": lease, "result": result}),
                )
                .await;
            self.clock.advance(Duration::from_secs(9));
            if answer["state"] != "TODO" || answer["phase"] == "verifying" {
                break;
            }
        }
        Some(quest)
    }
}

/// Two AI verifiers as small scripts: they doubt a subsidiary's address.
fn verifiers(dir: &std::path::Path) -> String {
    let judges = [
        (
            "house-rules",
            "yes",
            "The input names a subsidiary, and the page may be the parent group: the subsidiary may not read this inbox.",
            "The address is written on the contact page of the company itself.",
        ),
        (
            "second-look",
            "yes",
            "The contact page belongs to the group; nothing on it names this company.",
            "The domain and the page match the company named in the input.",
        ),
    ];
    let mut toml = String::new();
    for (name, flag, doubt, clear) in judges {
        let script = dir.join(format!("{name}.sh"));
        std::fs::write(&script, format!(
            "request=$(cat)\ncase \"$request\" in\n  *subsidiary*) echo '{{\"answer\": \"{flag}\", \"reason\": \"{doubt}\"}}' ;;\n  *) echo '{{\"answer\": \"no\", \"reason\": \"{clear}\"}}' ;;\nesac\n"
        )).unwrap();
        toml.push_str(&format!(
            "[verifiers.{name}]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"{}\"]\nenv = [\"PATH\"]\nmodel = \"{name}-v2\"\ntimeout_ms = 10000\n\n",
            script.display()
        ));
    }
    toml
}

async fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path());
    let file = dir.path().join("quest.toml");
    std::fs::write(&file, verifiers(dir.path())).unwrap();
    config.config_file = Some(file);
    // The verifiers' programs run under the `quest` binary's limits, not under this test's.
    config.runner_exe = Some(env!("CARGO_BIN_EXE_quest").into());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.admin_token = Some("tour-admin-token".into());
    let clock = Arc::new(ManualClock::new());
    let app = App::build_with(config, clock.clone(), Some(world()))
        .await
        .expect("the app builds");
    let base = format!("http://{}", app.local_addr());
    let admin = app
        .admin_token()
        .expect("the configured admin token")
        .to_owned();
    tokio::spawn(app.run(std::future::pending()));
    Server {
        base,
        admin,
        clock,
        client: reqwest::Client::new(),
        _dir: dir,
    }
}

/// The tour's work: three sessions, four agents, every kind of verdict.
async fn fill(s: &Server) -> (String, String, String) {
    let items: Vec<Value> = COMPANIES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let note = if i == 10 || i == 17 {
                "subsidiary of Hanbit Group"
            } else {
                ""
            };
            json!({"company": c, "city": "Changwon", "employees": 40 + c.len() * 7, "note": note})
        })
        .collect();
    let config = json!({"name": "Korean manufacturers · contacts", "key_column": "company", "max_tries": 3,
        "gate": {"kind": "email"}, "verify": {"verifiers": ["house-rules", "second-look"]}});
    let main = s.scan(config, Value::Array(items)).await;
    let cafes: Vec<Value> = [
        "Cafe Onion",
        "Fritz Coffee",
        "Anthracite",
        "Center Coffee",
        "Felt",
        "Namusairo",
    ]
    .iter()
    .map(|c| json!({"company": c}))
    .collect();
    let listed = json!({"kind": "schema", "schema": {"type": "object", "required": ["email"], "properties": {"email": {"type": "string", "pattern": "@"}}}});
    let finished = s
        .scan(
            json!({"name": "Seoul cafés · pilot", "key_column": "company", "gate": listed}),
            Value::Array(cafes),
        )
        .await;
    let tests: Vec<Value> = (0..240)
        .map(|i| json!({"function": format!("parser::rule_{i:03}")}))
        .collect();
    let schema = json!({"name": "Parser rules · test coverage", "key_column": "function", "gate": {"kind": "schema", "schema": {"type": "object", "required": ["test"], "properties": {"test": {"type": "string", "minLength": 10}}}}});
    let coverage = s.scan(schema, Value::Array(tests)).await;

    let fleet = s.token("agent", "fleet-a").await;
    let runner = s.token("agent", "gpt-runner").await;
    let local = s.token("agent", "local-llm").await;
    s.token("reviewer", "alice").await;
    s.token("viewer", "ops-dashboard").await;

    let honest = |name: &str, local_part: &str| {
        let d = format!("{}.co.kr", slug(name));
        json!({"site": format!("https://{d}"), "email": format!("{local_part}@{d}"), "source": format!("https://{d}/contact")})
    };
    for (i, name) in COMPANIES.iter().enumerate().take(26) {
        let d = format!("{}.co.kr", slug(name));
        let (token, agent, results) = match i % 4 {
            _ if freemail(i) => (
                &fleet,
                "claude-2",
                vec![
                    json!({"site": format!("https://{d}"), "email": format!("{}.shop@gmail.com", slug(name)), "source": format!("https://{d}/contact")}),
                ],
            ),
            0 | 2 => (&fleet, "claude-1", vec![honest(name, "sales")]),
            1 => (
                &runner,
                "gpt-4o",
                vec![
                    json!({"site": format!("https://{d}"), "email": format!("sales@{}.com", slug(name)), "source": format!("https://{d}/contact")}),
                    honest(name, "sales"),
                ],
            ),
            _ if i % 8 == 7 => (
                &local,
                "llama-8b",
                vec![
                    honest(name, "ceo"),
                    honest(name, "director"),
                    honest(name, "hello"),
                ],
            ),
            _ => (
                &local,
                "llama-8b",
                vec![honest(name, "ceo"), honest(name, "info")],
            ),
        };
        s.work(token, &main, agent, &results).await;
        // Busy minutes and quiet ones, as agents come and go.
        s.clock
            .advance(Duration::from_secs([5, 12, 30, 8, 75, 20, 3, 40][i % 8]));
    }
    for i in 0..6 {
        s.work(
            &fleet,
            &finished,
            "claude-1",
            &[json!({"email": format!("hello{i}@cafe.test")})],
        )
        .await;
    }
    for i in 0..7 {
        s.work(&runner, &coverage, "gpt-4o", &[json!({"test": format!("#[test] fn rule_{i:03}_parses() {{ assert!(parse(\"a\").is_ok()); }}")})]).await;
    }
    // The AI verifiers answer in the background: wait until they are done.
    for _ in 0..600 {
        let status = s
            .client
            .get(format!("{}/v1/sessions/{main}/status", s.base))
            .bearer_auth(&s.admin)
            .send()
            .await
            .unwrap();
        let status: Value = status.json().await.unwrap();
        if status["verifying"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two agents are mid-quest as the pictures are taken.
    s.post(
        &format!("/v1/sessions/{main}/next"),
        &fleet,
        json!({"agent": "claude-1"}),
    )
    .await;
    s.post(
        &format!("/v1/sessions/{coverage}/next"),
        &runner,
        json!({"agent": "gpt-4o"}),
    )
    .await;
    (main, finished, coverage)
}

fn out_dir() -> PathBuf {
    match std::env::var_os("QUEST_SCREENSHOTS") {
        Some(dir) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-tour"),
    }
}

/// Saves a PNG and checks that it is one, `width` pixels wide.
fn save(name: &str, png: &[u8], width: u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name} is a PNG");
    let drawn = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(drawn, width, "{name} is {width} px wide");
    let dir = out_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

async fn shoot(b: &Browser, url: &str, name: &str, width: u32, ready: &str) {
    b.open(url).await;
    b.until(name, ready).await;
    save(name, &b.full_page(width).await, width);
}

#[tokio::test]
async fn tour_of_the_console_in_pictures() {
    let test = "tour";
    let Some(desk) = launch_with(test, Window::DESKTOP).await else {
        return;
    };
    let s = serve().await;
    let (main, _, _) = fill(&s).await;
    let alice = {
        // The reviewer's token, made again under a name of its own for the tour.
        s.token("reviewer", "jiwoo").await
    };
    let base = s.base.clone();
    let loaded = "return document.readyState === 'complete'";
    screenshot_on_failure(test, &[&desk], async {
        desk.open(&format!("{base}/ui/login")).await;
        save("login.png", &desk.screenshot().await, 1280);
        desk.sign_in(&base, &alice).await;
        shoot(&desk, &format!("{base}/ui"), "dashboard.png", 1280, "return document.documentElement.dataset.live === 'on'").await;
        shoot(&desk, &format!("{base}/ui/sessions/{main}"), "session.png", 1280, loaded).await;
        let flailed = desk.js(&format!(
            "return fetch('/ui/sessions/{main}?q=Daewon').then(r => r.text()).then(t => t.match(/data-quest-id=\"([0-9a-f-]+)\"/)[1])"
        )).await;
        shoot(&desk, &format!("{base}/ui/quests/{}", flailed.as_str().unwrap()), "quest.png", 1280, loaded).await;
        desk.client.set_window_size(1280, 900).await.unwrap();
        desk.open(&format!("{base}/ui/review?session={main}&check=l2%3A%2A")).await;
        desk.until("the review page", "return !!document.querySelector('[data-review-current]')").await;
        let text = desk.js("return document.body.innerText").await;
        let text = text.as_str().unwrap();
        assert!(
            text.contains("nothing on it names this company") && !text.contains("no answer"),
            "the verifiers answered and their doubt is on the page: {text}"
        );
        save("review.png", &desk.full_page(1280).await, 1280);
        desk.client.set_window_size(1280, 900).await.unwrap();
        desk.open(&format!("{base}/ui/review")).await;
        desk.press('?').await;
        save("review-keys.png", &desk.screenshot().await, 1280);
        shoot(&desk, &format!("{base}/ui/review/bulk?decision=reject&session={main}"), "bulk.png", 1280, loaded).await;
    })
    .await;
    drop(desk);

    let Some(dark) = launch_with(
        test,
        Window {
            dark: true,
            ..Window::DESKTOP
        },
    )
    .await
    else {
        return;
    };
    screenshot_on_failure(test, &[&dark], async {
        dark.sign_in(&base, &alice).await;
        assert_eq!(
            dark.js("return matchMedia('(prefers-color-scheme: dark)').matches")
                .await,
            true,
            "the dark scheme"
        );
        shoot(
            &dark,
            &format!("{base}/ui/sessions/{main}"),
            "session-dark.png",
            1280,
            loaded,
        )
        .await;
    })
    .await;
    drop(dark);

    let Some(phone) = launch_with(
        test,
        Window {
            width: 390,
            height: 844,
            ..Window::DESKTOP
        },
    )
    .await
    else {
        return;
    };
    screenshot_on_failure(test, &[&phone], async {
        phone.sign_in(&base, &alice).await;
        let width = phone.js("return window.innerWidth").await.as_u64().unwrap() as u32;
        shoot(
            &phone,
            &format!("{base}/ui"),
            "phone-dashboard.png",
            width,
            loaded,
        )
        .await;
        phone.client.set_window_size(390, 844).await.unwrap();
        phone
            .open(&format!("{base}/ui/review?session={main}"))
            .await;
        save("phone-review.png", &phone.screenshot().await, width);
        assert_eq!(
            phone
                .js("return document.documentElement.scrollWidth <= window.innerWidth")
                .await,
            true,
            "nothing wider than a phone"
        );
    })
    .await;
}
