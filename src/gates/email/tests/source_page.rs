//! The email gate and the page an agent cites as its source: off-site and
//! redirected sources, invented or hidden addresses, URLs that echo the
//! address, fetch failures and pages the gate cannot read.

use super::*;

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
    assert!(o.facts[0].unanswered, "the probe got no answer");
    // Encoded too deeply to replace: untestable as well.
    let deep = "https://acme.test/%2569nfo";
    let w = world(
        FakeFetcher::new().html(deep, "info@acme.test"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check(&w, claim("info@acme.test", "https://acme.test", deep)).await;
    assert_eq!(o.verdict, Verdict::Review, "{:?}", o.facts);
    assert_eq!(o.facts[0].actual, deep);
    assert!(
        !o.facts[0].unanswered,
        "nothing was asked: the gate itself could not test it"
    );
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
            o.facts[0].unanswered,
            verdict == Verdict::Review,
            "only silence is marked as no answer: {error}"
        );
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
        assert_eq!(
            o.facts[0].unanswered,
            verdict == Verdict::Review,
            "{status}"
        );
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
        assert_eq!(
            o.facts[0].unanswered,
            verdict == Verdict::Review,
            "a site that turns the gate away everywhere gave no answer"
        );
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
