//! Reading a fetched page for addresses: HTML entities decoded, `mailto:`
//! links (also percent-encoded) and Cloudflare's email protection read,
//! comments kept apart, and obfuscated forms (`info [at] acme.co.kr`) told
//! apart from the address written out.
//!
//! An address counts only as a whole token: `o@acme.test` is not found in
//! `info@acme.test`, nor `info@acme.test` in `info@acme.test.evil.test`.

use std::sync::LazyLock;

use percent_encoding::percent_decode_str;
use regex::Regex;

use super::address::Email;

/// Characters of a local part as this gate accepts them.
fn is_local_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')
}

static COMMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?s)<!--.*?(?:-->|\z)").unwrap());
static TAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<[^>]*>").unwrap());
static MAILTO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)mailto:([^"'<>\s?]+)"#).unwrap());
static CFEMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(?:data-cfemail="|/cdn-cgi/l/email-protection#)([0-9a-f]{4,})"#).unwrap()
});
static ADDRESS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")
        .unwrap()
});
static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").unwrap());
/// Characters a browser does not show: zero-width spaces and joiners, the
/// word joiner, the byte order mark and the soft hyphen.
static INVISIBLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("[\u{200B}-\u{200D}\u{2060}\u{FEFF}\u{00AD}]").unwrap());

/// Endings that make an `x@y.png` token a file name, not an address.
const FILE_ENDINGS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "svg", "webp", "css", "js", "ico",
];

/// How the claimed address appears on a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Written out (in text, a `mailto:` link or decoded email protection).
    Exact {
        snippet: String,
    },
    /// Written out, but its local part in other letter case.
    OtherCase {
        written: String,
        snippet: String,
    },
    /// Only inside an HTML comment, which no visitor sees.
    InComment {
        snippet: String,
    },
    /// Only once the HTML tags between its parts are removed.
    BetweenTags {
        snippet: String,
    },
    /// Only in an obfuscated form such as `info [at] acme.co.kr`.
    Obfuscated {
        snippet: String,
    },
    Absent,
}

/// The text of a page, prepared for searching.
#[derive(Debug)]
pub struct PageText {
    /// Entity-decoded HTML without comments, followed by the addresses of
    /// `mailto:` links and of Cloudflare email protection, one a line.
    main: String,
    /// Entity-decoded comments.
    comments: String,
    /// `main` with the tags removed.
    stripped: String,
}

impl PageText {
    /// Prepares a page body (any encoding that keeps ASCII as ASCII).
    pub fn from_body(body: &[u8]) -> PageText {
        let raw = String::from_utf8_lossy(body);
        let comments: Vec<&str> = COMMENT.find_iter(&raw).map(|m| m.as_str()).collect();
        let without_comments = COMMENT.replace_all(&raw, " ");
        let mut main = visible(&without_comments);
        let mut extra = String::new();
        for link in MAILTO.captures_iter(&main) {
            extra.push('\n');
            extra.push_str(&percent_decode_str(&link[1]).decode_utf8_lossy());
        }
        for protected in CFEMAIL.captures_iter(&main) {
            if let Some(address) = decode_cfemail(&protected[1]) {
                extra.push('\n');
                extra.push_str(&address);
            }
        }
        main.push_str(&extra);
        PageText {
            main,
            comments: visible(&comments.join("\n")),
            stripped: visible(&TAG.replace_all(&without_comments, "")),
        }
    }

    /// Where and how `email` appears.
    pub fn find(&self, email: &Email) -> Found {
        let hits = occurrences(&self.main, email);
        if let Some(hit) = hits.iter().find(|h| h.local == email.local) {
            return Found::Exact {
                snippet: snippet(&self.main, hit.start, hit.end),
            };
        }
        if let Some(hit) = hits
            .iter()
            .find(|h| h.local.eq_ignore_ascii_case(&email.local))
        {
            return Found::OtherCase {
                written: format!("{}{}", hit.local, &self.main[hit.at..hit.end]),
                snippet: snippet(&self.main, hit.start, hit.end),
            };
        }
        let same = |h: &&Hit| h.local.eq_ignore_ascii_case(&email.local);
        if let Some(hit) = occurrences(&self.comments, email).iter().find(same) {
            return Found::InComment {
                snippet: snippet(&self.comments, hit.start, hit.end),
            };
        }
        if let Some(hit) = occurrences(&self.stripped, email).iter().find(same) {
            return Found::BetweenTags {
                snippet: snippet(&self.stripped, hit.start, hit.end),
            };
        }
        let obfuscated = obfuscation_pattern(email);
        for text in [&self.main, &self.stripped] {
            if let Some(m) = obfuscated.find(text) {
                return Found::Obfuscated {
                    snippet: snippet(text, m.start(), m.end()),
                };
            }
        }
        Found::Absent
    }

    /// The distinct addresses written out on the page, in page order (at most `limit`).
    pub fn addresses(&self, limit: usize) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for m in ADDRESS.find_iter(&self.main) {
            let address = m.as_str().trim_start_matches('.');
            let ending = address
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            if FILE_ENDINGS.contains(&ending.as_str())
                || seen.iter().any(|s| s.eq_ignore_ascii_case(address))
            {
                continue;
            }
            seen.push(address.to_owned());
            if seen.len() == limit {
                break;
            }
        }
        seen
    }
}

/// One place where `@domain` stands with a whole address around it.
struct Hit {
    /// Start of the local part.
    start: usize,
    /// Position of the `@`.
    at: usize,
    end: usize,
    local: String,
}

/// Every whole-token occurrence of an address at `email`'s domain (ASCII or
/// Unicode form, any letter case), with the local part as written.
fn occurrences(text: &str, email: &Email) -> Vec<Hit> {
    let lower = text.to_ascii_lowercase(); // same byte offsets as `text`
    let mut hits = Vec::new();
    let forms = std::iter::once(email.domain.as_str()).chain(email.unicode_domain.as_deref());
    for domain in forms {
        let needle = format!("@{domain}");
        for (at, _) in lower.match_indices(&needle) {
            let end = at + needle.len();
            let mut after = text[end..].chars();
            let ends_here = match after.next() {
                None => true,
                Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_' => false,
                Some('.') => !after.next().is_some_and(|c| c.is_ascii_alphanumeric()),
                Some(_) => true,
            };
            if !ends_here {
                continue;
            }
            let start = text[..at]
                .char_indices()
                .rev()
                .take_while(|(_, c)| is_local_char(*c))
                .last()
                .map_or(at, |(i, _)| i);
            let local = text[start..at].trim_start_matches('.');
            if !local.is_empty() {
                hits.push(Hit {
                    start: at - local.len(),
                    at,
                    end,
                    local: local.to_owned(),
                });
            }
        }
    }
    hits
}

/// A pattern for `email` written with `[at]`, `(at)`, ` at `, `＠`, spaces
/// around `@`, and the same family for the dots of the domain.
fn obfuscation_pattern(email: &Email) -> Regex {
    const AT: &str = r"\s*(?:\[\s*at\s*\]|\(\s*at\s*\)|\{\s*at\s*\}|<\s*at\s*>|\s+at\s+|＠|@)\s*";
    const DOT: &str =
        r"\s*(?:\[\s*dot\s*\]|\(\s*dot\s*\)|\{\s*dot\s*\}|<\s*dot\s*>|\s+dot\s+|．|\.)\s*";
    let domain = email
        .domain
        .split('.')
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join(DOT);
    let pattern = format!(
        r"(?i)(?:^|[^A-Za-z0-9._+-]){}{AT}{domain}(?:$|[^A-Za-z0-9.\-]|\.(?:$|[^A-Za-z0-9]))",
        regex::escape(&email.local)
    );
    Regex::new(&pattern).expect("an escaped address makes a valid pattern")
}

/// HTML text as a reader sees its characters: entities decoded, invisible characters gone.
fn visible(html: &str) -> String {
    let decoded = html_escape::decode_html_entities(html);
    INVISIBLE.replace_all(&decoded, "").into_owned()
}

/// Cloudflare's email protection: the first byte is a key XORed into the rest.
fn decode_cfemail(hex_text: &str) -> Option<String> {
    let bytes = hex::decode(hex_text).ok()?;
    let (key, rest) = bytes.split_first()?;
    String::from_utf8(rest.iter().map(|b| b ^ key).collect()).ok()
}

/// Up to 80 characters either side of `start..end`, whitespace collapsed.
pub fn snippet(text: &str, start: usize, end: usize) -> String {
    let from = text[..start]
        .char_indices()
        .rev()
        .nth(79)
        .map_or(0, |(i, _)| i);
    let to = text[end..]
        .char_indices()
        .nth(80)
        .map_or(text.len(), |(i, _)| end + i);
    WHITESPACE
        .replace_all(text[from..to].trim(), " ")
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::email::address::parse_email;

    fn find(html: &str, email: &str) -> Found {
        PageText::from_body(html.as_bytes()).find(&parse_email(email).unwrap())
    }

    fn is_exact(found: &Found) -> bool {
        matches!(found, Found::Exact { .. })
    }

    #[test]
    fn a_written_out_address_is_found_with_a_snippet() {
        let found = find(
            "<p>Write to   info@acme.test\nfor offers</p>",
            "info@acme.test",
        );
        assert_eq!(
            found,
            Found::Exact {
                snippet: "<p>Write to info@acme.test for offers</p>".into()
            }
        );
    }

    #[test]
    fn the_domain_is_compared_in_any_case_but_the_local_part_exactly() {
        assert!(is_exact(&find(
            "INFO@ACME.TEST? no: Info@ACME.Test",
            "Info@acme.test"
        )));
        assert_eq!(
            find("mail info@acme.test", "INFO@acme.test"),
            Found::OtherCase {
                written: "info@acme.test".into(),
                snippet: "mail info@acme.test".into()
            }
        );
    }

    #[test]
    fn entities_mailto_links_and_email_protection_are_decoded() {
        assert!(is_exact(&find("info&#64;acme&#46;test", "info@acme.test")));
        assert!(is_exact(&find("info&#x40;acme.test", "info@acme.test")));
        assert!(is_exact(&find(
            "info&commat;acme&period;test",
            "info@acme.test"
        )));
        assert!(is_exact(&find(
            "<a href=\"mailto:sales%40acme.test?subject=hi\">Write us</a>",
            "sales@acme.test"
        )));
        assert!(is_exact(&find(
            "<a href=\"MAILTO:sales@acme.test\">Write us</a>",
            "sales@acme.test"
        )));
        // Cloudflare's protection of "info@acme.test" with key 0x42.
        let key = 0x42u8;
        let hex: String = std::iter::once(key)
            .chain(b"info@acme.test".iter().map(|b| b ^ key))
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(is_exact(&find(
            &format!("<a class=\"__cf_email__\" data-cfemail=\"{hex}\">[email&#160;protected]</a>"),
            "info@acme.test"
        )));
        assert!(is_exact(&find(
            &format!("<a href=\"/cdn-cgi/l/email-protection#{hex}\">mail</a>"),
            "info@acme.test"
        )));
        assert_eq!(decode_cfemail("zz"), None);
        assert_eq!(decode_cfemail(""), None);
    }

    #[test]
    fn invisible_characters_inside_an_address_are_ignored_as_a_browser_does() {
        assert!(is_exact(&find(
            "info\u{200B}@acme&shy;.test",
            "info@acme.test"
        )));
        assert!(is_exact(&find("in&#8203;fo@acme.test", "info@acme.test")));
    }

    #[test]
    fn a_part_of_a_longer_address_is_not_the_address() {
        assert_eq!(find("info@acme.test", "o@acme.test"), Found::Absent);
        assert_eq!(
            find("info@acme.test.evil.test", "info@acme.test"),
            Found::Absent
        );
        assert_eq!(find("info@acme.tester", "info@acme.test"), Found::Absent);
        assert_eq!(find("x@acme.test", "info@acme.test"), Found::Absent);
        assert!(is_exact(&find("(info@acme.test).", "info@acme.test")));
        assert!(is_exact(&find("info@acme.test로 문의", "info@acme.test")));
        assert!(is_exact(&find("mail:.info@acme.test", "info@acme.test")));
    }

    #[test]
    fn an_address_only_in_a_comment_or_split_by_tags_is_told_apart() {
        assert_eq!(
            find("<p>hi</p><!-- old: info@acme.test -->", "info@acme.test"),
            Found::InComment {
                snippet: "<!-- old: info@acme.test -->".into()
            }
        );
        assert!(matches!(
            find(
                "<p>hi</p><!-- unterminated info@acme.test",
                "info@acme.test"
            ),
            Found::InComment { .. }
        ));
        assert_eq!(
            find("<span>info</span>@<span>acme.test</span>", "info@acme.test"),
            Found::BetweenTags {
                snippet: "info@acme.test".into()
            }
        );
    }

    #[test]
    fn obfuscated_forms_are_recognised() {
        for html in [
            "info [at] acme.test",
            "info(at)acme.test",
            "info {at} acme {dot} test",
            "info at acme dot test",
            "INFO [AT] ACME [DOT] TEST",
            "info ＠ acme．test",
            "info @ acme.test",
            "info&#91;at&#93;acme.test",
            "<b>info</b> [at] acme.test",
        ] {
            assert!(
                matches!(find(html, "info@acme.test"), Found::Obfuscated { .. }),
                "{html}"
            );
        }
        assert_eq!(
            find("sinfo [at] acme.test", "info@acme.test"),
            Found::Absent
        );
        assert_eq!(
            find("info [at] acme.tester", "info@acme.test"),
            Found::Absent
        );
    }

    #[test]
    fn an_internationalised_address_is_found_in_either_form() {
        let email = parse_email("info@xn--3e0b707e.xn--3e0b707e").unwrap();
        let text = PageText::from_body("메일: info@한국.한국".as_bytes());
        assert!(is_exact(&text.find(&email)));
        let text = PageText::from_body(b"info@xn--3e0b707e.xn--3e0b707e");
        assert!(is_exact(&text.find(&email)));
    }

    #[test]
    fn the_addresses_on_a_page_are_listed_once_in_order_without_file_names() {
        let text = PageText::from_body(
            br#"<img src="logo@2x.png"> sales@acme.test, <a href="mailto:info%40acme.test">x</a>
                Sales@acme.test ..press@acme.test"#,
        );
        assert_eq!(
            text.addresses(10),
            ["sales@acme.test", "press@acme.test", "info@acme.test"]
        );
        assert_eq!(text.addresses(1), ["sales@acme.test"]);
    }

    #[test]
    fn snippets_are_cut_on_character_boundaries() {
        let text = format!("{}info@acme.test{}", "가".repeat(100), "나".repeat(100));
        let s = snippet(&text, 300, 314);
        assert_eq!(s.chars().count(), 80 + 14 + 80);
        assert!(s.starts_with('가') && s.ends_with('나'));
    }

    #[test]
    fn a_body_that_is_not_utf8_keeps_its_ascii_addresses() {
        // "문의" in EUC-KR, then the address.
        let mut body = vec![0xb9, 0xae, 0xc0, 0xc7, b' '];
        body.extend_from_slice(b"info@acme.test");
        assert!(is_exact(
            &PageText::from_body(&body).find(&parse_email("info@acme.test").unwrap())
        ));
    }
}
