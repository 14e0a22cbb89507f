//! `quest demo`: the whole loop on one machine, with nothing to set up.
//!
//! An in-process server on a temporary data dir runs the real `email` gate
//! against a simulated world (web pages and DNS answers for fictional companies,
//! served through the gate's own `Fetcher` and `Resolver` traits). Simulated
//! agents of different quality work the session over real HTTP. The run ends
//! with the status table, the review queue, an export file, and a check that
//! no quest is left with the agents and that no invented email was accepted.

use crate::domain::ids::SessionId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use super::client::{CliError, Client};
use super::{review, status_table};
use crate::api::{
    CreateTokenRequest, CreatedToken, NextRequest, NextResponse, Quest, Session, SubmitRequest,
    SubmitResponse,
};
use crate::app::App;
use crate::config::Config;
use crate::domain::{Fact, Role, State, SubmissionVerdict, SystemClock};
use crate::gates::dns::MailAnswer;
use crate::gates::email::EmailWorld;
use crate::gates::fetch::FetchError;
use crate::testing::{FakeFetcher, FakeResolver, page};

/// The export's name in the demo's data dir when `-o` is not given.
const DEFAULT_EXPORT: &str = "quest-demo.xlsx";

/// `quest demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Companies in the simulated world (8 to 200).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(8..=200))]
    pub companies: u16,
    /// Where to write the export; the extension picks the format (.xlsx, .csv,
    /// .jsonl). Without it, quest-demo.xlsx in the demo's data dir, which is then kept.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// How a fictional company shows its contact address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A contact page with a mailto link.
    Plain,
    /// The address written with HTML entities.
    Entity,
    /// Only `info [at] domain`: a person must confirm it.
    Obfuscated,
    /// A small shop that really uses a free-mail address.
    Freemail,
    /// `/contact` is gone (404); the address is on `/about`.
    Moved,
    /// The domain publishes a null MX: it accepts no mail.
    NullMx,
    /// The web server never answers.
    Down,
}

/// One fictional company and the truth about it.
#[derive(Debug, Clone)]
struct Company {
    name: String,
    slug: String,
    domain: String,
    kind: Kind,
    /// The page where the address really is.
    source: String,
    /// The addresses really on that page.
    emails: Vec<String>,
}

const FIRST: [&str; 12] = [
    "Hanbit", "Saebom", "Nuri", "Dasol", "Areum", "Maru", "Gaon", "Haneul", "Bitna", "Sori",
    "Yeoul", "Chorong",
];
const SECOND: [&str; 6] = [
    "Robotics",
    "Foods",
    "Textiles",
    "Logistics",
    "Ceramics",
    "Optics",
];

fn companies(n: usize) -> Vec<Company> {
    (0..n)
        .map(|i| {
            let round = i / (FIRST.len() * SECOND.len());
            let base = format!(
                "{} {}",
                FIRST[i % FIRST.len()],
                SECOND[(i / FIRST.len()) % SECOND.len()]
            );
            // Past every first × second pair, a number keeps names unique.
            let name = if round == 0 {
                base
            } else {
                format!("{base} {}", round + 1)
            };
            let slug = name.to_ascii_lowercase().replace(' ', "-");
            let domain = format!("{slug}.test");
            let kind = match i % 10 {
                _ if i % 30 == 29 => Kind::Down,
                _ if i % 15 == 7 => Kind::NullMx,
                0 => Kind::Obfuscated,
                3 => Kind::Freemail,
                5 => Kind::Moved,
                8 => Kind::Entity,
                _ => Kind::Plain,
            };
            let source = match kind {
                Kind::Moved => format!("https://{domain}/about"),
                _ => format!("https://{domain}/contact"),
            };
            let emails = match kind {
                Kind::Freemail => vec![format!("{}.shop@gmail.com", slug.replace('-', ""))],
                Kind::Obfuscated | Kind::Down => vec![format!("info@{domain}")],
                _ => vec![format!("info@{domain}"), format!("sales@{domain}")],
            };
            Company {
                name,
                slug,
                domain,
                kind,
                source,
                emails,
            }
        })
        .collect()
}

/// The web and DNS of the simulated world.
fn world(companies: &[Company]) -> EmailWorld {
    let mut web = FakeFetcher::new();
    let mut dns = FakeResolver::new().with_mx("gmail.com");
    for c in companies {
        let home = format!("https://{}/", c.domain);
        web = web.html(
            &home,
            &format!("<h1>{}</h1><a href=\"{}\">Contact</a>", c.name, c.source),
        );
        let listed = |emails: &[String]| {
            emails
                .iter()
                .map(|e| format!("<li><a href=\"mailto:{e}\">{e}</a></li>"))
                .collect::<String>()
        };
        let body = match c.kind {
            Kind::Plain | Kind::Moved | Kind::NullMx | Kind::Freemail => {
                format!("<h1>Contact {}</h1><ul>{}</ul>", c.name, listed(&c.emails))
            }
            Kind::Entity => {
                let encoded = c.emails[0].replace('@', "&#64;");
                format!(
                    "<h1>Contact</h1><p>Write to {encoded} or {}</p>",
                    c.emails[1]
                )
            }
            Kind::Obfuscated => format!("<h1>Contact</h1><p>Mail: info [at] {}</p>", c.domain),
            Kind::Down => String::new(),
        };
        web = match c.kind {
            Kind::Down => web.answer(
                &c.source,
                Err(FetchError::Timeout(std::time::Duration::from_secs(15))),
            ),
            _ => web.html(&c.source, &body),
        };
        if c.kind == Kind::Moved {
            let gone = format!("https://{}/contact", c.domain);
            web = web.answer(
                &gone,
                Ok(page(&gone, 404, Some("text/html"), "<h1>Not found</h1>")),
            );
        }
        dns = match c.kind {
            Kind::NullMx => dns.mail(&c.domain, MailAnswer::NullMx),
            _ => dns.with_mx(&c.domain),
        };
    }
    EmailWorld::new(Arc::new(web), Arc::new(dns))
}

/// How a simulated agent works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// Submits what is on the page; on a FAIL, tries the next address it saw.
    Careful,
    /// Guesses first (the wrong page, a made-up domain), then follows the facts.
    Sloppy,
    /// Invents addresses and never reads the facts.
    Inventing,
    /// Reaches for a free-mail address first, then follows the facts.
    Freemail,
}

impl Style {
    fn name(self) -> &'static str {
        match self {
            Style::Careful => "careful",
            Style::Sloppy => "sloppy",
            Style::Inventing => "inventing",
            Style::Freemail => "freemail",
        }
    }

    /// The result this agent submits on its `attempt`-th try, after `facts`.
    fn result(self, c: &Company, attempt: u32, facts: &[Fact]) -> Value {
        let site = format!("https://{}", c.domain);
        let seen = addresses_in(facts);
        let (email, source) = match (self, attempt) {
            (Style::Careful, n) => (
                c.emails[n as usize % c.emails.len()].clone(),
                c.source.clone(),
            ),
            (Style::Inventing, n) => {
                let local = ["ceo", "director", "hello"][n as usize % 3];
                (
                    format!("{local}@{}", c.domain),
                    format!("https://{}/contact", c.domain),
                )
            }
            (Style::Sloppy, 0) => (
                format!("info@{}.com", c.slug),
                format!("https://{}/contact", c.domain),
            ),
            (Style::Freemail, 0) => (
                format!("{}@gmail.com", c.slug.replace('-', "")),
                c.source.clone(),
            ),
            // Following the facts: an address the gate saw on the page, and the page
            // that answered instead of the one that did not. Never the same result
            // twice in a row: an identical retry only replays the recorded verdict.
            (_, n) => {
                let moved = facts.iter().any(|f| f.actual.contains("404"));
                let source = if moved {
                    format!("https://{}/about", c.domain)
                } else {
                    c.source.clone()
                };
                let candidates = if seen.is_empty() {
                    c.emails.clone()
                } else {
                    seen
                };
                (
                    candidates[(n as usize).saturating_sub(1) % candidates.len()].clone(),
                    source,
                )
            }
        };
        json!({"site": site, "email": email, "source": source})
    }
}

/// The email addresses mentioned in facts (the gate lists those on the page).
fn addresses_in(facts: &[Fact]) -> Vec<String> {
    static PATTERN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
            .expect("a valid pattern")
    });
    let pattern = &*PATTERN;
    let mut out = Vec::new();
    for f in facts {
        for m in pattern.find_iter(&format!("{} {}", f.hint, f.actual)) {
            let address = m.as_str().trim_end_matches('.').to_owned();
            if !out.contains(&address) {
                out.push(address);
            }
        }
    }
    out
}

/// What one agent did.
#[derive(Debug, Default, Clone)]
struct Tally {
    quests: u32,
    submissions: u32,
    verdicts: BTreeMap<String, u32>,
    /// Addresses this agent made up.
    invented: HashSet<String>,
    /// The server paused its token in the session (its quests kept ending DONE).
    paused: bool,
}

async fn run_agent(
    client: Client,
    session: SessionId,
    style: Style,
    world: Arc<HashMap<String, Company>>,
    bar: ProgressBar,
    overall: ProgressBar,
) -> Result<Tally, CliError> {
    let mut tally = Tally::default();
    let request = NextRequest {
        agent: Some(style.name().to_owned()),
    };
    loop {
        let next: Result<(_, NextResponse), CliError> = client
            .post(&format!("/v1/sessions/{session}/next"), &request)
            .await;
        let next = match next {
            Err(e) if e.exit_status() == super::exit::PAUSED => {
                // What a real agent does: stop and tell the operator.
                tally.paused = true;
                bar.finish_with_message("paused: stopped and told the operator");
                return Ok(tally);
            }
            other => other?.1,
        };
        let (quest, lease) = match next {
            NextResponse::Finished => return Ok(tally),
            NextResponse::Wait { .. } => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
            NextResponse::Assigned { quest, lease, .. } => (quest, lease),
        };
        let company = &world[&quest.key];
        let mut facts = quest.last_facts.clone();
        for attempt in quest.tries.. {
            let result = style.result(company, attempt, &facts);
            let email = result["email"].as_str().unwrap_or_default().to_owned();
            if style == Style::Inventing {
                tally.invented.insert(email.clone());
            }
            bar.set_message(format!("{}: {email}", quest.key));
            let body = SubmitRequest {
                lease_id: lease.id,
                result: result.as_object().cloned().unwrap_or_default(),
            };
            let answer: Result<(_, SubmitResponse), CliError> = client
                .post(&format!("/v1/quests/{}/submit", quest.id), &body)
                .await;
            let answer = match answer {
                // The token was paused meanwhile and this lease released with it.
                Err(CliError::Refused { code, .. }) if code == "lease_lost" => break,
                other => other?.1,
            };
            tally.submissions += 1;
            let label = match (answer.verdict, answer.state) {
                (SubmissionVerdict::Fail, State::Done) => "DONE",
                (v, _) => v.as_str(),
            };
            *tally.verdicts.entry(label.to_owned()).or_default() += 1;
            overall.set_position(
                overall
                    .length()
                    .unwrap_or(0)
                    .saturating_sub(answer.remaining),
            );
            if answer.state != State::Todo || answer.verdict == SubmissionVerdict::Pending {
                break;
            }
            facts = answer.facts;
        }
        tally.quests += 1;
        bar.inc(1);
    }
}

async fn token(admin: &Client, name: &str) -> Result<String, CliError> {
    let request = CreateTokenRequest {
        name: name.to_owned(),
        role: Role::Agent,
        max_leases: None,
        sessions: None,
        adjudicate: false,
    };
    let (_, created): (_, CreatedToken) = admin.post("/v1/tokens", &request).await?;
    Ok(created.secret)
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> ExitCode {
    match demo(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(super::exit::FAIL),
        Err(e) => e.report(),
    }
}

async fn demo(args: DemoArgs) -> Result<bool, CliError> {
    let local =
        |e: &dyn std::fmt::Display| CliError::Usage(format!("the demo could not start: {e}"));
    let ext = args
        .output
        .as_deref()
        .unwrap_or(Path::new(DEFAULT_EXPORT))
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if !["csv", "jsonl", "xlsx"].contains(&ext.as_str()) {
        return Err(CliError::Usage(format!(
            "{}: name the output .xlsx, .csv or .jsonl",
            args.output
                .as_deref()
                .unwrap_or(Path::new(DEFAULT_EXPORT))
                .display()
        )));
    }
    let everyone = companies(args.companies.into());
    let data = tempfile::tempdir().map_err(|e| local(&e))?;
    let mut config = Config::with_data_dir(data.path());
    config.bind = "127.0.0.1:0".parse().expect("a literal address");
    config.admin_token = Some(crate::service::new_secret());
    let app = App::build_with(
        config.clone(),
        Arc::new(SystemClock),
        Some(world(&everyone)),
    )
    .await
    .map_err(|e| local(&format!("{e:#}")))?;
    let url = format!("http://{}", app.local_addr());
    let admin = Client::new(&url, config.admin_token.clone());
    let server = tokio::spawn(app.run(std::future::pending()));
    eprintln!(
        "quest demo: a server at {url} on a temporary data dir; {} fictional companies",
        everyone.len()
    );

    let table = everyone.iter().fold("company,city\n".to_owned(), |t, c| {
        t + &format!("{},Seoul\n", c.name)
    });
    let scan_config = json!({"name": "demo: contact emails", "key_column": "company", "gate": {"kind": "email"}, "max_tries": 3, "max_consecutive_done": 3});
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(table.into_bytes()).file_name("companies.csv"),
        )
        .text("config", scan_config.to_string());
    let session: Session = admin.post_form("/v1/sessions", form).await?;
    eprintln!(
        "quest demo: scanned companies.csv into session {} with the email gate\n",
        session.id
    );

    let world: Arc<HashMap<String, Company>> = Arc::new(
        everyone
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect(),
    );
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>10} {bar:30} {pos:>3} quests  {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let overall = bars.add(
        ProgressBar::new(session.status.total)
            .with_style(style.clone())
            .with_prefix("session"),
    );
    let mut agents = Vec::new();
    for agent in [
        Style::Careful,
        Style::Sloppy,
        Style::Inventing,
        Style::Freemail,
    ] {
        let client = Client::new(
            &url,
            Some(token(&admin, &format!("demo-{}", agent.name())).await?),
        );
        let bar = bars.add(
            ProgressBar::new(session.status.total)
                .with_style(style.clone())
                .with_prefix(agent.name()),
        );
        let task = run_agent(
            client,
            session.id,
            agent,
            world.clone(),
            bar,
            overall.clone(),
        );
        agents.push((agent, tokio::spawn(task)));
    }
    let mut tallies = Vec::new();
    for (agent, task) in agents {
        let tally = task.await.map_err(|e| CliError::Garbled(e.to_string()))??;
        tallies.push((agent, tally));
    }
    overall.finish_with_message("agents are done");
    bars.clear().ok();

    println!("Agents:");
    for (agent, t) in &tallies {
        let verdicts = t
            .verdicts
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "  {:<10} finished {:>2} quests with {:>2} submissions: {verdicts}{}",
            agent.name(),
            t.quests,
            t.submissions,
            if t.paused { " (then paused)" } else { "" }
        );
    }
    let pauses: Vec<crate::api::Pause> = admin
        .get(&format!("/v1/sessions/{}/pauses", session.id))
        .await?;
    for p in &pauses {
        println!(
            "  paused: {} after {} quests in a row ended DONE; an admin resumes it with `quest agent resume {}`",
            p.agent, p.figures["consecutive_done"], p.token_id
        );
    }
    let sessions: Vec<Session> = admin.get("/v1/sessions").await?;
    println!("\n{}", status_table(&sessions));
    let queue: Vec<Quest> = admin
        .get(&format!("/v1/review?session={}", session.id))
        .await?;
    println!(
        "Review queue ({} quests; `quest review` works it):",
        queue.len()
    );
    const SHOWN: usize = 4;
    for quest in queue.iter().take(SHOWN) {
        print!("{}", review::describe(quest));
    }
    if queue.len() > SHOWN {
        println!("  … and {} more", queue.len() - SHOWN);
    }

    let export = admin
        .download(&format!("/v1/sessions/{}/export?format={ext}", session.id))
        .await?;
    let bytes = export
        .bytes()
        .await
        .map_err(|e| CliError::Garbled(e.to_string()))?;
    // Without -o the export stays beside the demo's database, in a data dir that is kept.
    let output = match &args.output {
        Some(path) => path.clone(),
        None => data.path().join(DEFAULT_EXPORT),
    };
    std::fs::write(&output, &bytes)
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", output.display())))?;
    println!(
        "\nExport: {} ({} bytes): the original rows plus the result columns.",
        output.display(),
        bytes.len()
    );
    if args.output.is_none() {
        let kept = data.keep();
        println!("The demo's data dir is kept: {}", kept.display());
    }

    // The end-of-run check: everything decided, and no accepted address that is
    // not really on the company's page (so no invented one).
    let rows = admin
        .download(&format!("/v1/sessions/{}/export?format=jsonl", session.id))
        .await?;
    let rows = rows
        .text()
        .await
        .map_err(|e| CliError::Garbled(e.to_string()))?;
    let invented: HashSet<&String> = tallies
        .iter()
        .flat_map(|(_, t)| t.invented.iter())
        .collect();
    let (mut undecided, mut false_pass, mut passed, mut exported) = (0, Vec::new(), 0, 0);
    for line in rows.lines() {
        exported += 1;
        let row: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| CliError::Garbled(e.to_string()))?;
        let key = row
            .get("company")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let email = row
            .get("result_email")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match row.get("quest_state").and_then(Value::as_str) {
            Some("PASS") => {
                passed += 1;
                let real = world.get(key).is_some_and(|c| c.emails.contains(&email));
                if !real || invented.contains(&email) {
                    false_pass.push(format!("{key}: {email}"));
                }
            }
            Some("REVIEW" | "DONE") => {}
            // TODO, or anything unexpected: not decided.
            _ => undecided += 1,
        }
    }
    // The check counts the server's own figures too, so an empty or short export cannot pass it.
    let status: crate::api::Status = admin
        .get(&format!("/v1/sessions/{}/status", session.id))
        .await?;
    server.abort();
    let complete = exported == everyone.len()
        && status.total == everyone.len() as u64
        && status.remaining == 0;
    // Every agent that heard it was paused has its pause on the server, and
    // only an agent that burns quests (never the careful one) is paused.
    let paused: Vec<&str> = tallies
        .iter()
        .filter(|(_, t)| t.paused)
        .map(|(a, _)| a.name())
        .collect();
    let pauses_hold = paused.len() == pauses.len()
        && pauses.iter().all(|p| paused.contains(&p.agent.as_str()))
        && !paused.contains(&Style::Careful.name());
    let ok = complete && undecided == 0 && false_pass.is_empty() && pauses_hold;
    println!(
        "\nCheck: {exported} of {} quests exported, {undecided} left with the agents (the server counts {} \
         remaining): {}; {passed} PASS, every one an address really on the company's page; \
         {} invented addresses submitted, {} accepted; {} agents paused ({}). {}",
        everyone.len(),
        status.remaining,
        crate::domain::backlog::agents_done(status.review),
        invented.len(),
        false_pass.len(),
        pauses.len(),
        paused.join(", "),
        if ok { "OK" } else { "FAILED" }
    );
    for f in &false_pass {
        println!("  false PASS: {f}");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_has_every_kind_of_company() {
        let all = companies(30);
        for kind in [
            Kind::Plain,
            Kind::Entity,
            Kind::Obfuscated,
            Kind::Freemail,
            Kind::Moved,
            Kind::NullMx,
            Kind::Down,
        ] {
            assert!(all.iter().any(|c| c.kind == kind), "no {kind:?} company");
        }
        let names: HashSet<_> = all.iter().map(|c| &c.name).collect();
        assert_eq!(names.len(), 30, "company names are unique");
    }

    #[test]
    fn agents_follow_the_addresses_the_facts_name() {
        let c = &companies(2)[1];
        let fact = Fact::new(
            "source",
            "/email",
            "on the page",
            "not found",
            "the page lists: info@x.test, sales@x.test",
        );
        assert_eq!(
            Style::Sloppy.result(c, 1, std::slice::from_ref(&fact))["email"],
            "info@x.test"
        );
        assert_eq!(
            Style::Inventing.result(c, 1, &[fact])["email"],
            format!("director@{}", c.domain)
        );
    }
}
