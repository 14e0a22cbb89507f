//! The freemail and placeholder lists: the files shipped beside this module
//! (their sources are named in their headers), extended per session by
//! `config.gate.freemail` and `config.gate.blacklist`; and the names of
//! private networks, which count as blacklisted too: looking them up would
//! ask the server's own resolver about the server's own network.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::LazyLock;

use super::address::{Email, is_within};

static FREEMAIL: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| data_lines(include_str!("freemail.txt")).collect());

static BLACKLIST: LazyLock<Blacklist> = LazyLock::new(|| {
    let mut list = Blacklist::default();
    for line in data_lines(include_str!("blacklist.txt")) {
        list.add(parse_entry(line).expect("the shipped blacklist parses"));
    }
    list
});

/// Names under which only private networks have hosts: the names RFC 6762
/// (Appendix G) finds in private use (`intranet`, `internal`, `private`,
/// `corp`, `home`, `lan`), `.internal` (reserved for that by ICANN in 2024),
/// `.local` (multicast DNS, RFC 6762), `localdomain`, and `home.arpa` (RFC 8375).
const PRIVATE_SUFFIXES: &[&str] = &[
    "internal",
    "intranet",
    "private",
    "corp",
    "home",
    "lan",
    "local",
    "localdomain",
    "home.arpa",
];

/// Why `host` (lowercase, no trailing dot) names a host on a private network:
/// a single-label name or one under [`PRIVATE_SUFFIXES`]. IP addresses are
/// the SSRF guard's to judge.
fn private_name(host: &str) -> Option<String> {
    if host.is_empty() || host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        return None;
    }
    if !host.contains('.') {
        return Some(format!(
            "`{host}` is a single-label name, which only a private network resolves"
        ));
    }
    PRIVATE_SUFFIXES
        .iter()
        .find(|suffix| is_within(host, suffix))
        .map(|suffix| {
            format!("names under .{suffix} belong to private networks, never to a company's public site or mail")
        })
}

/// The non-empty, non-comment lines of a data file.
fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// One blacklist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A domain and its subdomains.
    Domain(String),
    /// Every name under a top-level label (stored without the dot).
    Suffix(String),
    /// One address, lowercased.
    Address(String),
    /// A local part at any domain, lowercased.
    Local(String),
}

#[derive(Debug, Default)]
struct Blacklist {
    domains: HashSet<String>,
    suffixes: HashSet<String>,
    addresses: HashSet<String>,
    locals: HashSet<String>,
}

impl Blacklist {
    fn add(&mut self, entry: Entry) {
        match entry {
            Entry::Domain(d) => self.domains.insert(d),
            Entry::Suffix(s) => self.suffixes.insert(s),
            Entry::Address(a) => self.addresses.insert(a),
            Entry::Local(l) => self.locals.insert(l),
        };
    }

    /// Why `host` is a placeholder, if it is.
    fn host(&self, host: &str) -> Option<String> {
        if let Some(domain) = self.domains.iter().find(|d| is_within(host, d)) {
            return Some(format!("{domain} is a placeholder domain"));
        }
        let tld = host.rsplit('.').next().unwrap_or(host);
        self.suffixes
            .contains(tld)
            .then(|| format!(".{tld} is a reserved name that never has mail or web"))
    }

    fn email(&self, email: &Email) -> Option<String> {
        let local = email.local.to_ascii_lowercase();
        if self
            .addresses
            .contains(&format!("{local}@{}", email.domain))
        {
            return Some(format!("{} is a placeholder address", email.address()));
        }
        if self.locals.contains(&local) {
            return Some(format!("`{local}` is a mailbox that takes no replies"));
        }
        self.host(&email.domain)
    }
}

fn is_domain(text: &str) -> bool {
    let labels: Vec<&str> = text.split('.').collect();
    labels.iter().all(|l| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

fn parse_entry(text: &str) -> Result<Entry, String> {
    let entry = text.trim().to_ascii_lowercase();
    let bad = || {
        format!(
            "`{text}` is not a blacklist entry; use `domain.tld`, `.tld`, `local@domain` or `local@`"
        )
    };
    let parsed = if let Some(tld) = entry.strip_prefix('.') {
        (!tld.contains('.') && is_domain(tld)).then(|| Entry::Suffix(tld.to_owned()))
    } else if let Some((local, domain)) = entry.split_once('@') {
        let local_ok = !local.is_empty() && !local.contains(char::is_whitespace);
        match (local.is_empty(), domain.is_empty()) {
            (true, false) => is_domain(domain).then(|| Entry::Domain(domain.to_owned())),
            (false, true) => local_ok.then(|| Entry::Local(local.to_owned())),
            (false, false) => {
                (local_ok && is_domain(domain)).then(|| Entry::Address(entry.clone()))
            }
            (true, true) => None,
        }
    } else {
        is_domain(&entry).then(|| Entry::Domain(entry.clone()))
    };
    parsed.ok_or_else(bad)
}

/// The lists one session's gate checks against: the shipped ones plus the session's own.
#[derive(Debug, Default)]
pub struct Lists {
    freemail: HashSet<String>,
    blacklist: Blacklist,
}

/// A list entry a session configured that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEntry {
    /// `freemail[2]`, `blacklist[0]`.
    pub field: String,
    pub message: String,
}

impl Lists {
    /// The shipped lists extended by a session's own entries.
    pub fn new(freemail: &[String], blacklist: &[String]) -> Result<Lists, BadEntry> {
        let mut lists = Lists::default();
        for (i, domain) in freemail.iter().enumerate() {
            let domain = domain.trim().to_ascii_lowercase();
            if !domain.contains('.') || !is_domain(&domain) {
                return Err(BadEntry {
                    field: format!("freemail[{i}]"),
                    message: format!("`{domain}` is not a domain; write e.g. \"mailbox.co.kr\""),
                });
            }
            lists.freemail.insert(domain);
        }
        for (i, text) in blacklist.iter().enumerate() {
            let entry = parse_entry(text).map_err(|message| BadEntry {
                field: format!("blacklist[{i}]"),
                message,
            })?;
            lists.blacklist.add(entry);
        }
        Ok(lists)
    }

    /// Whether `domain` belongs to a free mail provider.
    pub fn is_freemail(&self, domain: &str) -> bool {
        FREEMAIL.contains(domain) || self.freemail.contains(domain)
    }

    /// Why `email` is a placeholder, if it is.
    pub fn blacklisted_email(&self, email: &Email) -> Option<String> {
        BLACKLIST
            .email(email)
            .or_else(|| self.blacklist.email(email))
            .or_else(|| private_name(&email.domain))
    }

    /// Why a web host is a placeholder, if it is.
    pub fn blacklisted_host(&self, host: &str) -> Option<String> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        BLACKLIST
            .host(&host)
            .or_else(|| self.blacklist.host(&host))
            .or_else(|| private_name(&host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::email::address::parse_email;

    fn lists() -> Lists {
        Lists::new(&[], &[]).unwrap()
    }

    fn why(l: &Lists, email: &str) -> Option<String> {
        l.blacklisted_email(&parse_email(email).unwrap())
    }

    #[test]
    fn the_shipped_lists_hold_the_providers_and_placeholders_the_spec_names() {
        let l = lists();
        for d in [
            "gmail.com",
            "naver.com",
            "yahoo.com",
            "hotmail.com",
            "outlook.com",
            "qq.com",
            "163.com",
            "daum.net",
            "hanmail.net",
            "mailinator.com",
            "guerrillamail.com",
        ] {
            assert!(l.is_freemail(d), "{d}");
        }
        assert!(!l.is_freemail("acme.co.kr"));
        assert!(
            !l.is_freemail("mail.gmail.com"),
            "matched exactly, not by suffix"
        );
        for email in [
            "info@example.com",
            "a@sub.example.org",
            "info@acme.example",
            "x@acme.invalid",
            "x@intranet.localhost",
            "your@email.com",
            "Name@Domain.com",
            "email@company.com",
            "noreply@acme.co.kr",
            "No-Reply@acme.co.kr",
        ] {
            assert!(why(&l, email).is_some(), "{email}");
        }
        assert_eq!(
            why(&l, "info@acme.test"),
            None,
            ".test is not on the default list"
        );
        assert_eq!(why(&l, "info@notexample.com"), None);
    }

    #[test]
    fn each_kind_of_match_explains_itself() {
        let l = lists();
        assert!(
            why(&l, "info@shop.example.com")
                .unwrap()
                .contains("example.com is a placeholder domain")
        );
        assert!(
            why(&l, "info@acme.invalid")
                .unwrap()
                .contains(".invalid is a reserved name")
        );
        assert!(
            why(&l, "your@email.com")
                .unwrap()
                .contains("placeholder address")
        );
        assert!(
            why(&l, "noreply@acme.test")
                .unwrap()
                .contains("takes no replies")
        );
        assert!(l.blacklisted_host("www.example.com.").is_some());
        assert!(l.blacklisted_host("acme.test").is_none());
    }

    #[test]
    fn names_of_private_networks_and_single_labels_are_blacklisted_but_ip_addresses_are_not() {
        let l = lists();
        for email in [
            "x@db.corp.internal",
            "x@acme.corp",
            "x@nas.home.arpa",
            "x@printer.lan",
            "x@mac.local",
            "x@box.localdomain",
            "x@HOST.Intranet",
        ] {
            let why = why(&l, email).unwrap_or_else(|| panic!("{email}"));
            assert!(why.contains("private networks"), "{email}: {why}");
        }
        for host in ["db.corp.internal.", "intranet", "WIKI", "router.lan"] {
            assert!(
                l.blacklisted_host(host)
                    .is_some_and(|why| why.contains("private")),
                "{host}"
            );
        }
        assert!(
            l.blacklisted_host("intranet")
                .unwrap()
                .contains("single-label")
        );
        for host in [
            "127.0.0.1",
            "[::1]",
            "acme.test",
            "internal.acme.test",
            "lan.co.kr",
        ] {
            assert_eq!(l.blacklisted_host(host), None, "{host}");
        }
    }

    #[test]
    fn a_session_extends_both_lists() {
        let l = Lists::new(
            &[" Mailbox.Test ".into()],
            &[
                "placeholder.test".into(),
                "@junk.test".into(),
                ".fake".into(),
                "ceo@acme.test".into(),
                "sales@".into(),
            ],
        )
        .unwrap();
        assert!(l.is_freemail("mailbox.test"));
        for email in [
            "a@placeholder.test",
            "a@x.junk.test",
            "a@acme.fake",
            "CEO@acme.test",
            "sales@acme.test",
        ] {
            assert!(why(&l, email).is_some(), "{email}");
        }
        assert!(l.blacklisted_host("www.placeholder.test").is_some());
        assert_eq!(why(&l, "info@acme.test"), None);
        assert!(
            !lists().is_freemail("mailbox.test"),
            "one session's list is its own"
        );
    }

    #[test]
    fn unreadable_session_entries_name_their_place() {
        let err = Lists::new(&["gmail".into()], &[]).unwrap_err();
        assert_eq!(err.field, "freemail[0]");
        for (i, entry) in [
            "",
            "@",
            "a b@acme.test",
            "..x",
            ".a.b",
            "bad domain",
            "@bad_domain",
        ]
        .into_iter()
        .enumerate()
        {
            let mut entries = vec!["ok.test".to_owned(); i];
            entries.push(entry.to_owned());
            let err = Lists::new(&[], &entries).unwrap_err();
            assert_eq!(err.field, format!("blacklist[{i}]"), "{entry:?}");
            assert!(
                err.message.contains("not a blacklist entry"),
                "{}",
                err.message
            );
        }
    }
}
