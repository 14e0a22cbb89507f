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
async fn a_source_off_the_site_goes_to_review() {
    let w = world(
        FakeFetcher::new().html("https://directory.test/acme", "Acme: info@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(
        &w,
        claim(
            "info@acme.test",
            "https://acme.test",
            "https://directory.test/acme",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(where_(&o), [("domain", "/source")]);
    assert_eq!(o.facts[0].actual, "directory.test");
}

#[tokio::test]
async fn a_source_that_redirects_off_the_site_goes_to_review() {
    let mut landed = page(CONTACT, 200, Some("text/html"), "info@acme.test");
    landed.final_url = "https://evil.test/page".into();
    let w = world(
        FakeFetcher::new().answer(CONTACT, Ok(landed)),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, honest()).await;
    assert_eq!(o.verdict, Verdict::Review);
    assert_eq!(where_(&o), [("domain", "/source")]);
    assert_eq!(o.facts[0].actual, "redirected to https://evil.test/page");
    assert_eq!(
        evidence(&o, "source")["final_url"],
        "https://evil.test/page"
    );
}

#[tokio::test]
async fn an_invented_address_fails_and_the_hint_lists_the_addresses_on_the_page() {
    let w = world(
        FakeFetcher::new().html(
            CONTACT,
            "<a href=\"mailto:sales@acme.test\">Sales</a> press&#64;acme.test",
        ),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, honest()).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("source", "/email")]);
    let fact = &o.facts[0];
    assert_eq!(
        fact.expected,
        format!("info@acme.test written on {CONTACT}")
    );
    assert_eq!(fact.actual, "not on the page");
    assert!(
        fact.hint.contains("sales@acme.test, press@acme.test"),
        "{}",
        fact.hint
    );
    assert_eq!(evidence(&o, "source")["found"], "absent");
    assert_eq!(evidence(&o, "source")["snippet"], Value::Null);
}

#[tokio::test]
async fn a_page_without_any_address_says_so() {
    let w = world(
        FakeFetcher::new().html(CONTACT, "<p>Call us</p>"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, honest()).await;
    assert!(
        o.facts[0].hint.contains("shows no email address at all"),
        "{}",
        o.facts[0].hint
    );
}

#[tokio::test]
async fn an_address_in_other_letter_case_fails_with_the_written_form() {
    let w = acme();
    let o = check(&w, claim("INFO@ACME.TEST", "https://acme.test", CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("source", "/email")]);
    assert_eq!(o.facts[0].actual, "only info@acme.test");
    assert_eq!(evidence(&o, "source")["found"], "other_case");
    assert_eq!(
        evidence(&o, "mx")["domain"],
        "acme.test",
        "the domain is compared in lower case"
    );
}

#[tokio::test]
async fn hidden_split_or_obfuscated_forms_go_to_review() {
    for (body, found, says) in [
        ("<p>x</p><!-- info@acme.test -->", "comment", "HTML comment"),
        ("<b>info</b>@<b>acme.test</b>", "between_tags", "HTML tags"),
        (
            "<p>x</p><script>mail('info@acme.test')</script>",
            "hidden",
            "visitors do not see",
        ),
        (
            "<input type=\"hidden\" value=\"info@acme.test\">",
            "hidden",
            "visitors do not see",
        ),
        (
            "info [at] acme.test",
            "obfuscated",
            "obfuscated form: info [at] acme.test",
        ),
        ("info(at)acme.test", "obfuscated", "obfuscated form"),
    ] {
        let w = world(
            FakeFetcher::new().html(CONTACT, body),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, Verdict::Review, "{body}");
        assert_eq!(where_(&o), [("source", "/email")], "{body}");
        assert!(
            o.facts[0].actual.contains(says),
            "{body}: {}",
            o.facts[0].actual
        );
        assert_eq!(evidence(&o, "source")["found"], found);
        assert!(evidence(&o, "source")["snippet"].is_string());
    }
}

#[tokio::test]
async fn a_source_url_that_carries_the_address_proves_nothing() {
    for source in [
        "https://acme.test/search?q=info@acme.test",
        "https://acme.test/search?q=info%40acme.test",
        "https://acme.test/search?q=info%2540acme.test",
        "https://acme.test/search?q=info%26%2364%3Bacme.test",
        "https://acme.test/echo/INFO@ACME.TEST",
    ] {
        let w = world(
            FakeFetcher::new().html(source, "info@acme.test"),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, claim("info@acme.test", "https://acme.test", source)).await;
        assert_eq!(o.verdict, Verdict::Fail, "{source}");
        assert_eq!(where_(&o), [("source", "/source")], "{source}");
        assert_eq!(o.facts[0].actual, source);
    }
    // The local part alone, or inside a longer word, is no echo.
    for source in [
        "https://acme.test/info/contact",
        "https://acme.test/information?x=acme.test",
    ] {
        let w = world(
            FakeFetcher::new().html(source, "info@acme.test"),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, claim("info@acme.test", "https://acme.test", source)).await;
        assert_eq!(o.verdict, Verdict::Pass, "{source}: {:?}", o.facts);
    }
}

#[tokio::test]
async fn a_redirect_whose_url_carries_the_address_proves_nothing() {
    // An on-site redirect, e.g. an open redirect to the site's own search page.
    let mut landed = page(
        CONTACT,
        200,
        Some("text/html"),
        "Results for info@acme.test",
    );
    landed.final_url = "https://acme.test/search?q=info%40acme.test".into();
    let w = world(
        FakeFetcher::new().answer(CONTACT, Ok(landed)),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, honest()).await;
    assert_eq!(o.verdict, Verdict::Fail, "{:?}", o.facts);
    assert_eq!(where_(&o), [("source", "/source")]);
    assert_eq!(
        o.facts[0].actual,
        "redirected to https://acme.test/search?q=info%40acme.test"
    );
}

/// The URL the gate asks to test whether `source` echoes `info`, and the address it would show.
fn probe_of(source: &str, email: &str) -> (String, String) {
    let (url, made_up) = echo::probe(
        &Url::parse(source).unwrap(),
        &address::parse_email(email).unwrap(),
    )
    .unwrap();
    (url.to_string(), made_up.address())
}

#[tokio::test]
async fn a_url_with_the_local_part_is_tested_for_echoing_it() {
    // A user directory or a query the page turns into an address: the same
    // URL with a made-up local part shows the made-up address.
    for source in [
        "https://acme.test/~info",
        "https://acme.test/search?user=info&host=acme.test",
        "https://info.acme.test/",
    ] {
        let (probe, made_up) = probe_of(source, "info@acme.test");
        let w = world(
            FakeFetcher::new()
                .html(source, "<p>Mail info@acme.test</p>")
                .html(&probe, &format!("<p>Mail {made_up}</p>")),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, claim("info@acme.test", "https://acme.test", source)).await;
        assert_eq!(o.verdict, Verdict::Fail, "{source}: {:?}", o.facts);
        assert_eq!(where_(&o), [("source", "/source")], "{source}");
        assert_eq!(
            o.facts[0].actual,
            format!("{probe} shows {made_up}: the page repeats its URL")
        );
        assert_eq!(
            evidence(&o, "source")["echo_probe"],
            json!({"url": probe, "status": 200, "echoed": true})
        );
    }
    // A page that does not repeat its URL passes: contact@ on /contact.
    let source = "https://acme.test/contact";
    let (probe, _) = probe_of(source, "contact@acme.test");
    let w = world(
        FakeFetcher::new().html(source, "contact@acme.test").answer(
            &probe,
            Ok(page(&probe, 404, Some("text/html"), "Not found: /q...")),
        ),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("contact@acme.test", "https://acme.test", source)).await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    assert_eq!(evidence(&o, "source")["echo_probe"]["echoed"], false);
    assert_eq!(w.fetcher.calls(), [source, probe.as_str()]);
    // No page at all at the made-up URL: nothing repeats it either.
    let w = world(
        FakeFetcher::new().html("https://acme.test/~info", "info@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(
        &w,
        claim(
            "info@acme.test",
            "https://acme.test",
            "https://acme.test/~info",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    // An address that is not on the page needs no test.
    let w = world(
        FakeFetcher::new().html("https://acme.test/~info", "sales@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    check(
        &w,
        claim(
            "info@acme.test",
            "https://acme.test",
            "https://acme.test/~info",
        ),
    )
    .await;
    assert_eq!(w.fetcher.calls(), ["https://acme.test/~info"]);
}

#[tokio::test]
async fn an_echo_the_gate_cannot_test_goes_to_review() {
    let source = "https://acme.test/~info";
    let (probe, _) = probe_of(source, "info@acme.test");
    let w = world(
        FakeFetcher::new().html(source, "info@acme.test").answer(
            &probe,
            Err(FetchError::Timeout(std::time::Duration::from_secs(15))),
        ),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("info@acme.test", "https://acme.test", source)).await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(where_(&o), [("source", "/source")]);
    assert!(
        o.facts[0].actual.starts_with(&probe),
        "{}",
        o.facts[0].actual
    );
    // Encoded too deeply to replace: untestable as well.
    let deep = "https://acme.test/%2569nfo";
    let w = world(
        FakeFetcher::new().html(deep, "info@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("info@acme.test", "https://acme.test", deep)).await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(o.facts[0].actual, deep);
}

#[tokio::test]
async fn fetch_failures_fail_when_the_world_contradicts_and_review_when_it_is_silent() {
    for (error, verdict, expected) in [
        (
            FetchError::Refused("http://10.0.0.1/: 10.0.0.1 is a private address".into()),
            Verdict::Fail,
            "a page on a public web address",
        ),
        (
            FetchError::NoSuchHost("acme.test".into()),
            Verdict::Fail,
            "a page that exists",
        ),
        (
            FetchError::TooManyRedirects(5),
            Verdict::Fail,
            "a page that loads",
        ),
        (
            FetchError::Timeout(std::time::Duration::from_millis(15000)),
            Verdict::Review,
            "a page that answers",
        ),
        (
            FetchError::NoConnection {
                port: None,
                reason: "connection refused".into(),
            },
            Verdict::Review,
            "a page that answers",
        ),
        (
            FetchError::Unreachable("the connection broke off before the page was read".into()),
            Verdict::Review,
            "a page that answers",
        ),
    ] {
        let w = world(
            FakeFetcher::new().answer(CONTACT, Err(error.clone())),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, verdict, "{error}");
        assert_eq!(where_(&o), [("source", "/source")]);
        assert_eq!(o.facts[0].expected, expected);
        assert_eq!(o.facts[0].actual, error.to_string());
        assert_eq!(
            evidence(&o, "source"),
            &json!({"check": "source", "url": CONTACT, "error": error.to_string()})
        );
    }
}

#[tokio::test]
async fn a_port_the_agent_picked_fails_instead_of_buying_a_review() {
    // Another port than the site's: not fetched at all.
    let w = acme();
    let o = check(
        &w,
        claim(
            "info@acme.test",
            "https://acme.test",
            "https://acme.test:9/contact",
        ),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail, "{:?}", o.facts);
    assert_eq!(where_(&o), [("source", "/source")]);
    assert_eq!(
        o.facts[0].actual,
        "https://acme.test:9/contact asks for port 9, the site's port is 443"
    );
    assert!(w.fetcher.calls().is_empty(), "{:?}", w.fetcher.calls());
    // The site's own port is fetched; nothing answering there is a FAIL too.
    let source = "http://acme.test:8080/contact";
    let refused = FetchError::NoConnection {
        port: Some(8080),
        reason: "connection refused".into(),
    };
    let w = world(
        FakeFetcher::new().answer(source, Err(refused.clone())),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(
        &w,
        claim("info@acme.test", "http://acme.test:8080/", source),
    )
    .await;
    assert_eq!(o.verdict, Verdict::Fail, "{:?}", o.facts);
    assert_eq!(o.facts[0].actual, refused.to_string());
    assert_eq!(
        o.facts[0].expected,
        "a page that answers at the site's own address"
    );
    // The scheme's standard port written out is no other port.
    let source = "https://acme.test:443/contact";
    let w = world(
        FakeFetcher::new().html("https://acme.test/contact", "info@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("info@acme.test", "https://acme.test", source)).await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
}

#[tokio::test]
async fn a_missing_page_fails_and_an_unwell_server_goes_to_review() {
    for (status, verdict) in [
        (404, Verdict::Fail),
        (410, Verdict::Fail),
        (401, Verdict::Fail),
        (400, Verdict::Fail),
        (405, Verdict::Fail),
        (300, Verdict::Fail),
        (408, Verdict::Review),
        (429, Verdict::Review),
        (500, Verdict::Review),
        (503, Verdict::Review),
    ] {
        let w = world(
            FakeFetcher::new().answer(
                CONTACT,
                Ok(page(CONTACT, status, Some("text/html"), "info@acme.test")),
            ),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, verdict, "{status}");
        assert_eq!(where_(&o), [("source", "/source")], "{status}");
        assert_eq!(o.facts[0].actual, format!("HTTP {status}"));
        assert_eq!(evidence(&o, "source")["status"], status);
        assert!(
            evidence(&o, "source").get("found").is_none(),
            "an error page is not searched"
        );
    }
}

#[tokio::test]
async fn a_forbidden_page_fails_unless_the_whole_site_turns_the_gate_away() {
    let forbidden = || Ok(page(CONTACT, 403, Some("text/html"), "Forbidden"));
    let home = "https://acme.test/";
    for (home_answer, verdict, says) in [
        (
            Ok(page(home, 200, Some("text/html"), "Welcome")),
            Verdict::Fail,
            "HTTP 403, while the site's home page https://acme.test/ answers HTTP 200",
        ),
        (
            Ok(page(home, 404, Some("text/html"), "nothing here")),
            Verdict::Fail,
            "answers HTTP 404",
        ),
        (
            Ok(page(home, 403, Some("text/html"), "Forbidden")),
            Verdict::Review,
            "HTTP 403, and the site's home page refuses the gate too",
        ),
        (
            Err(FetchError::Timeout(std::time::Duration::from_secs(15))),
            Verdict::Review,
            "refuses the gate too",
        ),
    ] {
        let w = world(
            FakeFetcher::new()
                .answer(CONTACT, forbidden())
                .answer(home, home_answer.clone()),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, verdict, "{home_answer:?}");
        assert_eq!(where_(&o), [("source", "/source")]);
        assert!(o.facts[0].actual.contains(says), "{}", o.facts[0].actual);
        assert_eq!(evidence(&o, "source")["home"]["url"], home);
    }
    // The home page itself forbidden: nothing else to ask.
    let w = world(
        FakeFetcher::new().answer(home, Ok(page(home, 403, Some("text/html"), "Forbidden"))),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("info@acme.test", "https://acme.test", home)).await;
    assert_eq!(o.verdict, Verdict::Review);
    assert_eq!(w.fetcher.calls(), [home]);
}

#[tokio::test]
async fn a_page_nested_deeper_than_any_browser_renders_fails_unread() {
    let deep = format!("{}<p>info@acme.test</p>", "<div>".repeat(100_000));
    let w = world(
        FakeFetcher::new().html(CONTACT, &deep),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, honest()).await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("source", "/source")]);
    assert!(
        o.facts[0].actual.contains("more than 512 levels"),
        "{:?}",
        o.facts[0]
    );
    assert_eq!(evidence(&o, "source")["found"], "not_read");
}

#[tokio::test]
async fn a_document_the_gate_cannot_read_or_a_page_too_long_fails_with_what_to_cite() {
    let mut long = page(CONTACT, 200, Some("text/html"), "sales@acme.test");
    long.truncated = true;
    let mut answers = vec![(
        long,
        "not in the first 15 bytes of a longer page".to_owned(),
    )];
    for kind in [
        "application/pdf",
        "image/png",
        "application/octet-stream",
        "application/zip",
        "font/woff2",
        "audio/mpeg",
        "video/mp4",
    ] {
        // Even bytes that hold the address are not a page a visitor reads.
        answers.push((
            page(CONTACT, 200, Some(kind), "info@acme.test"),
            format!("{kind}, not a web page"),
        ));
    }
    for (answer, says) in answers {
        let w = world(
            FakeFetcher::new().answer(CONTACT, Ok(answer)),
            FakeResolver::new().with_mx("acme.test"),
        );
        let o = check(&w, honest()).await;
        assert_eq!(o.verdict, Verdict::Fail, "{says}");
        assert_eq!(o.facts.len(), 1, "{says}: {:?}", o.facts);
        assert_eq!(o.facts[0].actual, says);
    }
    // Pages without a content type are read as text; a long page with the
    // address in what was read passes.
    let mut long = page(CONTACT, 200, Some("text/html"), "info@acme.test");
    long.truncated = true;
    for answer in [page(CONTACT, 200, None, "info@acme.test"), long] {
        let w = world(
            FakeFetcher::new().answer(CONTACT, Ok(answer)),
            FakeResolver::new().with_mx("acme.test"),
        );
        assert_eq!(check(&w, honest()).await.verdict, Verdict::Pass);
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
