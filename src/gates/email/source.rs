//! Check 5, the source page: the cited page is fetched, its status and type
//! judged, the address looked for where a visitor sees it, and a URL that
//! could echo the address probed. Failures of the world to answer are told
//! apart from the world contradicting the claim.

use super::*;

/// Whether a content type is one the gate reads as a web page (none given: yes).
pub(super) fn readable(content_type: Option<&str>) -> bool {
    content_type.is_none_or(|t| {
        let t = t.to_ascii_lowercase();
        t.starts_with("text/") || t.contains("html") || t.contains("xml") || t.contains("json")
    })
}

/// A fact about the source URL or what answered it.
pub(super) fn source_fact(expected: &str, actual: impl Into<String>, hint: &str) -> Fact {
    Fact::new("source", "/source", expected, actual, hint)
}

pub(super) const NOT_ECHOED: &str = "a page that does not carry the address in its own URL";
pub(super) const ECHO_PROVES_NOTHING: &str = "a page that repeats its URL proves nothing; cite the page where the company publishes the address";

/// What a failed fetch says: the world contradicting the claim is FAIL, the
/// world not answering is REVIEW.
pub(super) fn fetch_failure(findings: &mut Findings, error: &FetchError) {
    let actual = error.to_string();
    match error {
        FetchError::Refused(_) => findings.fail(source_fact(
            "a page on a public web address",
            actual,
            "the source must be a public web page; cite the company's public contact page",
        )),
        FetchError::NoSuchHost(_) => findings.fail(source_fact(
            "a page that exists",
            actual,
            "the host does not exist; check the URL",
        )),
        FetchError::TooManyRedirects(_) => findings.fail(source_fact(
            "a page that loads",
            actual,
            "open the URL in a browser and cite the page it ends on",
        )),
        // Nothing listens on a port the agent picked: no page can be there.
        FetchError::NoConnection { port: Some(_), .. } => findings.fail(source_fact(
            "a page that answers at the site's own address",
            actual,
            "company pages are served on the standard web ports; cite the page at the address a browser shows for it",
        )),
        FetchError::NoConnection { port: None, .. }
        | FetchError::Timeout(_)
        | FetchError::Unreachable(_) => findings.review(
            source_fact(
                "a page that answers",
                actual,
                "the page could not be checked now; if the URL is right there is nothing to fix, a person will look",
            )
            .no_answer(),
        ),
    }
}

/// Parses a page on the blocking pool: a parse of a large page is CPU work
/// that must not hold up the requests the runtime serves.
pub(super) async fn read_page(body: &Arc<[u8]>) -> PageText {
    let body = body.clone();
    tokio::task::spawn_blocking(move || PageText::from_body(&body))
        .await
        .unwrap_or_else(|_| PageText::from_body(b""))
}

/// The origin's home page of a URL (`https://acme.test/`), unless the URL is it.
pub(super) fn home_of(url: &str) -> Option<String> {
    let url = Url::parse(url).ok()?;
    let mut home = url.clone();
    home.set_path("/");
    home.set_query(None);
    home.set_fragment(None);
    (home != url).then(|| home.to_string())
}

impl EmailGate {
    /// Check 5: fetch the source and find the address on it. Returns the evidence.
    pub(super) async fn source_check(
        &self,
        findings: &mut Findings,
        screen: &Screen<'_>,
        fetched: Option<Result<Page, FetchError>>,
        read: &mut Option<ReadPage>,
    ) -> Value {
        let Some(url) = screen.source else {
            return json!({"check": "source", "skipped": "no valid source URL"});
        };
        if let Some(e) = screen.email
            && echo::carried(url, e) == Carried::Whole
        {
            findings.fail(source_fact(NOT_ECHOED, url.as_str(), ECHO_PROVES_NOTHING));
        }
        let fetched = match fetched {
            Some(fetched) => fetched,
            None if screen.source_blacklisted.is_some() => {
                return json!({"check": "source", "url": url.as_str(), "skipped": "the source is a placeholder"});
            }
            None => {
                let port = screen.foreign_port.unwrap_or_default();
                let site_port = screen
                    .site
                    .map(|s| s.port_or_known_default().unwrap_or_default().to_string())
                    .unwrap_or_else(|| "its scheme's standard one".into());
                findings.fail(source_fact(
                    "a page served where the site is",
                    format!("{url} asks for port {port}, the site's port is {site_port}"),
                    "company pages are served on the site's own port; cite the page at the address a browser shows for it",
                ));
                return json!({"check": "source", "url": url.as_str(), "skipped": "the source asks for another port than the site's"});
            }
        };
        let page = match fetched {
            Ok(page) => page,
            Err(error) => {
                fetch_failure(findings, &error);
                return json!({"check": "source", "url": url.as_str(), "error": error.to_string()});
            }
        };
        let text = read_page(&page.body).await;
        let addresses = text.addresses(LISTED_ADDRESSES);
        let mut evidence = json!({
            "check": "source",
            "url": page.url,
            "final_url": page.final_url,
            "status": page.status,
            "content_type": page.content_type,
            "sha256": hex::encode(Sha256::digest(&page.body)),
            "bytes": page.body.len(),
            "truncated": page.truncated,
            "fetched_at": page.fetched_at.to_rfc3339(),
            "addresses": addresses,
        });
        let landed = Url::parse(&page.final_url).ok();
        if let (Some(e), Some(landed)) = (screen.email, &landed)
            && landed != url
            && echo::carried(landed, e) == Carried::Whole
        {
            findings.fail(source_fact(
                NOT_ECHOED,
                format!("redirected to {landed}"),
                ECHO_PROVES_NOTHING,
            ));
        }
        if !(200..=299).contains(&page.status) {
            self.status_check(findings, &page, &mut evidence).await;
            return evidence;
        }
        if !readable(page.content_type.as_deref()) {
            findings.fail(source_fact(
                "a web page (HTML or text)",
                format!(
                    "{}, not a web page",
                    page.content_type.as_deref().unwrap_or_default()
                ),
                "the gate reads web pages, not images, files or documents; cite the HTML page \
                 where the address is shown (often a contact or imprint page)",
            ));
            evidence["found"] = json!("not_read");
            return evidence;
        }
        if text.too_deep() {
            findings.fail(source_fact(
                "a web page a browser shows as written",
                format!(
                    "a page whose elements nest more than {} levels deep",
                    html::MAX_DEPTH
                ),
                "no browser shows such a page as written, so the gate does not read it; cite the \
                 page where the company shows the address (often a contact or imprint page)",
            ));
            evidence["found"] = json!("not_read");
            return evidence;
        }
        if let Some(email) = screen.email {
            let found = find_check(findings, email, &page, &text, &addresses, &mut evidence);
            let echo_from = [Some(url), landed.as_ref()]
                .into_iter()
                .flatten()
                .find(|u| echo::carried(u, email) == Carried::LocalPart);
            if let Some(echo_from) = echo_from.filter(|_| found) {
                evidence["echo_probe"] = self.echo_probe(findings, email, echo_from).await;
            }
        }
        *read = Some(ReadPage {
            url: page.final_url.clone(),
            text,
        });
        evidence
    }

    /// A page that answered something other than 2xx. 403 is told apart by
    /// asking the site's home page: a site that turns the gate away everywhere
    /// is REVIEW, a page that is closed while the site answers is FAIL.
    async fn status_check(&self, findings: &mut Findings, page: &Page, evidence: &mut Value) {
        let status = format!("HTTP {}", page.status);
        let unwell = "the page could not be read now; if the URL is right there is nothing to fix, a person will look";
        match page.status {
            404 | 410 => findings.fail(source_fact(
                "a page that exists (HTTP 200)",
                status,
                "the page is gone; cite the page where the address is published now",
            )),
            401 => findings.fail(source_fact(
                "a public page (HTTP 200)",
                status,
                "the page asks for a login, so visitors cannot read it; cite the public page that shows the address",
            )),
            403 => {
                let home = home_of(&page.final_url);
                let answered = match &home {
                    Some(home) => match self.fetcher.fetch(home).await {
                        Ok(answer) => {
                            evidence["home"] = json!({"url": home, "status": answer.status});
                            Some(answer.status)
                        }
                        Err(e) => {
                            evidence["home"] = json!({"url": home, "error": e.to_string()});
                            None
                        }
                    },
                    None => None,
                };
                match (home, answered) {
                    (Some(home), Some(code @ (200..=399 | 404 | 410))) => findings.fail(source_fact(
                        "a public page (HTTP 200)",
                        format!("{status}, while the site's home page {home} answers HTTP {code}"),
                        "the site serves visitors but refuses this page, so it is not public; cite the public page that shows the address",
                    )),
                    _ => findings.review(
                        source_fact(
                            "a page that answers HTTP 200",
                            format!("{status}, and the site's home page refuses the gate too"),
                            "the site turns automated readers away; if the URL is right there is nothing to fix, a person will look",
                        )
                        .no_answer(),
                    ),
                }
            }
            code if is_unwell(code) => findings.review(
                source_fact("a page that answers HTTP 200", status, unwell).no_answer(),
            ),
            _ => findings.fail(source_fact(
                "a page that answers HTTP 200",
                status,
                "the server serves no page at this URL; open it in a browser and cite the page it shows",
            )),
        }
    }

    /// The URL carries the address's local part: fetch the same URL with it
    /// replaced by a made-up one; a page that then shows the made-up address
    /// repeats its URL. Returns the probe's evidence.
    async fn echo_probe(&self, findings: &mut Findings, email: &Email, url: &Url) -> Value {
        let untestable = |actual: String| {
            source_fact(
                NOT_ECHOED,
                actual,
                "the URL holds the address's local part and the gate could not test whether the page repeats it; a person will look",
            )
        };
        let Some((probe, made_up)) = echo::probe(url, email) else {
            findings.review(untestable(url.to_string()));
            return json!({"url": Value::Null, "error": "the local part is encoded too deeply to replace"});
        };
        match self.fetcher.fetch(probe.as_str()).await {
            Ok(page) => {
                let echoed = read_page(&page.body).await.find(&made_up) != Found::Absent;
                if echoed {
                    findings.fail(source_fact(
                        NOT_ECHOED,
                        format!(
                            "{probe} shows {}: the page repeats its URL",
                            made_up.address()
                        ),
                        ECHO_PROVES_NOTHING,
                    ));
                }
                json!({"url": probe.as_str(), "status": page.status, "echoed": echoed})
            }
            Err(error) if error.is_no_answer() => {
                findings.review(untestable(format!("{probe}: {error}")).no_answer());
                json!({"url": probe.as_str(), "error": error.to_string()})
            }
            // No page at the made-up URL: nothing repeats it.
            Err(error) => {
                json!({"url": probe.as_str(), "error": error.to_string(), "echoed": false})
            }
        }
    }
}

/// Finds the address on a readable 2xx page, adds the facts and the `found`
/// and `snippet` evidence. Returns whether the address was found in any form.
pub(super) fn find_check(
    findings: &mut Findings,
    email: &Email,
    page: &Page,
    text: &PageText,
    addresses: &[String],
    evidence: &mut Value,
) -> bool {
    let on_page = format!("{} written on {}", email.address(), page.url);
    let mut fact = |verdict: Verdict, actual: String, hint: String| {
        let fact = Fact::new("source", "/email", on_page.clone(), actual, hint);
        match verdict {
            Verdict::Fail => findings.fail(fact),
            _ => findings.review(fact),
        }
    };
    let confirm = "a person will confirm it; cite a page that shows the address if there is one";
    let (found, snippet) = match text.find(email) {
        Found::Exact { snippet } => ("exact", Some(snippet)),
        Found::OtherCase { written, snippet } => {
            fact(
                Verdict::Fail,
                format!("only {written}"),
                format!("the page writes the address as {written}; submit it exactly so"),
            );
            ("other_case", Some(snippet))
        }
        Found::InComment { snippet } => {
            fact(
                Verdict::Review,
                "only inside an HTML comment, which visitors do not see".into(),
                confirm.into(),
            );
            ("comment", Some(snippet))
        }
        Found::Hidden { snippet } => {
            fact(
                Verdict::Review,
                "only where visitors do not see it (a script, a style sheet, CDATA or an attribute value)".into(),
                confirm.into(),
            );
            ("hidden", Some(snippet))
        }
        Found::BetweenTags { snippet } => {
            fact(
                Verdict::Review,
                "only with HTML tags between its parts".into(),
                "a person will confirm it".into(),
            );
            ("between_tags", Some(snippet))
        }
        Found::Obfuscated { snippet } => {
            fact(
                Verdict::Review,
                format!("only an obfuscated form: {snippet}"),
                "a person will confirm it; if another page writes the address out, cite that one"
                    .into(),
            );
            ("obfuscated", Some(snippet))
        }
        Found::Absent if page.truncated => {
            fact(
                Verdict::Fail,
                format!(
                    "not in the first {} bytes of a longer page",
                    page.body.len()
                ),
                "the gate reads only the start of a very long page; cite a shorter page where \
                 the address is shown, such as the contact page"
                    .into(),
            );
            ("absent", None)
        }
        Found::Absent => {
            let hint = if addresses.is_empty() {
                "the page shows no email address at all; cite the page where the address is published (often a contact or imprint page)".to_owned()
            } else {
                format!(
                    "the page shows these addresses: {}. Submit the company's contact address from them, or cite the page where yours is published",
                    addresses.join(", ")
                )
            };
            fact(Verdict::Fail, "not on the page".into(), hint);
            ("absent", None)
        }
    };
    evidence["found"] = json!(found);
    evidence["snippet"] = json!(snippet);
    found != "absent"
}
