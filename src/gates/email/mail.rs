//! Checks 7 and 8 of the email gate: the address's domain accepts mail, and
//! no other quest of the session holds the same address.
//!
//! What DNS answers comes from the server's own resolver, which may see names
//! the internet does not (split-horizon DNS, a corporate zone): an agent must
//! not learn the server's network from the evidence. So no address the SSRF
//! policy refuses is ever written into evidence or a fact, not as an address
//! record, not inside an MX name, not inside a resolver's error message.

use std::net::IpAddr;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::Findings;
use super::address::Email;
use crate::domain::Fact;
use crate::gates::dns::MailAnswer;
use crate::gates::fetch::AddressPolicy;

/// Text that may be an IPv4 address, or an IPv6 one (perhaps ending in an
/// IPv4 address): every candidate is parsed before it is withheld.
static ADDRESS_LIKE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\d{1,3}(?:\.\d{1,3}){3})?")
        .unwrap()
});

/// `text` with every IP address that `policy` refuses replaced by a note.
pub(super) fn withhold(text: &str, policy: &AddressPolicy) -> String {
    ADDRESS_LIKE
        .replace_all(text, |found: &regex::Captures| {
            let token = &found[0];
            match token.parse::<IpAddr>() {
                Ok(ip) if policy.check(ip).is_err() => "(a non-public address)".to_owned(),
                _ => token.to_owned(),
            }
        })
        .into_owned()
}

/// Check 8: no other quest of the session holds the same address. Returns
/// evidence when one does.
pub(super) fn duplicate_check(
    findings: &mut Findings,
    email: &Email,
    holders: &[String],
) -> Option<Value> {
    if holders.is_empty() {
        return None;
    }
    let named = holders
        .iter()
        .map(|key| format!("\"{key}\""))
        .collect::<Vec<_>>()
        .join(", ");
    findings.review(Fact::new(
        "duplicate",
        "/email",
        "an address no other company of this session has",
        format!("{} is also the result for {named}", email.address()),
        "two companies rarely share one contact address, so a person will compare the quests; \
         if the address belongs to the other company, find this company's own",
    ));
    Some(json!({"check": "duplicate", "email": email.address(), "quests": holders}))
}

/// Check 7: the email's domain accepts mail. Returns the evidence, which
/// holds no address `policy` refuses and no such address written in a name or
/// an error message (see [`withhold`]).
pub(super) fn mx_check(
    findings: &mut Findings,
    email: &Email,
    answer: MailAnswer,
    policy: &AddressPolicy,
) -> Value {
    let domain = &email.domain;
    let expected = format!("{domain} accepts mail (MX records)");
    let fact =
        |actual: String, hint: &str| Fact::new("mx", "/email", expected.clone(), actual, hint);
    let mut evidence = json!({"check": "mx", "domain": domain});
    match answer {
        MailAnswer::Mx(hosts) => {
            evidence["answer"] = json!("mx");
            evidence["hosts"] = json!(
                hosts
                    .iter()
                    .map(|h| withhold(&format!("{} {}", h.preference, h.exchange), policy))
                    .collect::<Vec<_>>()
            );
        }
        MailAnswer::NullMx => {
            evidence["answer"] = json!("null_mx");
            findings.fail(fact(
                format!("{domain} publishes a null MX (RFC 7505): it accepts no mail"),
                "this address cannot receive mail; find one that can",
            ));
        }
        MailAnswer::NoDomain => {
            evidence["answer"] = json!("nxdomain");
            findings.fail(fact(
                format!("{domain} does not exist (NXDOMAIN)"),
                "the domain does not exist; check the spelling against the page",
            ));
        }
        MailAnswer::NoMailHost => {
            evidence["answer"] = json!("no_mail_host");
            findings.fail(fact(
                format!("{domain} has neither MX nor address records"),
                "no mail can be delivered to this domain; find an address that can receive mail",
            ));
        }
        MailAnswer::AddressOnly(ips) => {
            evidence["answer"] = json!("address_only");
            let (shown, hidden): (Vec<IpAddr>, Vec<IpAddr>) =
                ips.iter().partition(|ip| policy.check(**ip).is_ok());
            evidence["addresses"] =
                json!(shown.iter().map(ToString::to_string).collect::<Vec<_>>());
            if !hidden.is_empty() {
                evidence["withheld"] = json!(format!(
                    "{} non-public address{} (not shown: it would map the server's own network)",
                    hidden.len(),
                    if hidden.len() == 1 { "" } else { "es" }
                ));
            }
            findings.review(fact(
                format!(
                    "no MX records; {domain} has only an address record (implicit MX, RFC 5321)"
                ),
                "mail may still arrive; a person will confirm it",
            ));
        }
        MailAnswer::Unavailable(reason) => {
            evidence["answer"] = json!("unavailable");
            let reason = withhold(&reason, policy);
            evidence["error"] = json!(reason);
            findings.review(
                fact(
                    format!("no DNS answer: {reason}"),
                    "DNS could not be asked now; if the address is right there is nothing to fix, a person will look",
                )
                .no_answer(),
            );
        }
    }
    evidence
}
