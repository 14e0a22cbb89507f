//! The SSRF guard's rules: which addresses an agent-supplied URL may reach.
//! Loopback, private, link-local, CGNAT, multicast, unspecified, documentation
//! and other non-public ranges are refused (IPv4-mapped and IPv4-compatible
//! IPv6 forms as the IPv4 address they carry) unless the allow-list names them.
//!
//! The rules are checked on the exact addresses the connector will dial (see
//! `http.rs`), so DNS rebinding cannot slip between check and use.

use std::net::IpAddr;
use std::sync::LazyLock;

use ipnet::IpNet;
use url::{Host, Url};

use super::FetchError;

/// Ranges that are not the public internet, with the name a refusal gives.
static NON_PUBLIC: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    [
        ("0.0.0.0/8", "\"this network\" (unspecified)"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved (includes broadcast)"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments (includes Teredo)"),
        ("2001:db8::/32", "documentation"),
        ("2002::/16", "6to4"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    ]
    .into_iter()
    .map(|(net, name)| (net.parse().expect("a valid literal range"), name))
    .collect()
});

/// The kind of non-public range `ip` lies in, if any. IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`, RFC 2765) and
/// IPv4-compatible (`::a.b.c.d`) addresses are judged as the IPv4 address they carry.
pub fn non_public_range(ip: IpAddr) -> Option<&'static str> {
    let ip = embedded_v4(ip).map_or(ip, IpAddr::V4);
    NON_PUBLIC
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, name)| *name)
}

fn embedded_v4(ip: IpAddr) -> Option<std::net::Ipv4Addr> {
    match ip {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let [a, b] = s[6].to_be_bytes();
            let [c, d] = s[7].to_be_bytes();
            let carried = std::net::Ipv4Addr::new(a, b, c, d);
            // ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (translated) and
            // ::a.b.c.d (deprecated compatible), but not :: and ::1 themselves.
            let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
            let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
            let compatible = s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1);
            (mapped || translated || compatible).then_some(carried)
        }
    }
}

/// Which addresses the fetcher may connect to.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    /// Public addresses only, plus those in `allow` (for tests and private deployments).
    pub fn new(allow: Vec<IpNet>) -> AddressPolicy {
        AddressPolicy { allow }
    }

    /// Whether `ip` may be reached; the error says which range refused it.
    pub fn check(&self, ip: IpAddr) -> Result<(), String> {
        let carried = embedded_v4(ip).map(IpAddr::V4);
        if self
            .allow
            .iter()
            .any(|net| net.contains(&ip) || carried.is_some_and(|v4| net.contains(&v4)))
        {
            return Ok(());
        }
        match non_public_range(ip) {
            Some(range) => Err(format!("{ip} is a {range} address")),
            None => Ok(()),
        }
    }

    /// The checks a URL gets before any request and on every redirect: the
    /// scheme is http or https, and an IP-literal host is allowed (a name is
    /// checked when it is resolved, because the connector skips the resolver
    /// for IP literals).
    pub fn check_url(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Refused(format!(
                "{url}: only http and https are fetched"
            )));
        }
        let ip = match url.host() {
            Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(Host::Domain(_)) => return Ok(()),
            None => return Err(FetchError::Refused(format!("{url} has no host"))),
        };
        self.check(ip)
            .map_err(|why| FetchError::Refused(format!("{url}: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> bool {
        AddressPolicy::default().check(ip.parse().unwrap()).is_err()
    }

    #[test]
    fn every_non_public_range_is_refused_and_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:10.0.0.1",
            "::ffff:0:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::1",
        ] {
            assert!(refused(ip), "{ip} must be refused");
        }
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
        ] {
            assert!(!refused(ip), "{ip} is public");
        }
    }

    #[test]
    fn a_refusal_names_the_range() {
        let err = AddressPolicy::default()
            .check("169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(err.contains("link-local"), "{err}");
    }

    #[test]
    fn the_allow_list_opens_exactly_its_ranges_also_in_mapped_form() {
        let policy = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(policy.check("127.0.0.1".parse().unwrap()).is_ok());
        assert!(policy.check("::ffff:127.0.0.1".parse().unwrap()).is_ok());
        assert!(policy.check("::ffff:0:127.0.0.1".parse().unwrap()).is_ok());
        assert!(policy.check("::1".parse().unwrap()).is_err());
        assert!(policy.check("10.0.0.1".parse().unwrap()).is_err());
    }

    #[test]
    fn urls_are_checked_for_scheme_and_ip_literal_hosts() {
        let policy = AddressPolicy::default();
        let check = |u: &str| policy.check_url(&Url::parse(u).unwrap());
        assert!(check("https://acme.test/contact").is_ok());
        assert!(check("http://93.184.215.14/").is_ok());
        for url in [
            "http://127.0.0.1:8080/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:0:7f00:1]/",
            "http://169.254.169.254/latest/meta-data/",
            // The URL parser turns these spellings into 127.0.0.1.
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "file:///etc/passwd",
            "ftp://acme.test/",
        ] {
            assert!(
                matches!(check(url), Err(FetchError::Refused(_))),
                "{url} must be refused"
            );
        }
        assert!(matches!(
            policy.check_url(&Url::parse("data:text/plain,hi").unwrap()),
            Err(FetchError::Refused(_))
        ));
    }
}
