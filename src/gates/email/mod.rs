//! The `email` gate (SPEC §4.1): a company's contact email is accepted only
//! when the machine re-derives it. Eight checks, in order:
//!
//! 1. **format**: the email is a plain address; `site` and `source` are
//!    absolute http(s) URLs. Internationalised domains go to REVIEW (homoglyphs).
//! 2. **blacklist**: placeholder domains, addresses and mailboxes FAIL.
//! 3. **freemail**: free mail providers go to REVIEW and skip the domain match.
//! 4. **domain**: the email's domain is the site's registrable domain or a
//!    subdomain of it, else FAIL; a source page (or its redirect) off the site is REVIEW.
//! 5. **source**: the cited page is fetched and the address must be written on
//!    it where a visitor sees it; not there is FAIL with the addresses that
//!    are. A world that does not answer is REVIEW; one that answers with
//!    something no visitor reads the address on (a port nobody serves, a
//!    file, a login wall, a page too long) is FAIL, so that a human review
//!    cannot be had for free. A URL that could make its page echo the
//!    address proves nothing (see `echo`).
//! 6. **company**: the site belongs to the company of the row: on the
//!    registrable domain the row's `site_column` cell gives (else FAIL), and
//!    the source page or the site's home page names the company as the row's
//!    key does (else REVIEW). See `company`.
//! 7. **mx**: the email's domain accepts mail.
//! 8. **duplicate**: an address another quest of the session already holds
//!    (accepted, awaiting a decision or being checked) goes to REVIEW, naming
//!    that quest: one real address cannot pass for every company of a table.
//!
//! The web and DNS are reached only through [`EmailWorld`]; the gate reads
//! pages through its own namespace of the world's page cache. What the other
//! quests of the session hold comes from the [`Checker`](crate::gates::Checker)
//! as a [`SessionView`].

pub mod address;
mod company;
mod echo;
mod html;
pub mod lists;
mod mail;
pub mod page;
mod source;

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use url::Url;

use self::address::{Email, has_idn_host, is_within, parse_email, parse_web_url, registrable};
use self::echo::Carried;
use self::lists::Lists;
use self::mail::{duplicate_check, mx_check};
use self::page::{Found, PageText};
use self::source::*;
use super::dns::Resolver;
use super::fetch::{AddressPolicy, FetchError, Fetcher, Page, PageCache, is_unwell};
use super::{Gate, GateConfigError, GateOutcome, GatePrompt, SessionView};
use crate::domain::prompt::FieldShape;
use crate::domain::verify::{Question, injection_question};
use crate::domain::{Fact, Verdict};

/// The registry name of this gate.
pub const KIND: &str = "email";

/// How many of a page's addresses a fact's hint and the evidence list.
const LISTED_ADDRESSES: usize = 20;

/// The outside world the email gate asks: the web and DNS, and the page cache
/// every session's gate shares (each in its own namespace).
#[derive(Clone)]
pub struct EmailWorld {
    pub fetcher: Arc<dyn Fetcher>,
    pub resolver: Arc<dyn Resolver>,
    pub pages: Arc<PageCache>,
    /// The fetcher's SSRF policy: no address it refuses is shown in evidence.
    pub policy: AddressPolicy,
}

impl EmailWorld {
    /// The world behind `fetcher` and `resolver`, with a page cache of the default budget.
    pub fn new(fetcher: Arc<dyn Fetcher>, resolver: Arc<dyn Resolver>) -> EmailWorld {
        EmailWorld {
            fetcher,
            resolver,
            pages: Arc::new(PageCache::new()),
            policy: AddressPolicy::default(),
        }
    }
}

/// The parameters of the `email` gate.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = EmailGateConfig)]
pub(crate) struct Params {
    /// More free-mail provider domains: an address there goes to REVIEW.
    #[serde(default)]
    freemail: Vec<String>,
    /// More placeholder or junk domains and addresses: they FAIL.
    #[serde(default)]
    blacklist: Vec<String>,
    /// The input column that holds the company's site or domain.
    #[serde(default)]
    site_column: Option<String>,
}

/// The email gate of one session.
pub struct EmailGate {
    fetcher: Arc<dyn Fetcher>,
    resolver: Arc<dyn Resolver>,
    policy: AddressPolicy,
    lists: Lists,
    /// The column of the row that holds the company's site or domain.
    site_column: Option<String>,
}

impl EmailGate {
    /// Builds the gate from `config.gate`'s parameters (`freemail` and
    /// `blacklist`, both lists of strings; `site_column`, the column holding
    /// the company's site), with a namespace of its own in the world's page cache.
    pub fn from_params(
        params: &Map<String, Value>,
        world: &EmailWorld,
    ) -> Result<EmailGate, GateConfigError> {
        let params: Params =
            serde_json::from_value(Value::Object(params.clone())).map_err(|e| {
                GateConfigError::new(
                    "",
                    format!(
                        "{e}; the email gate takes `freemail` and `blacklist`, lists of strings, and `site_column`, the name of a column"
                    ),
                )
            })?;
        let lists = Lists::new(&params.freemail, &params.blacklist)
            .map_err(|bad| GateConfigError::new(bad.field, bad.message))?;
        Ok(EmailGate {
            fetcher: Arc::new(world.pages.fetcher(world.fetcher.clone())),
            resolver: world.resolver.clone(),
            policy: world.policy.clone(),
            lists,
            site_column: params.site_column.filter(|c| !c.trim().is_empty()),
        })
    }
}

/// A source page the gate read: where it landed and what a reader sees on it.
struct ReadPage {
    url: String,
    text: PageText,
}

/// What the agent claimed, each field parsed or turned into a format fact.
struct Claim {
    email: Result<Email, Box<Fact>>,
    site: Result<Url, Box<Fact>>,
    source: Result<Url, Box<Fact>>,
}

impl Claim {
    fn read(result: &Value) -> Claim {
        Claim {
            email: field(
                result,
                "email",
                "an email address, e.g. info@acme.co.kr",
                parse_email,
            ),
            site: field(
                result,
                "site",
                "the company's website as an absolute http(s) URL, e.g. https://acme.co.kr",
                parse_web_url,
            ),
            source: field(
                result,
                "source",
                "the page that shows the address, as an absolute http(s) URL, e.g. https://acme.co.kr/contact",
                parse_web_url,
            ),
        }
    }
}

fn field<T>(
    result: &Value,
    name: &str,
    expected: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, Box<Fact>> {
    let fact = |actual: String, hint: String| {
        Box::new(Fact::new(
            "format",
            format!("/{name}"),
            expected,
            actual,
            hint,
        ))
    };
    match result.get(name) {
        None | Some(Value::Null) => Err(fact(
            "missing".into(),
            format!("add `{name}` to the result"),
        )),
        Some(Value::String(text)) => parse(text).map_err(|why| fact(text.clone(), why)),
        Some(other) => Err(fact(
            other.to_string(),
            format!("`{name}` must be a string"),
        )),
    }
}

/// The facts of one submission, each with its verdict, in check order.
#[derive(Default)]
struct Findings(Vec<(Verdict, Fact)>);

impl Findings {
    fn fail(&mut self, fact: Fact) {
        self.0.push((Verdict::Fail, fact));
    }
    fn review(&mut self, fact: Fact) {
        self.0.push((Verdict::Review, fact));
    }
}

#[async_trait]
impl Gate for EmailGate {
    fn name(&self) -> &'static str {
        KIND
    }

    fn version(&self) -> &'static str {
        "2"
    }

    fn default_prompt(&self) -> GatePrompt {
        GatePrompt {
            task: "Find the official website of the company in the input and a contact email address \
                   published on that website. Submit three fields: `site`, the company's homepage URL; \
                   `email`, the address exactly as the page shows it; `source`, the URL of the page on \
                   that website where the address appears. The server fetches `source` and checks that \
                   the address is really there and that its domain accepts mail, so never guess or build \
                   an address: copy one you have seen. Prefer a general address (info@, contact@, sales@) \
                   on the company's own domain."
                .into(),
            // No made-up result: an agent copies one. The shape says what each field is.
            example: None,
            shape: [
                ("site", "string (the company's homepage URL)"),
                ("email", "string (the address as the page shows it)"),
                ("source", "string (the URL of the page showing it)"),
            ]
            .map(|(name, kind)| FieldShape::text(name, kind))
            .to_vec(),
        }
    }

    fn declared_fields(&self) -> Vec<String> {
        ["site", "email", "source"].map(String::from).to_vec()
    }

    fn default_questions(&self) -> Vec<Question> {
        vec![
            Question::yes_flags(
                "Does the evidence suggest that the email address belongs to a different company, \
                 person or organisation than the company in the input?",
            ),
            Question::yes_flags(
                "Is the website in the result the site of a different company than the one in the input \
                 (for example a directory, a marketplace or a namesake)?",
            ),
            // The evidence quotes the cited page, which the agent may have written.
            injection_question(),
        ]
    }

    fn unique_fields(&self) -> Vec<String> {
        vec!["email".into()]
    }

    fn input_columns(&self) -> Vec<String> {
        self.site_column.iter().cloned().collect()
    }

    async fn check(&self, input: &Value, result: &Value, session: &SessionView) -> GateOutcome {
        let claim = Claim::read(result);
        let screen = Screen::of(&claim, &self.lists);

        // The world is asked once, both questions at the same time; a check
        // that is meaningless after an earlier failure does not ask.
        let fetch = async {
            match screen.fetchable() {
                Some(url) => Some(self.fetcher.fetch(url.as_str()).await),
                None => None,
            }
        };
        let lookup = async {
            match screen.email.filter(|_| screen.email_blacklisted.is_none()) {
                Some(e) => Some(self.resolver.mail_hosts(&e.domain).await),
                None => None,
            }
        };
        let (fetched, mail) = tokio::join!(fetch, lookup);

        let mut findings = Findings::default();
        format_check(&mut findings, &claim, &screen);
        blacklist_check(&mut findings, &screen);
        freemail_check(&mut findings, &screen);
        domain_check(
            &mut findings,
            screen.email.filter(|_| !screen.freemail),
            screen.site,
            screen.source,
            fetched.as_ref(),
        );
        let mut read = None;
        let mut evidence = vec![
            self.source_check(&mut findings, &screen, fetched, &mut read)
                .await,
        ];
        // The company's facts come in check order; its evidence after the
        // mx check's, so that the first two entries stay source and mx.
        let company = self
            .company_check(&mut findings, &screen, input, &session.key, read.as_ref())
            .await;
        evidence.push(match (screen.email, mail) {
            (Some(e), Some(answer)) => mx_check(&mut findings, e, answer, &self.policy),
            (Some(e), None) => json!({"check": "mx", "domain": e.domain, "skipped": "the address is a placeholder"}),
            (None, _) => json!({"check": "mx", "skipped": "no valid email address"}),
        });
        evidence.extend(company);
        if let Some(e) = screen.email.filter(|_| screen.email_blacklisted.is_none()) {
            evidence.extend(duplicate_check(
                &mut findings,
                e,
                session.holders_of("email"),
            ));
        }
        let mut outcome =
            GateOutcome::from_checks(findings.0.into_iter().map(|(v, f)| (v, Some(f))));
        outcome.evidence = evidence;
        outcome
    }
}

/// What the claim says before the world is asked: its parsed fields and what
/// the lists and the URLs alone tell.
struct Screen<'a> {
    email: Option<&'a Email>,
    site: Option<&'a Url>,
    source: Option<&'a Url>,
    email_blacklisted: Option<String>,
    site_blacklisted: Option<String>,
    source_blacklisted: Option<String>,
    freemail: bool,
    /// The source asks for a port that is neither its scheme's standard one
    /// nor the site's: a door an agent picks, not one a company publishes.
    foreign_port: Option<u16>,
}

impl<'a> Screen<'a> {
    fn of(claim: &'a Claim, lists: &Lists) -> Screen<'a> {
        let email = claim.email.as_ref().ok();
        let site = claim.site.as_ref().ok();
        let source = claim.source.as_ref().ok();
        let host_blacklisted =
            |url: Option<&Url>| url.and_then(|u| lists.blacklisted_host(u.host_str()?));
        Screen {
            email,
            site,
            source,
            email_blacklisted: email.and_then(|e| lists.blacklisted_email(e)),
            site_blacklisted: host_blacklisted(site),
            source_blacklisted: host_blacklisted(source),
            freemail: email.is_some_and(|e| lists.is_freemail(&e.domain)),
            foreign_port: source
                .and_then(Url::port)
                .filter(|port| site.and_then(Url::port) != Some(*port)),
        }
    }

    /// The source, when it is worth fetching.
    fn fetchable(&self) -> Option<&'a Url> {
        self.source
            .filter(|_| self.source_blacklisted.is_none() && self.foreign_port.is_none())
    }
}

/// Check 1: the fields parse; internationalised names go to review.
fn format_check(findings: &mut Findings, claim: &Claim, screen: &Screen) {
    for bad in [
        claim.email.as_ref().err(),
        claim.site.as_ref().err(),
        claim.source.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        findings.fail(Fact::clone(bad));
    }
    let homoglyphs = "internationalised domain names can imitate others letter for letter; a person will confirm this one";
    if let Some(e) = screen.email.filter(|e| e.unicode_domain.is_some()) {
        findings.review(Fact::new(
            "format",
            "/email",
            "a domain in plain ASCII letters",
            format!(
                "{} (shown as {})",
                e.domain,
                e.unicode_domain.as_deref().unwrap_or_default()
            ),
            homoglyphs,
        ));
    }
    for (name, url) in [("site", screen.site), ("source", screen.source)] {
        if let Some(url) = url.filter(|u| has_idn_host(u)) {
            findings.review(Fact::new(
                "format",
                format!("/{name}"),
                "a host name in plain ASCII letters",
                url.host_str().unwrap_or_default(),
                homoglyphs,
            ));
        }
    }
}

/// Check 2: placeholder addresses and hosts.
fn blacklist_check(findings: &mut Findings, screen: &Screen) {
    if let (Some(e), Some(why)) = (screen.email, &screen.email_blacklisted) {
        findings.fail(Fact::new(
            "blacklist",
            "/email",
            "a real contact address, not a placeholder",
            e.address(),
            format!("{why}; find the address the company itself publishes"),
        ));
    }
    for (name, url, why) in [
        ("site", screen.site, &screen.site_blacklisted),
        ("source", screen.source, &screen.source_blacklisted),
    ] {
        if let (Some(url), Some(why)) = (url, why) {
            findings.fail(Fact::new(
                "blacklist",
                format!("/{name}"),
                "the company's real web address, not a placeholder",
                url.as_str(),
                format!("{why}; find the company's own site"),
            ));
        }
    }
}

/// Check 3: free mail providers go to review.
fn freemail_check(findings: &mut Findings, screen: &Screen) {
    if let Some(e) = screen.email.filter(|_| screen.freemail) {
        findings.review(Fact::new(
            "freemail",
            "/email",
            "an address at the company's own domain",
            &e.domain,
            format!(
                "{} is a free mail provider; a person will confirm the company really uses it. \
                 If the company has an address at its own domain, submit that one instead",
                e.domain
            ),
        ));
    }
}

/// Check 4: the email at the site's registrable domain; the source page (and
/// where it redirected to) on that domain too.
fn domain_check(
    findings: &mut Findings,
    email: Option<&Email>,
    site: Option<&Url>,
    source: Option<&Url>,
    fetched: Option<&Result<Page, FetchError>>,
) {
    let Some(site) = site else { return };
    let host = site.host_str().unwrap_or_default();
    let Some(reg) = registrable(host) else {
        findings.fail(Fact::new(
            "domain",
            "/site",
            "a site on a registrable domain name, e.g. https://acme.co.kr",
            host,
            "use the company's own domain name, not an IP address or a bare public suffix",
        ));
        return;
    };
    if let Some(e) = email.filter(|e| !is_within(&e.domain, &reg)) {
        findings.fail(Fact::new(
            "domain",
            "/email",
            format!("an address at {reg} or a subdomain of it"),
            &e.domain,
            format!(
                "the site is {reg}, so the address must be @{reg} (or @x.{reg}); \
                 submit the company's own address, or correct `site` if the company's site is elsewhere"
            ),
        ));
    }
    let Some(source) = source else { return };
    let source_reg = source.host_str().and_then(registrable);
    if source_reg.as_deref() != Some(reg.as_str()) {
        findings.review(Fact::new(
            "domain",
            "/source",
            format!("a page on {reg}"),
            source.host_str().unwrap_or_default(),
            "a page outside the company's own site is weaker proof, so a person will look; \
             cite a page on the company's site if it shows the address",
        ));
        return;
    }
    if let Some(Ok(page)) = fetched {
        let landed = Url::parse(&page.final_url).ok();
        let landed_reg = landed
            .as_ref()
            .and_then(|u| u.host_str())
            .and_then(registrable);
        if landed_reg.as_deref() != Some(reg.as_str()) {
            findings.review(Fact::new(
                "domain",
                "/source",
                format!("a page on {reg}"),
                format!("redirected to {}", page.final_url),
                "the source redirects off the company's site, so a person will look; \
                 cite the page where the company itself shows the address",
            ));
        }
    }
}

#[cfg(test)]
mod tests;
