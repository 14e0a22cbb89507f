//! Whether the source URL could make its page show the address. A page that
//! repeats its own URL (a search page, a soft 404, a user directory such as
//! `/~info`, a host-named greeting) "shows" whatever the agent put into the
//! URL, so the URL asked for and the URL answered are both examined:
//!
//! - the whole address in the host, path or query (after undoing percent and
//!   entity encodings) proves nothing: the page may be echoing it;
//! - the local part as a whole token there (the domain can come from the host)
//!   is tested rather than guessed at: the same URL with that token replaced
//!   by a made-up one is fetched, and if its page shows the made-up address,
//!   the page echoes its URL. `contact@acme.test` on `/contact` passes when
//!   `/q0f3…` shows no `q0f3…@acme.test`.

use percent_encoding::percent_decode_str;
use sha2::{Digest, Sha256};
use url::Url;

use super::address::Email;
use super::page::is_local_char;

/// How much of the address a URL carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Nothing,
    /// The local part as a whole token: a page could put the address together.
    LocalPart,
    Whole,
}

/// The host, path and query of `url` as a page could echo them: percent and
/// entity encodings undone (three rounds, for layered encodings), in lower case.
/// The fragment is never sent, so it is left out.
fn echoable(url: &Url) -> String {
    let mut text = format!(
        "{}{}?{}",
        url.host_str().unwrap_or_default(),
        url.path(),
        url.query().unwrap_or_default()
    );
    for _ in 0..3 {
        let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
        text = html_escape::decode_html_entities(&decoded).into_owned();
    }
    text.to_lowercase()
}

/// The runs of local-part characters in `text`, with their byte ranges.
fn tokens(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = None;
    text.char_indices()
        .chain(std::iter::once((text.len(), ' ')))
        .filter_map(move |(i, c)| match (is_local_char(c), start) {
            (true, None) => {
                start = Some(i);
                None
            }
            (false, Some(s)) => {
                start = None;
                Some((s, i))
            }
            _ => None,
        })
}

/// How much of `email` the URL carries.
pub fn carried(url: &Url, email: &Email) -> Carried {
    let text = echoable(url);
    let local = email.local.to_lowercase();
    let domains = std::iter::once(email.domain.as_str()).chain(email.unicode_domain.as_deref());
    for domain in domains {
        if text.contains(&format!("{local}@{domain}")) {
            return Carried::Whole;
        }
    }
    // A host name is one token of local-part characters; its labels count apart.
    let in_host = url
        .host_str()
        .is_some_and(|host| host.split('.').any(|l| l.eq_ignore_ascii_case(&local)));
    let rest = text.split_once('/').map_or("", |(_, rest)| rest);
    if in_host || tokens(rest).any(|(s, e)| rest[s..e] == local) {
        Carried::LocalPart
    } else {
        Carried::Nothing
    }
}

/// `text` with every whole token equal to `local` (any letter case) replaced
/// by `with`, or `None` when there is none.
fn replace_tokens(text: &str, local: &str, with: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (s, e) in tokens(text) {
        if text[s..e].eq_ignore_ascii_case(local) {
            out.push_str(&text[last..s]);
            out.push_str(with);
            last = e;
        }
    }
    (last > 0).then(|| out + &text[last..])
}

/// A component with the tokens replaced as written, or else once percent-decoded.
fn replaced(component: &str, local: &str, with: &str) -> Option<String> {
    replace_tokens(component, local, with).or_else(|| {
        let decoded = percent_decode_str(component).decode_utf8_lossy();
        replace_tokens(&decoded, local, with)
    })
}

/// The made-up local part that stands in for `email`'s in a probe: the same
/// for the same address, so that a check is repeatable.
fn stand_in(email: &Email) -> String {
    let digest = Sha256::digest(format!("quest echo probe {}", email.address()));
    format!("q{}", &hex::encode(digest)[..11])
}

/// The probe for a URL that carries `email`'s local part: the same URL with
/// that token replaced (in the host's labels, the path and the query), and the
/// address its page would show if it echoed the URL. `None` when the token
/// cannot be found to replace (an encoding deeper than one round).
pub fn probe(url: &Url, email: &Email) -> Option<(Url, Email)> {
    let with = stand_in(email);
    let local = &email.local;
    let mut probe = url.clone();
    let mut changed = false;
    if let Some(host) = url.host_str().filter(|_| url.domain().is_some()) {
        let labels: Vec<&str> = host
            .split('.')
            .map(|l| {
                if l.eq_ignore_ascii_case(local) {
                    with.as_str()
                } else {
                    l
                }
            })
            .collect();
        let new_host = labels.join(".");
        if new_host != host && probe.set_host(Some(&new_host)).is_ok() {
            changed = true;
        }
    }
    if let Some(path) = replaced(url.path(), local, &with) {
        probe.set_path(&path);
        changed = true;
    }
    if let Some(query) = url.query().and_then(|q| replaced(q, local, &with)) {
        probe.set_query(Some(&query));
        changed = true;
    }
    let made_up = Email {
        local: with,
        domain: email.domain.clone(),
        unicode_domain: email.unicode_domain.clone(),
    };
    changed.then_some((probe, made_up))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::email::address::parse_email;

    fn carried_by(url: &str, email: &str) -> Carried {
        carried(&Url::parse(url).unwrap(), &parse_email(email).unwrap())
    }

    #[test]
    fn the_whole_address_in_any_encoding_or_part_of_the_url_is_carried() {
        for url in [
            "https://acme.test/search?q=info@acme.test",
            "https://acme.test/search?q=info%40acme.test",
            "https://acme.test/search?q=info%2540acme.test",
            "https://acme.test/search?q=info%26%2364%3Bacme.test",
            "https://acme.test/echo/INFO@ACME.TEST",
            "https://acme.test/r?to=%252Fsearch%253Fq%253Dinfo%252540acme.test",
        ] {
            assert_eq!(carried_by(url, "info@acme.test"), Carried::Whole, "{url}");
        }
    }

    #[test]
    fn the_local_part_as_a_whole_token_is_carried_wherever_it_stands() {
        for url in [
            "https://acme.test/~info",
            "https://acme.test/search?user=info&host=acme.test",
            "https://info.acme.test/",
            "https://acme.test/%69nfo/",
            "https://acme.test/contact",
        ] {
            let email = if url.ends_with("contact") {
                "contact@acme.test"
            } else {
                "info@acme.test"
            };
            assert_eq!(carried_by(url, email), Carried::LocalPart, "{url}");
        }
        for url in [
            "https://acme.test/information",
            "https://acme.test/contact#info",
            "https://acme.test/",
        ] {
            assert_eq!(carried_by(url, "info@acme.test"), Carried::Nothing, "{url}");
        }
    }

    #[test]
    fn a_probe_replaces_the_local_part_and_nothing_else() {
        let email = parse_email("info@acme.test").unwrap();
        let with = stand_in(&email);
        assert_eq!(with, stand_in(&email), "the same address, the same probe");
        assert!(with.len() == 12 && with.chars().all(|c| c.is_ascii_alphanumeric()));
        for (url, expected) in [
            (
                "https://acme.test/~info",
                format!("https://acme.test/~{with}"),
            ),
            (
                "https://acme.test/search?user=INFO&host=acme.test&info2=info",
                format!("https://acme.test/search?user={with}&host=acme.test&info2={with}"),
            ),
            (
                "https://info.acme.test/x",
                format!("https://{with}.acme.test/x"),
            ),
            (
                "https://acme.test/%69nfo/",
                format!("https://acme.test/{with}/"),
            ),
        ] {
            let (probe, made_up) = probe(&Url::parse(url).unwrap(), &email).unwrap();
            assert_eq!(probe.as_str(), expected, "{url}");
            assert_eq!(made_up.address(), format!("{with}@acme.test"));
        }
        assert!(probe(&Url::parse("https://acme.test/contact").unwrap(), &email).is_none());
        assert!(
            probe(&Url::parse("https://acme.test/%2569nfo").unwrap(), &email).is_none(),
            "too deep to replace"
        );
    }
}
