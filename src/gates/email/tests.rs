//! Every branch of every check of the email gate, against a fake web and a fake DNS.

use super::*;
use crate::gates::dns::{MailAnswer, MxHost};
use crate::testing::{FakeFetcher, FakeResolver, page};
use serde_json::json;

const CONTACT: &str = "https://acme.test/contact";

struct World {
    fetcher: Arc<FakeFetcher>,
    resolver: Arc<FakeResolver>,
    gate: EmailGate,
}

fn world_with(fetcher: FakeFetcher, resolver: FakeResolver, params: Value) -> World {
    let fetcher = Arc::new(fetcher);
    let resolver = Arc::new(resolver);
    let gate = EmailGate::from_params(
        params.as_object().unwrap(),
        &EmailWorld::new(fetcher.clone(), resolver.clone()),
    )
    .unwrap();
    World {
        fetcher,
        resolver,
        gate,
    }
}

fn world(fetcher: FakeFetcher, resolver: FakeResolver) -> World {
    world_with(fetcher, resolver, json!({}))
}

/// Acme's site: a contact page listing info@acme.test, and MX records.
fn acme() -> World {
    world(
        FakeFetcher::new().html(
            CONTACT,
            "<html><body><h1>Contact</h1><p>Mail us: info@acme.test</p></body></html>",
        ),
        FakeResolver::new().with_mx("acme.test"),
    )
}

fn claim(email: &str, site: &str, source: &str) -> Value {
    json!({"email": email, "site": site, "source": source})
}

fn honest() -> Value {
    claim("info@acme.test", "https://acme.test", CONTACT)
}

async fn check(w: &World, result: Value) -> GateOutcome {
    check_in(w, result, &SessionView::alone()).await
}

async fn check_in(w: &World, result: Value, session: &SessionView) -> GateOutcome {
    w.gate
        .check(&json!({"company": "Acme"}), &result, session)
        .await
}

/// The facts as (check, field) pairs, in order.
fn where_(o: &GateOutcome) -> Vec<(&str, &str)> {
    o.facts
        .iter()
        .map(|f| (f.check.as_str(), f.field.as_str()))
        .collect()
}

fn evidence<'a>(o: &'a GateOutcome, check: &str) -> &'a Value {
    o.evidence
        .iter()
        .find(|e| e["check"] == check)
        .unwrap_or_else(|| panic!("no {check} evidence in {:?}", o.evidence))
}

#[tokio::test]
async fn an_honest_claim_passes_with_evidence_of_the_page_and_the_mx_hosts() {
    let w = acme();
    let o = check(&w, honest()).await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    assert!(o.facts.is_empty());
    let body = "<html><body><h1>Contact</h1><p>Mail us: info@acme.test</p></body></html>";
    assert_eq!(
        evidence(&o, "source"),
        &json!({
            "check": "source",
            "url": CONTACT,
            "final_url": CONTACT,
            "status": 200,
            "content_type": "text/html; charset=utf-8",
            "sha256": hex::encode(Sha256::digest(body)),
            "bytes": body.len(),
            "truncated": false,
            "fetched_at": "2026-01-02T03:04:05+00:00",
            "addresses": ["info@acme.test"],
            "found": "exact",
            "snippet": body,
        })
    );
    assert_eq!(
        evidence(&o, "mx"),
        &json!({"check": "mx", "domain": "acme.test", "answer": "mx", "hosts": ["10 mx.acme.test"]})
    );
    assert_eq!(w.resolver.calls(), ["MX acme.test"]);
}

#[tokio::test]
async fn missing_and_malformed_fields_fail_format_and_skip_what_they_would_feed() {
    let w = acme();
    let o = check(&w, json!({"site": 7, "source": CONTACT})).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("format", "/email"), ("format", "/site")]);
    assert_eq!(o.facts[0].actual, "missing");
    assert_eq!(o.facts[1].actual, "7");
    assert!(o.facts[1].hint.contains("must be a string"));
    assert_eq!(
        w.resolver.calls(),
        Vec::<String>::new(),
        "no address, no MX lookup"
    );
    assert_eq!(
        evidence(&o, "mx"),
        &json!({"check": "mx", "skipped": "no valid email address"})
    );
    // The page is still read, so the agent learns which addresses it shows.
    assert_eq!(
        evidence(&o, "source")["addresses"],
        json!(["info@acme.test"])
    );
    assert!(evidence(&o, "source").get("found").is_none());

    let o = check(
        &w,
        claim(
            "info at acme.test",
            "https://acme.test",
            "acme.test/contact",
        ),
    )
    .await;
    assert_eq!(where_(&o), [("format", "/email"), ("format", "/source")]);
    assert!(
        o.facts[0].hint.contains("exactly one `@`"),
        "{}",
        o.facts[0].hint
    );
    assert_eq!(
        w.fetcher.calls(),
        [CONTACT],
        "a malformed URL is never fetched"
    );
    assert_eq!(
        evidence(&o, "source"),
        &json!({"check": "source", "skipped": "no valid source URL"})
    );

    let o = check(&w, json!("not an object")).await;
    assert_eq!(o.facts.len(), 3);
    assert!(
        o.facts
            .iter()
            .all(|f| f.check == "format" && f.actual == "missing")
    );
}

#[tokio::test]
async fn an_encoded_or_invisible_domain_fails_format_and_no_dns_is_asked() {
    // A parser would read each of these as acme.test, which is on the page and
    // has MX records, while the export kept the address as written.
    for email in [
        "info@acme%2Etest",
        "info@acme%E2%80%8B.test",
        "info@ac%C2%ADme.test",
        "info@ac\u{AD}me.test",
        "info@\u{FF41}cme.test",
    ] {
        let w = acme();
        let o = check(&w, claim(email, "https://acme.test", CONTACT)).await;
        assert_eq!(o.verdict, Verdict::Fail, "{email}: {:?}", o.facts);
        assert_eq!(where_(&o), [("format", "/email")], "{email}");
        assert_eq!(o.facts[0].actual, email);
        assert!(w.resolver.calls().is_empty(), "{email}");
    }
}

#[tokio::test]
async fn internationalised_domains_go_to_review_as_possible_homoglyphs() {
    // "аcme.test" with a Cyrillic "а".
    let lookalike = "\u{430}cme.test";
    let puny = url::Url::parse(&format!("https://{lookalike}/"))
        .unwrap()
        .host_str()
        .unwrap()
        .to_owned();
    let contact = format!("https://{puny}/contact");
    let w = world(
        FakeFetcher::new().html(&contact, &format!("info@{lookalike}")),
        FakeResolver::new().with_mx(&puny),
    );
    let o = check(
        &w,
        claim(
            &format!("info@{lookalike}"),
            &format!("https://{lookalike}"),
            &format!("https://{lookalike}/contact"),
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(
        where_(&o),
        [
            ("format", "/email"),
            ("format", "/site"),
            ("format", "/source")
        ]
    );
    assert!(
        o.facts[0].actual.contains(lookalike),
        "{}",
        o.facts[0].actual
    );
}

#[tokio::test]
async fn placeholders_fail_the_blacklist_and_the_world_is_not_asked_about_them() {
    let w = acme();
    let o = check(&w, claim("your@email.com", "https://acme.test", CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o)[0], ("blacklist", "/email"));
    assert!(o.facts[0].hint.contains("placeholder address"));
    assert!(w.resolver.calls().is_empty());
    assert_eq!(
        evidence(&o, "mx"),
        &json!({"check": "mx", "domain": "email.com", "skipped": "the address is a placeholder"})
    );

    let o = check(
        &w,
        claim(
            "info@example.com",
            "https://www.example.com",
            "https://example.com/contact",
        ),
    )
    .await;
    assert_eq!(
        where_(&o),
        [
            ("blacklist", "/email"),
            ("blacklist", "/site"),
            ("blacklist", "/source")
        ]
    );
    assert_eq!(
        w.fetcher.calls(),
        [CONTACT],
        "a placeholder page is never fetched"
    );
    assert_eq!(
        evidence(&o, "source")["skipped"],
        "the source is a placeholder"
    );

    let o = check(&w, claim("noreply@acme.test", "https://acme.test", CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert!(o.facts[0].hint.contains("takes no replies"));
}

#[tokio::test]
async fn names_of_private_networks_fail_the_blacklist_and_no_dns_is_asked_about_them() {
    let w = acme();
    let o = check(
        &w,
        claim(
            "x@db.corp.internal",
            "http://intranet/",
            "http://wiki.lan/contact",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(
        where_(&o)[..3],
        [
            ("blacklist", "/email"),
            ("blacklist", "/site"),
            ("blacklist", "/source")
        ]
    );
    assert!(o.facts[0].hint.contains(".internal"), "{:?}", o.facts[0]);
    assert!(o.facts[1].hint.contains("single-label"), "{:?}", o.facts[1]);
    assert!(w.resolver.calls().is_empty(), "{:?}", w.resolver.calls());
    assert!(w.fetcher.calls().is_empty(), "{:?}", w.fetcher.calls());
}

#[tokio::test]
async fn evidence_never_holds_an_address_the_ssrf_policy_refuses() {
    // A public-looking domain that the server's own DNS answers with its
    // internal addresses (split horizon), and a resolver error naming one.
    let mixed = MailAnswer::AddressOnly(vec![
        "10.1.2.3".parse().unwrap(),
        "93.184.215.14".parse().unwrap(),
        "fd00::7".parse().unwrap(),
    ]);
    let w = world(
        FakeFetcher::new().html(CONTACT, "info@acme.test"),
        FakeResolver::new().mail("acme.test", mixed),
    );
    let o = check(&w, honest()).await;
    let mx = evidence(&o, "mx");
    assert_eq!(mx["addresses"], json!(["93.184.215.14"]));
    assert!(
        mx["withheld"]
            .as_str()
            .unwrap()
            .starts_with("2 non-public addresses")
    );
    let shown = serde_json::to_string(&(&o.evidence, &o.facts)).unwrap();
    assert!(
        !shown.contains("10.1.2.3") && !shown.contains("fd00"),
        "{shown}"
    );

    let silent = MailAnswer::Unavailable(
        "io error talking to 10.0.0.53:53 and [fd00::53]:53 (public 8.8.8.8 too)".into(),
    );
    let w = world(
        FakeFetcher::new().html(CONTACT, "info@acme.test"),
        FakeResolver::new().mail("acme.test", silent),
    );
    let o = check(&w, honest()).await;
    let shown = serde_json::to_string(&(&o.evidence, &o.facts)).unwrap();
    assert!(
        !shown.contains("10.0.0.53") && !shown.contains("fd00"),
        "{shown}"
    );
    assert!(shown.contains("(a non-public address):53"), "{shown}");
    assert!(shown.contains("8.8.8.8"), "public addresses stay: {shown}");

    // The operator's allow-list is the policy: what the fetcher may reach is shown.
    let fetcher = Arc::new(FakeFetcher::new().html(CONTACT, "info@acme.test"));
    let resolver = Arc::new(FakeResolver::new().mail(
        "acme.test",
        MailAnswer::AddressOnly(vec!["127.0.0.1".parse().unwrap()]),
    ));
    let mut allowing = EmailWorld::new(fetcher, resolver);
    allowing.policy = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
    let gate = EmailGate::from_params(&Map::new(), &allowing).unwrap();
    let o = gate
        .check(
            &json!({"company": "Acme"}),
            &honest(),
            &SessionView::alone(),
        )
        .await;
    assert_eq!(evidence(&o, "mx")["addresses"], json!(["127.0.0.1"]));
}

#[tokio::test]
async fn a_session_blacklist_fails_its_own_entries() {
    let w = world_with(
        FakeFetcher::new().html(CONTACT, "ceo@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
        json!({"blacklist": ["ceo@acme.test"]}),
    );
    let o = check(&w, claim("ceo@acme.test", "https://acme.test", CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("blacklist", "/email")]);
}

#[tokio::test]
async fn a_freemail_address_goes_to_review_and_skips_the_domain_match() {
    let w = world(
        FakeFetcher::new().html(CONTACT, "Contact: acme.shop@gmail.com"),
        FakeResolver::new().with_mx("gmail.com"),
    );
    let o = check(
        &w,
        claim("acme.shop@gmail.com", "https://acme.test", CONTACT),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(where_(&o), [("freemail", "/email")]);
    assert_eq!(o.facts[0].actual, "gmail.com");

    // Every other check still applies: not on the page is still a FAIL.
    let o = check(
        &w,
        claim("invented@gmail.com", "https://acme.test", CONTACT),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("freemail", "/email"), ("source", "/email")]);
}

#[tokio::test]
async fn a_session_freemail_list_adds_providers() {
    let w = world_with(
        FakeFetcher::new().html(CONTACT, "acme@mailbox.test"),
        FakeResolver::new().with_mx("mailbox.test"),
        json!({"freemail": ["mailbox.test"]}),
    );
    let o = check(&w, claim("acme@mailbox.test", "https://acme.test", CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Review);
    assert_eq!(where_(&o), [("freemail", "/email")]);
}

#[tokio::test]
async fn an_address_at_another_domain_fails_the_domain_match() {
    for (email, domain) in [
        ("info@other.test", "other.test"),
        ("info@acme.test.evil.test", "acme.test.evil.test"),
        ("info@notacme.test", "notacme.test"),
    ] {
        let w = world(
            FakeFetcher::new().html(CONTACT, email),
            FakeResolver::new().with_mx(domain),
        );
        let o = check(&w, claim(email, "https://www.acme.test", CONTACT)).await;
        assert_eq!(o.verdict, Verdict::Fail, "{email}");
        assert_eq!(where_(&o), [("domain", "/email")], "{email}");
        assert_eq!(
            o.facts[0].expected,
            "an address at acme.test or a subdomain of it"
        );
        assert_eq!(o.facts[0].actual, domain);
    }
}

#[tokio::test]
async fn an_address_at_a_subdomain_of_the_site_passes() {
    let w = world(
        FakeFetcher::new().html("https://www.acme.co.kr/contact", "sales@mail.acme.co.kr"),
        FakeResolver::new().with_mx("mail.acme.co.kr"),
    );
    let o = check(
        &w,
        claim(
            "sales@mail.acme.co.kr",
            "https://www.acme.co.kr",
            "https://www.acme.co.kr/contact",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
}

#[tokio::test]
async fn a_site_that_is_no_registrable_domain_fails() {
    let w = acme();
    for site in ["http://203.0.113.5/", "https://co.kr/"] {
        let o = check(&w, claim("info@acme.test", site, CONTACT)).await;
        assert_eq!(o.verdict, Verdict::Fail, "{site}");
        assert_eq!(where_(&o), [("domain", "/site")], "{site}");
    }
}

#[tokio::test]
async fn every_mx_answer_has_its_verdict_and_evidence() {
    for (answer, verdict, label, says) in [
        (
            MailAnswer::NullMx,
            Verdict::Fail,
            "null_mx",
            "null MX (RFC 7505)",
        ),
        (
            MailAnswer::NoDomain,
            Verdict::Fail,
            "nxdomain",
            "does not exist (NXDOMAIN)",
        ),
        (
            MailAnswer::NoMailHost,
            Verdict::Fail,
            "no_mail_host",
            "neither MX nor address",
        ),
        (
            MailAnswer::AddressOnly(vec!["192.0.2.1".parse().unwrap()]),
            Verdict::Review,
            "address_only",
            "implicit MX",
        ),
        (
            MailAnswer::Unavailable("no answer within 5000 ms".into()),
            Verdict::Review,
            "unavailable",
            "no answer within 5000 ms",
        ),
    ] {
        let w = world(
            FakeFetcher::new().html(CONTACT, "info@acme.test"),
            FakeResolver::new().mail("acme.test", answer.clone()),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, verdict, "{answer:?}");
        assert_eq!(where_(&o), [("mx", "/email")]);
        assert!(o.facts[0].actual.contains(says), "{}", o.facts[0].actual);
        assert_eq!(
            o.facts[0].unanswered,
            label == "unavailable",
            "only a DNS that did not answer is no answer: {answer:?}"
        );
        assert_eq!(evidence(&o, "mx")["answer"], label);
    }
    let w = world(
        FakeFetcher::new().html(CONTACT, "info@acme.test"),
        FakeResolver::new().mail(
            "acme.test",
            MailAnswer::Mx(vec![
                MxHost {
                    preference: 5,
                    exchange: "a.mx.test".into(),
                },
                MxHost {
                    preference: 9,
                    exchange: "b.mx.test".into(),
                },
            ]),
        ),
    );
    let o = check(&w, honest()).await;
    assert_eq!(
        evidence(&o, "mx")["hosts"],
        json!(["5 a.mx.test", "9 b.mx.test"])
    );
}

#[tokio::test]
async fn every_fact_comes_back_at_once_in_check_order() {
    let w = world(
        FakeFetcher::new().html("https://directory.test/x", "someone@else.test"),
        FakeResolver::new(),
    );
    let o = check(
        &w,
        claim(
            "info@gone.test",
            "https://acme.test",
            "https://directory.test/x",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(
        where_(&o),
        [
            ("domain", "/email"),
            ("domain", "/source"),
            ("source", "/email"),
            ("mx", "/email")
        ]
    );
    assert_eq!(o.evidence.len(), 2);
}

#[tokio::test]
async fn a_page_cited_by_many_quests_is_fetched_once_per_session() {
    let w = acme();
    for _ in 0..5 {
        assert_eq!(check(&w, honest()).await.verdict, Verdict::Pass);
    }
    assert_eq!(w.fetcher.calls(), [CONTACT]);
    // Another session's gate has its own cache.
    let other = EmailGate::from_params(
        &Map::new(),
        &EmailWorld::new(w.fetcher.clone(), w.resolver.clone()),
    )
    .unwrap();
    other
        .check(&json!({}), &honest(), &SessionView::alone())
        .await;
    assert_eq!(w.fetcher.calls().len(), 2);
}

#[tokio::test]
async fn the_email_domain_is_compared_and_looked_up_in_lower_case() {
    let w = world(
        FakeFetcher::new().html(CONTACT, "info@Mail.Acme.test"),
        FakeResolver::new().with_mx("mail.acme.test"),
    );
    let o = check(
        &w,
        claim("info@Mail.Acme.test", "https://acme.test", CONTACT),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    assert_eq!(w.resolver.calls(), ["MX mail.acme.test"]);
}

#[test]
fn bad_parameters_are_refused_with_the_field_named() {
    let world = EmailWorld::new(Arc::new(FakeFetcher::new()), Arc::new(FakeResolver::new()));
    let err = |p: Value| {
        EmailGate::from_params(p.as_object().unwrap(), &world)
            .err()
            .unwrap()
    };
    assert_eq!(err(json!({"freemail": ["nodot"]})).field, "freemail[0]");
    assert_eq!(
        err(json!({"blacklist": ["ok.test", "a b"]})).field,
        "blacklist[1]"
    );
    assert_eq!(err(json!({"freemail": "gmail.com"})).field, "");
    assert_eq!(err(json!({"schema": {}})).field, "");
}

#[tokio::test]
async fn an_address_another_quest_holds_goes_to_review_naming_that_quest() {
    let w = acme();
    let mut session = SessionView::default();
    session.holders.insert(
        "email".into(),
        vec!["Acme Corp".into(), "Acme Holdings".into()],
    );
    assert_eq!(w.gate.unique_fields(), ["email"]);
    let o = check_in(&w, honest(), &session).await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(where_(&o), [("duplicate", "/email")]);
    assert_eq!(
        o.facts[0].actual,
        "info@acme.test is also the result for \"Acme Corp\", \"Acme Holdings\""
    );
    assert_eq!(
        evidence(&o, "duplicate"),
        &json!({"check": "duplicate", "email": "info@acme.test", "quests": ["Acme Corp", "Acme Holdings"]})
    );
    // Every other check still runs: a wrong claim is still a FAIL.
    let o = check_in(
        &w,
        claim("ceo@acme.test", "https://acme.test", CONTACT),
        &session,
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("source", "/email"), ("duplicate", "/email")]);
    // A holder of another field is no duplicate; alone, the claim passes.
    let mut other = SessionView::default();
    other.holders.insert("site".into(), vec!["Beta".into()]);
    assert_eq!(check_in(&w, honest(), &other).await.verdict, Verdict::Pass);
}

mod company;

/// The cited page: where it is, what it says, and what its server answers.
mod source_page;
