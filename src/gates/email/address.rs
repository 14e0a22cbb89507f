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
            ("info\u{200B}@acme.test", "only letters"),
            ("\u{456}nfo@acme.test", "only letters"),
            ("info＠acme.test", "exactly one `@`"),
            ("info@-acme.test", "inner hyphens"),
            ("info@ac_me.test", "inner hyphens"),
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
    }

    #[test]
    fn web_urls_must_be_absolute_http_without_credentials() {
        assert!(parse_web_url("https://acme.co.kr/contact").is_ok());
        for (text, says) in [
            ("acme.co.kr/contact", "absolute"),
            ("ftp://acme.co.kr/", "scheme"),
            ("javascript:alert(1)", "scheme"),
            ("https://acme.co.kr@evil.test/", "hides its real host"),
            ("https://u:p@acme.co.kr/", "hides its real host"),
            ("https://acme.co.kr/ ", "spaces"),
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
