//! Parsing what the agent claims: email addresses and web URLs, and the
//! registrable domain (by the public suffix list) of a host.

use url::{Host, Url};

/// A syntactically valid email address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// The local part, exactly as submitted.
    pub local: String,
    /// The domain in lowercase ASCII (IDN labels as punycode `xn--`).
    pub domain: String,
    /// The domain as Unicode, when it is an internationalised domain name.
    pub unicode_domain: Option<String>,
}

impl Email {
    /// The address with its ASCII domain.
    pub fn address(&self) -> String {
        format!("{}@{}", self.local, self.domain)
    }
}

/// Parses a contact address, or says in words what is wrong with it.
///
/// Deliberately stricter than RFC 5322: a contact address a company publishes
/// is a plain `local@domain` with letters, digits and `. _ + -` in the local
/// part; quoted local parts, comments and IP-literal domains are refused.
pub fn parse_email(text: &str) -> Result<Email, String> {
    if text.trim() != text {
        return Err("remove the spaces around the address".into());
    }
    if text.to_ascii_lowercase().starts_with("mailto:") {
        return Err("drop the `mailto:` prefix; submit the bare address".into());
    }
    let Some((local, domain)) = text.split_once('@') else {
        return Err("an address has exactly one `@`".into());
    };
    if domain.contains('@') {
        return Err("an address has exactly one `@`".into());
    }
    if local.is_empty() || local.len() > 64 {
        return Err("the part before `@` must be 1 to 64 characters".into());
    }
    if let Some(c) = local.chars().find(|c| is_invisible(*c)) {
        return Err(format!(
            "the part before `@` holds an invisible character ({}); copy the address as the page shows it",
            code_point(c)
        ));
    }
    if !local
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
    {
        return Err("the part before `@` may hold only letters, digits and . _ + -".into());
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return Err("dots in the part before `@` may not lead, trail or repeat".into());
    }
    let ascii = mail_domain(domain)?;
    let idn = !domain.is_ascii() || ascii.split('.').any(|l| l.starts_with("xn--"));
    Ok(Email {
        local: local.to_owned(),
        unicode_domain: idn.then(|| unicode_form(&ascii)),
        domain: ascii,
    })
}

/// The domain of an address in lowercase ASCII, or why it is not one.
fn mail_domain(domain: &str) -> Result<String, String> {
    let numeric_end = domain
        .rsplit('.')
        .next()
        .is_some_and(|tld| !tld.is_empty() && tld.chars().all(|c| c.is_ascii_digit()));
    if domain.starts_with('[') || numeric_end {
        return Err("an IP address is not a company's mail domain".into());
    }
    check_written_host(domain)?;
    let ascii = match Host::parse(domain) {
        Ok(Host::Domain(d)) => d,
        Ok(_) => return Err("an IP address is not a company's mail domain".into()),
        Err(e) => return Err(format!("the domain is not valid: {e}")),
    };
    let labels: Vec<&str> = ascii.split('.').collect();
    if labels.len() < 2 || ascii.len() > 253 {
        return Err("the domain needs at least two labels, e.g. acme.co.kr".into());
    }
    let ldh = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if !labels.iter().all(ldh) {
        return Err("each label of the domain is 1 to 63 letters, digits or inner hyphens".into());
    }
    Ok(ascii)
}

/// Whether `c` is a character no reader sees: a control or format character,
/// a space other than the ASCII one, a soft hyphen, a variation selector or a tag.
fn is_invisible(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
            | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}')
}

fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// Checks a host name as the agent wrote it, before any parser can decode or
/// map it: ASCII letters, digits, hyphens and dots, or Unicode letters that
/// are already in the form IDNA gives them (an internationalised name, which
/// the gate sends to review). A percent-encoded, invisible, full-width or
/// otherwise mapped character would be checked as one name and stored as
/// another, so it is refused with what was found.
fn check_written_host(host: &str) -> Result<(), String> {
    if let Some(c) = host
        .chars()
        .find(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.')))
    {
        return Err(format!(
            "the domain may hold only letters, digits, hyphens and dots, not `{}`; write it plainly, as the page shows it",
            c.escape_default()
        ));
    }
    if let Some(c) = host.chars().find(|c| is_invisible(*c)) {
        return Err(format!(
            "the domain holds an invisible character ({}); copy the address as the page shows it",
            code_point(c)
        ));
    }
    if !host.is_ascii() {
        // Only a name IDNA leaves as it is, up to letter case, is the name it
        // reads as. A non-ASCII letter whose small form is ASCII (the Kelvin
        // sign for `k`) is no case variant: it stands for another letter.
        let mut lowered = String::with_capacity(host.len());
        for c in host.chars() {
            if c.is_ascii() {
                lowered.push(c.to_ascii_lowercase());
            } else if c.to_lowercase().any(|l| l.is_ascii()) {
                lowered.push(c);
            } else {
                lowered.extend(c.to_lowercase());
            }
        }
        let (mapped, _) = idna::domain_to_unicode(host);
        if mapped != lowered {
            return Err(format!(
                "the domain `{host}` is written with characters that stand for others (it reads as `{mapped}`); write it in plain letters"
            ));
        }
    }
    Ok(())
}

/// The host of an absolute URL exactly as written (no port, no brackets
/// removed), or `None` when the text has no `scheme://` authority.
fn written_host(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("://")?;
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.starts_with('[') {
        return None;
    }
    Some(host.rsplit_once(':').map_or(host, |(h, _)| h))
}

/// `domain` (ASCII) with its punycode labels shown as Unicode.
pub fn unicode_form(domain: &str) -> String {
    idna::domain_to_unicode(domain).0
}

/// Parses an absolute http(s) URL with a host and no credentials.
pub fn parse_web_url(text: &str) -> Result<Url, String> {
    if text.trim() != text {
        return Err("remove the spaces around the URL".into());
    }
    let url = Url::parse(text).map_err(|e| format!("not an absolute URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme is `{}`; use http or https",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "a URL with `user@` before the host hides its real host; give the plain URL".into(),
        );
    }
    if let Some(host) = written_host(text) {
        check_written_host(host).map_err(|why| why.replacen("the domain", "the host", 1))?;
    }
    Ok(url)
}

/// The registrable domain of `host` (`www.acme.co.kr` → `acme.co.kr`) by the
/// public suffix list; `None` for an IP address or a public suffix itself.
pub fn registrable(host: &str) -> Option<String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') {
        return None;
    }
    psl::domain_str(&host).map(str::to_owned)
}

/// Whether `domain` is `parent` or a subdomain of it.
pub fn is_within(domain: &str, parent: &str) -> bool {
    domain == parent
        || domain
            .strip_suffix(parent)
            .is_some_and(|head| head.ends_with('.'))
}

/// Whether a URL's host is an internationalised domain name.
pub fn has_idn_host(url: &Url) -> bool {
    url.host_str()
        .is_some_and(|h| h.split('.').any(|l| l.starts_with("xn--")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_addresses_parse_and_their_domain_is_lowercased() {
        let e = parse_email("Info.Desk+kr@ACME.co.KR").unwrap();
        assert_eq!(e.local, "Info.Desk+kr");
        assert_eq!(e.domain, "acme.co.kr");
        assert_eq!(e.unicode_domain, None);
        assert_eq!(e.address(), "Info.Desk+kr@acme.co.kr");
    }

    #[test]
    fn each_malformed_address_says_what_is_wrong() {
        for (text, says) in [
            (" info@acme.test", "spaces"),
            ("mailto:info@acme.test", "mailto"),
            ("info.acme.test", "exactly one `@`"),
            ("a@b@acme.test", "exactly one `@`"),
            ("@acme.test", "1 to 64"),
            (&format!("{}@acme.test", "a".repeat(65)), "1 to 64"),
            ("in fo@acme.test", "only letters"),
            ("\"info\"@acme.test", "only letters"),
            (".info@acme.test", "dots"),
            ("info.@acme.test", "dots"),
            ("in..fo@acme.test", "dots"),
            ("info@[127.0.0.1]", "IP address"),
            ("info@127.0.0.1", "IP address"),
            ("info@acme", "two labels"),
            ("info@acme..test", "each label"),
            ("info@acme.test.", "each label"),
            ("info\u{200B}@acme.test", "invisible character (U+200B)"),
            ("info\u{7}@acme.test", "invisible character (U+0007)"),
            ("in%66o@acme.test", "only letters"),
            // A parser would decode or map these into acme.test while the
            // export kept them as written.
            ("info@acme%2Etest", "not `%`"),
            ("info@acme%E2%80%8B.test", "not `%`"),
            ("info@ac%C2%ADme.test", "not `%`"),
            ("info@ac\u{AD}me.test", "invisible character (U+00AD)"),
            ("info@acme\u{200B}.test", "invisible character (U+200B)"),
            ("info@acme.test\u{FEFF}", "invisible character (U+FEFF)"),
            ("info@\u{FF41}cme.test", "stand for others"),
            ("info@ACME\u{212A}.test", "stand for others"),
            ("info@acme!.test", "not `!`"),
            ("\u{456}nfo@acme.test", "only letters"),
            ("info＠acme.test", "exactly one `@`"),
            ("info@-acme.test", "inner hyphens"),
            ("info@ac_me.test", "not `_`"),
            ("info@acme.123", "IP address"),
            ("info@0x7f000001", "IP address"),
            ("info@", "not valid"),
        ] {
            let err = parse_email(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn an_internationalised_domain_is_kept_in_both_forms() {
        // Cyrillic "а" in place of the Latin "a": a homoglyph of acme.test.
        let e = parse_email("info@\u{430}cme.test").unwrap();
        assert!(e.domain.starts_with("xn--"), "{}", e.domain);
        assert_eq!(e.unicode_domain.as_deref(), Some("\u{430}cme.test"));
        let k = parse_email("info@xn--3e0b707e.xn--3e0b707e").unwrap();
        assert_eq!(k.unicode_domain.as_deref(), Some("한국.한국"));
        let written = parse_email("info@한국.한국").unwrap();
        assert_eq!(written.domain, "xn--3e0b707e.xn--3e0b707e");
        let upper = parse_email("info@\u{C4}CME.test").unwrap();
        assert_eq!(upper.unicode_domain.as_deref(), Some("\u{E4}cme.test"));
    }

    #[test]
    fn web_urls_must_be_absolute_http_without_credentials() {
        assert!(parse_web_url("https://acme.co.kr/contact").is_ok());
        assert!(parse_web_url("https://ACME.co.kr:8443/contact?x=%41").is_ok());
        assert!(parse_web_url("http://127.0.0.1:8080/").is_ok());
        assert!(parse_web_url("http://[::1]:8080/").is_ok());
        assert!(
            parse_web_url("https://\u{430}cme.test/").is_ok(),
            "an IDN host parses; the gate sends it to review"
        );
        for (text, says) in [
            ("acme.co.kr/contact", "absolute"),
            ("ftp://acme.co.kr/", "scheme"),
            ("javascript:alert(1)", "scheme"),
            ("https://acme.co.kr@evil.test/", "hides its real host"),
            ("https://u:p@acme.co.kr/", "hides its real host"),
            ("https://acme.co.kr/ ", "spaces"),
            ("https://acme%2Eco.kr/contact", "not `%`"),
            ("https://ac\u{AD}me.co.kr/", "invisible character (U+00AD)"),
            ("https://\u{FF41}cme.co.kr:8080/", "stand for others"),
            ("http://acme.co.kr\u{200B}/", "invisible character (U+200B)"),
        ] {
            let err = parse_web_url(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn registrable_domains_follow_the_public_suffix_list() {
        assert_eq!(registrable("www.acme.co.kr").as_deref(), Some("acme.co.kr"));
        assert_eq!(registrable("ACME.co.kr.").as_deref(), Some("acme.co.kr"));
        assert_eq!(
            registrable("acme.co.kr.evil.com").as_deref(),
            Some("evil.com")
        );
        assert_eq!(registrable("shop.acme.test").as_deref(), Some("acme.test"));
        assert_eq!(registrable("co.kr"), None);
        assert_eq!(registrable("127.0.0.1"), None);
        assert_eq!(registrable("[::1]"), None);
        assert_eq!(
            registrable("acme.github.io").as_deref(),
            Some("acme.github.io"),
            "private suffixes count: github.io pages belong to their owners"
        );
    }

    #[test]
    fn within_means_equal_or_a_true_subdomain() {
        assert!(is_within("acme.test", "acme.test"));
        assert!(is_within("mail.acme.test", "acme.test"));
        assert!(!is_within("notacme.test", "acme.test"));
        assert!(!is_within("acme.test.evil.test", "acme.test"));
    }

    #[test]
    fn idn_hosts_are_recognised_in_urls() {
        assert!(has_idn_host(
            &Url::parse("https://\u{430}cme.test/").unwrap()
        ));
        assert!(!has_idn_host(&Url::parse("https://acme.test/").unwrap()));
    }
}
