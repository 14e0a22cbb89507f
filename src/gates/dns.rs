//! DNS as the gates see it: the [`Resolver`] trait and its real implementation
//! on hickory-resolver. The same resolver answers the MX lookups of the email
//! gate and the address lookups of the page fetcher, so that one setting
//! (`QUEST_DNS_SERVERS`) points the whole gate at one DNS server.
//!
//! This module classifies answers; it decides no verdicts.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::{Resolver as HickoryCore, TokioResolver};

/// One MX record: a mail host and its preference (lower is tried first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxHost {
    pub preference: u16,
    /// The exchange's name, without the trailing dot.
    pub exchange: String,
}

/// Whether and where a domain accepts mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MailAnswer {
    /// MX records name these hosts, best first.
    Mx(Vec<MxHost>),
    /// A null MX (RFC 7505): the domain says it accepts no mail.
    NullMx,
    /// The domain does not exist (NXDOMAIN).
    NoDomain,
    /// No MX, but address records: mail goes to the domain itself (implicit MX, RFC 5321 §5.1).
    AddressOnly(Vec<IpAddr>),
    /// The domain exists but has neither MX nor address records.
    NoMailHost,
    /// DNS gave no usable answer: timeout, SERVFAIL, REFUSED or a transport error.
    Unavailable(String),
}

/// Why a name has no addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The name does not exist (NXDOMAIN).
    #[error("{0} does not exist (NXDOMAIN)")]
    NoDomain(String),
    /// The name exists but has no address records.
    #[error("{0} has no address records")]
    NoRecords(String),
    /// DNS gave no usable answer.
    #[error("DNS gave no answer for {name}: {reason}")]
    Unavailable { name: String, reason: String },
}

/// The DNS questions the gates ask.
#[async_trait]
pub trait Resolver: Send + Sync {
    /// Where `domain` accepts mail.
    async fn mail_hosts(&self, domain: &str) -> MailAnswer;
    /// The addresses of `host`. The real resolver asks for A records first and
    /// for AAAA only when there is none, so a host with both answers with its
    /// IPv4 addresses only.
    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, LookupError>;
}

/// The real resolver: hickory over UDP and TCP, with a hard time limit per question.
pub struct HickoryResolver {
    inner: TokioResolver,
    timeout: Duration,
}

impl HickoryResolver {
    /// A resolver asking `servers` (or, when empty, the system's configured
    /// name servers) and giving up on a question after `timeout`, retries included.
    pub fn new(servers: &[SocketAddr], timeout: Duration) -> Result<HickoryResolver, NetError> {
        let mut builder = if servers.is_empty() {
            HickoryCore::builder_tokio()?
        } else {
            let name_servers = servers
                .iter()
                .map(|server| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = server.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = server.port();
                    NameServerConfig::new(server.ip(), true, vec![udp, tcp])
                })
                .collect();
            let mut builder = HickoryCore::builder_with_config(
                ResolverConfig::from_name_servers(name_servers),
                TokioRuntimeProvider::default(),
            );
            // Configured servers are the whole truth: tests and private
            // deployments must not see this machine's /etc/hosts.
            builder.options_mut().use_hosts_file = ResolveHosts::Never;
            builder
        };
        let options = builder.options_mut();
        // hickory's worst case is timeout × (attempts + 1); the defaults (5 s, 2)
        // make 15 s. One retry at half the budget keeps the whole inside `timeout`.
        options.timeout = (timeout / 2).max(Duration::from_millis(1));
        options.attempts = 1;
        // Ask for A first and for AAAA only when there is no A: hickory's default
        // asks both at once and waits for the slower, so one silent AAAA
        // upstream would make a host with a perfectly good A record unreachable.
        options.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
        Ok(HickoryResolver {
            inner: builder.build()?,
            timeout,
        })
    }

    fn unavailable(&self, error: Option<NetError>) -> String {
        match error {
            None | Some(NetError::Timeout) => {
                format!("no answer within {} ms", self.timeout.as_millis())
            }
            Some(e) => e.to_string(),
        }
    }
}

/// The fully qualified form, so that no search list is appended.
fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_owned()
    } else {
        format!("{name}.")
    }
}

/// Classifies the MX records of an answer; `None` when there are none (treated like NODATA).
fn classify_mx(hosts: Vec<MxHost>) -> Option<MailAnswer> {
    if hosts.is_empty() {
        return None;
    }
    // RFC 7505: the null MX is a single record whose exchange is the root.
    let (null, mut usable): (Vec<_>, Vec<_>) =
        hosts.into_iter().partition(|h| h.exchange.is_empty());
    if usable.is_empty() {
        debug_assert!(!null.is_empty());
        return Some(MailAnswer::NullMx);
    }
    usable.sort_by(|a, b| (a.preference, &a.exchange).cmp(&(b.preference, &b.exchange)));
    Some(MailAnswer::Mx(usable))
}

#[async_trait]
impl Resolver for HickoryResolver {
    async fn mail_hosts(&self, domain: &str) -> MailAnswer {
        let answer = tokio::time::timeout(self.timeout, self.inner.mx_lookup(fqdn(domain))).await;
        match answer {
            Err(_) => MailAnswer::Unavailable(self.unavailable(None)),
            Ok(Ok(lookup)) => {
                let hosts = lookup
                    .answers()
                    .iter()
                    .filter_map(|record| match &record.data {
                        RData::MX(mx) => Some(MxHost {
                            preference: mx.preference,
                            exchange: mx.exchange.to_ascii().trim_end_matches('.').to_owned(),
                        }),
                        _ => None,
                    })
                    .collect();
                match classify_mx(hosts) {
                    Some(answer) => answer,
                    None => self.implicit_mx(domain).await,
                }
            }
            Ok(Err(e)) if e.is_nx_domain() => MailAnswer::NoDomain,
            Ok(Err(e)) if e.is_no_records_found() => self.implicit_mx(domain).await,
            Ok(Err(e)) => MailAnswer::Unavailable(self.unavailable(Some(e))),
        }
    }

    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        let answer = tokio::time::timeout(self.timeout, self.inner.lookup_ip(fqdn(host))).await;
        let unavailable = |reason| LookupError::Unavailable {
            name: host.to_owned(),
            reason,
        };
        match answer {
            Err(_) => Err(unavailable(self.unavailable(None))),
            Ok(Ok(lookup)) => {
                let ips: Vec<IpAddr> = lookup.iter().collect();
                if ips.is_empty() {
                    Err(LookupError::NoRecords(host.to_owned()))
                } else {
                    Ok(ips)
                }
            }
            Ok(Err(e)) if e.is_nx_domain() => Err(LookupError::NoDomain(host.to_owned())),
            Ok(Err(e)) if e.is_no_records_found() => Err(LookupError::NoRecords(host.to_owned())),
            Ok(Err(e)) => Err(unavailable(self.unavailable(Some(e)))),
        }
    }
}

impl HickoryResolver {
    /// No MX: RFC 5321 §5.1 falls back to the domain's own address records.
    async fn implicit_mx(&self, domain: &str) -> MailAnswer {
        match self.addresses(domain).await {
            Ok(ips) => MailAnswer::AddressOnly(ips),
            Err(LookupError::NoDomain(_)) => MailAnswer::NoDomain,
            Err(LookupError::NoRecords(_)) => MailAnswer::NoMailHost,
            Err(LookupError::Unavailable { reason, .. }) => MailAnswer::Unavailable(reason),
        }
    }
}

/// A resolver that answers every question with "unavailable": what the server
/// uses when the system's DNS configuration cannot be read, so that email
/// checks go to REVIEW instead of the server refusing to start.
#[derive(Debug, Clone)]
pub struct UnavailableResolver {
    pub reason: String,
}

#[async_trait]
impl Resolver for UnavailableResolver {
    async fn mail_hosts(&self, _domain: &str) -> MailAnswer {
        MailAnswer::Unavailable(self.reason.clone())
    }

    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        Err(LookupError::Unavailable {
            name: host.to_owned(),
            reason: self.reason.clone(),
        })
    }
}

#[cfg(test)]
#[path = "../../tests/support/dnsmasq.rs"]
mod dnsmasq;

#[cfg(test)]
mod tests {
    use super::dnsmasq::Dnsmasq;
    use super::*;

    fn mx(preference: u16, exchange: &str) -> MxHost {
        MxHost {
            preference,
            exchange: exchange.into(),
        }
    }

    #[test]
    fn mx_records_are_sorted_and_a_lone_root_exchange_is_a_null_mx() {
        assert_eq!(classify_mx(vec![]), None);
        assert_eq!(classify_mx(vec![mx(0, "")]), Some(MailAnswer::NullMx));
        assert_eq!(
            classify_mx(vec![
                mx(20, "b.acme.test"),
                mx(10, "a.acme.test"),
                mx(0, "")
            ]),
            Some(MailAnswer::Mx(vec![
                mx(10, "a.acme.test"),
                mx(20, "b.acme.test")
            ])),
            "a root exchange mixed with real ones is ignored"
        );
    }

    #[test]
    fn names_are_asked_fully_qualified() {
        assert_eq!(fqdn("acme.test"), "acme.test.");
        assert_eq!(fqdn("acme.test."), "acme.test.");
    }

    #[tokio::test]
    async fn a_silent_server_is_unavailable_not_a_missing_domain() {
        // A bound UDP socket that never answers: a black hole on loopback.
        let hole = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let resolver =
            HickoryResolver::new(&[hole.local_addr().unwrap()], Duration::from_millis(200))
                .unwrap();
        match resolver.mail_hosts("acme.test").await {
            MailAnswer::Unavailable(reason) => assert!(reason.contains("200 ms"), "{reason}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
        let err = resolver.addresses("acme.test").await.unwrap_err();
        assert!(
            matches!(&err, LookupError::Unavailable { name, .. } if name == "acme.test"),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn the_system_configuration_builds_a_resolver() {
        // Reads /etc/resolv.conf only; asks nothing.
        if std::path::Path::new("/etc/resolv.conf").exists() {
            HickoryResolver::new(&[], Duration::from_secs(1)).unwrap();
        }
    }

    #[tokio::test]
    async fn the_unavailable_resolver_says_why_for_every_question() {
        let r = UnavailableResolver {
            reason: "no resolv.conf".into(),
        };
        assert_eq!(
            r.mail_hosts("acme.test").await,
            MailAnswer::Unavailable("no resolv.conf".into())
        );
        assert_eq!(
            r.addresses("acme.test").await.unwrap_err().to_string(),
            "DNS gave no answer for acme.test: no resolv.conf"
        );
    }

    #[tokio::test]
    async fn every_kind_of_mx_answer_is_told_apart_on_a_real_dns_server() {
        let Some(dns) = Dnsmasq::start_or_skip(
            "every_kind_of_mx_answer_is_told_apart_on_a_real_dns_server",
            &[
                "--mx-host=acme.test,mail.acme.test,10".into(),
                "--mx-host=acme.test,backup.acme.test,20".into(),
                "--host-record=mail.acme.test,127.0.0.1".into(),
                "--dns-rr=nullmx.test,15,000000".into(),
                "--host-record=addronly.test,127.0.0.1".into(),
                "--txt-record=nothing.test,\"no mail here\"".into(),
                "--cname=alias.test,acme.test".into(),
            ],
        )
        .await
        else {
            return;
        };
        let r = HickoryResolver::new(&[dns.addr()], Duration::from_secs(2)).unwrap();
        assert_eq!(
            r.mail_hosts("acme.test").await,
            MailAnswer::Mx(vec![mx(10, "mail.acme.test"), mx(20, "backup.acme.test")])
        );
        assert_eq!(
            r.mail_hosts("alias.test").await,
            MailAnswer::Mx(vec![mx(10, "mail.acme.test"), mx(20, "backup.acme.test")]),
            "the CNAME in the answer is skipped"
        );
        assert_eq!(r.mail_hosts("nullmx.test").await, MailAnswer::NullMx);
        // dnsmasq has no upstream, so a name outside .test is REFUSED: unavailable, not missing.
        match r.mail_hosts("outside.example").await {
            MailAnswer::Unavailable(reason) => {
                assert!(reason.to_lowercase().contains("refused"), "{reason}")
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
        assert_eq!(
            r.mail_hosts("addronly.test").await,
            MailAnswer::AddressOnly(vec!["127.0.0.1".parse().unwrap()])
        );
        assert_eq!(r.mail_hosts("missing.test").await, MailAnswer::NoDomain);
        assert_eq!(r.mail_hosts("nothing.test").await, MailAnswer::NoMailHost);
        assert_eq!(
            r.addresses("mail.acme.test").await,
            Ok(vec!["127.0.0.1".parse().unwrap()])
        );
        assert_eq!(
            r.addresses("missing.test").await,
            Err(LookupError::NoDomain("missing.test".into()))
        );
        assert_eq!(
            r.addresses("nothing.test").await,
            Err(LookupError::NoRecords("nothing.test".into()))
        );
    }
}
