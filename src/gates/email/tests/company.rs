//! Check 6: the site is tied to the company of the row.

use super::*;

const HOME: &str = "https://acme.test/";

fn acme_row(site: &str) -> Value {
    json!({"company": "Acme Co., Ltd.", "site": site})
}

async fn check_row(w: &World, input: Value, key: &str) -> GateOutcome {
    w.gate
        .check(&input, &honest(), &SessionView::of_key(key))
        .await
}

fn with_site_column(fetcher: FakeFetcher) -> World {
    world_with(
        fetcher,
        FakeResolver::new().with_mx("acme.test"),
        json!({"site_column": "site"}),
    )
}

fn contact_page(body: &str) -> FakeFetcher {
    FakeFetcher::new().html(CONTACT, body)
}

#[tokio::test]
async fn a_site_off_the_domain_the_row_gives_fails_naming_that_domain() {
    let w = with_site_column(contact_page("<h1>Acme</h1> info@acme.test"));
    for cell in ["acme.test", "https://www.acme.test/en", "info@acme.test"] {
        let o = check_row(&w, acme_row(cell), "").await;
        assert_eq!(o.verdict, Verdict::Pass, "{cell}: {:?}", o.facts);
        assert_eq!(evidence(&o, "company")["expected_domain"], "acme.test");
    }
    // The agent found a real address on a real site, but not the company's.
    let o = check_row(&w, acme_row("acme.co.kr"), "").await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("company", "/site")]);
    assert!(
        o.facts[0].expected.starts_with("a site on acme.co.kr"),
        "{:?}",
        o.facts[0]
    );
    assert_eq!(o.facts[0].actual, "acme.test");
    assert!(o.facts[0].hint.contains("acme.co.kr"));
}

#[tokio::test]
async fn an_empty_site_cell_checks_nothing_and_an_unreadable_one_goes_to_review() {
    let w = with_site_column(contact_page("info@acme.test"));
    let o = check_row(&w, acme_row(""), "").await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    assert_eq!(evidence(&o, "company")["expected_domain"], Value::Null);
    let o = check_row(&w, json!({"company": "Acme"}), "").await;
    assert_eq!(
        o.verdict,
        Verdict::Pass,
        "a row without the cell: {:?}",
        o.facts
    );
    let o = check_row(&w, acme_row("see brochure"), "").await;
    assert_eq!(o.verdict, Verdict::Review);
    assert_eq!(where_(&o), [("company", "/site")]);
    assert!(
        o.facts[0].actual.contains("`see brochure`"),
        "{:?}",
        o.facts[0]
    );
}

#[tokio::test]
async fn the_source_page_naming_the_company_is_enough() {
    let w = acme();
    let o = check_row(&w, json!({}), "ACME Co., Ltd.").await;
    assert_eq!(
        o.verdict,
        Verdict::Review,
        "the contact page says only 'Contact'"
    );
    let w = world(
        contact_page("<title>Acmé — contact</title><p>info@acme.test</p>"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = check_row(&w, json!({}), "ACME Co., Ltd.").await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    let company = evidence(&o, "company");
    assert_eq!(company["named_on"], CONTACT);
    assert_eq!(company["words"], json!(["acme"]));
    assert_eq!(w.fetcher.calls(), [CONTACT], "the home page is not asked");
}

#[tokio::test]
async fn otherwise_the_home_page_must_name_it_or_a_person_looks() {
    let fetcher = contact_page("<p>info@acme.test</p>").html(HOME, "<h1>주식회사 에이크미</h1>");
    let w = world(fetcher, FakeResolver::new().with_mx("acme.test"));
    let o = check(&w, claim("info@acme.test", HOME, CONTACT)).await;
    assert_eq!(o.verdict, Verdict::Pass, "no key, no name check");
    let o = w
        .gate
        .check(
            &json!({}),
            &claim("info@acme.test", HOME, CONTACT),
            &SessionView::of_key("(주)에이크미"),
        )
        .await;
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.facts);
    assert_eq!(evidence(&o, "company")["named_on"], HOME);

    let o = w
        .gate
        .check(
            &json!({}),
            &claim("info@acme.test", HOME, CONTACT),
            &SessionView::of_key("Beta Labs"),
        )
        .await;
    assert_eq!(o.verdict, Verdict::Review);
    assert_eq!(where_(&o), [("company", "/source")]);
    assert_eq!(
        o.facts[0].expected,
        "a page of the site that names Beta Labs"
    );
    assert_eq!(
        o.facts[0].actual,
        format!("neither {CONTACT} nor the home page {HOME} names Beta Labs")
    );
    assert!(!o.facts[0].unanswered, "the home page answered");
    // A home page that is not there names nothing either; one that gives no
    // answer leaves the question open.
    for (home, unanswered) in [
        (None, false),
        (
            Some(Err(FetchError::Timeout(std::time::Duration::from_secs(15)))),
            true,
        ),
        (Some(Ok(page(HOME, 503, Some("text/html"), "busy"))), true),
    ] {
        let mut fetcher = contact_page("<p>info@acme.test</p>");
        if let Some(answer) = home.clone() {
            fetcher = fetcher.answer(HOME, answer);
        }
        let w = world(fetcher, FakeResolver::new().with_mx("acme.test"));
        let o = w
            .gate
            .check(
                &json!({}),
                &claim("info@acme.test", HOME, CONTACT),
                &SessionView::of_key("Acme"),
            )
            .await;
        assert_eq!(o.verdict, Verdict::Review, "{home:?}");
        assert_eq!(where_(&o), [("company", "/source")], "{home:?}");
        assert_eq!(o.facts[0].unanswered, unanswered, "{home:?}");
    }
}

#[tokio::test]
async fn a_claim_that_fails_already_costs_no_request_for_the_home_page() {
    let w = world(
        contact_page("<p>sales@acme.test</p>"),
        FakeResolver::new().with_mx("acme.test"),
    );
    let o = w
        .gate
        .check(
            &json!({}),
            &claim("info@acme.test", HOME, CONTACT),
            &SessionView::of_key("Beta"),
        )
        .await;
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(where_(&o), [("source", "/email")]);
    assert_eq!(w.fetcher.calls(), [CONTACT]);
}

#[test]
fn the_site_column_is_a_column_the_scan_must_have() {
    let w = with_site_column(FakeFetcher::new());
    assert_eq!(w.gate.input_columns(), ["site"]);
    assert!(acme().gate.input_columns().is_empty());
}
