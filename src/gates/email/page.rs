//! Reading a fetched page for addresses. The page is parsed the way a browser
//! parses it (html5ever, the HTML5 parsing algorithm, through `scraper`), and
//! what a reader sees is decided on the tree, not on the source text:
//! - shown: text outside the elements below, the `<title>`, the addresses of
//!   `mailto:` links (also percent-encoded) and of Cloudflare's email protection;
//! - hidden: the contents of `script`, `style`, `template` and `iframe`
//!   elements, of any element with the `hidden` attribute or an inline
//!   `display: none` / `visibility: hidden` (on itself or an ancestor), CDATA
//!   sections, and attribute values (an `<input value>`, a `<meta content>`,
//!   an image URL). Style sheets are not applied: a class that hides is not seen;
//! - comments, ended where HTML5 ends them (`-->`, `--!>`, `<!-->`).
//!
//! Entities are decoded once, by the parser. Obfuscated forms
//! (`info [at] acme.co.kr`) are told apart from the address written out.
//!
//! An address counts only as a whole token: `o@acme.test` is not found in
//! `info@acme.test`, nor `info@acme.test` in `info@acme.test.evil.test`.

use std::sync::LazyLock;

use ego_tree::iter::Edge;
use percent_encoding::percent_decode_str;
use regex::Regex;
use scraper::Node;
use scraper::node::Element;

use super::address::Email;
use super::html;

/// Characters of a local part as this gate accepts them.
pub(crate) fn is_local_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')
}

/// Elements whose content no reader sees.
const HIDING_ELEMENTS: &[&str] = &["script", "style", "template", "iframe"];
/// Elements the parser adds when a page leaves them out: a marker is kept for
/// them only when the page writes their tag, so that a snippet shows the
/// page's own tags.
const IMPLIED_ELEMENTS: &[&str] = &["html", "head", "body"];
/// Elements that run inside a line of text: their tags do not separate words.
const INLINE_ELEMENTS: &[&str] = &[
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "font", "i", "kbd",
    "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var",
];
/// Elements without an end tag.
const VOID_ELEMENTS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

static ADDRESS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")
        .unwrap()
});
static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").unwrap());
/// Characters a browser does not show: zero-width spaces and joiners, the
/// word joiner, the byte order mark and the soft hyphen.
static INVISIBLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("[\u{200B}-\u{200D}\u{2060}\u{FEFF}\u{00AD}]").unwrap());
/// The ways an obfuscated address writes `@`, at the start of the text searched.
static OBFUSCATED_AT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\A\s*(?:\[\s*at\s*\]|\(\s*at\s*\)|\{\s*at\s*\}|<\s*at\s*>|\s+at\s+|＠|@)\s*")
        .unwrap()
});
/// The ways an obfuscated address writes the dots of its domain.
static OBFUSCATED_DOT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\A\s*(?:\[\s*dot\s*\]|\(\s*dot\s*\)|\{\s*dot\s*\}|<\s*dot\s*>|\s+dot\s+|．|\.)\s*",
    )
    .unwrap()
});

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
    /// Only where no visitor sees it: a script, a style sheet, a template,
    /// CDATA or an attribute value other than a `mailto:` link.
    Hidden {
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
    /// What a reader sees: the shown text, with a marker `<p>`, `</p>` for
    /// each of the page's tags; a tag's marker holds the addresses of its
    /// `mailto:` links and email protection, since a visitor reaches those.
    main: String,
    /// The comments, each as `<!--text-->`.
    comments: String,
    /// Hidden text: hidden elements' contents, CDATA, attribute values.
    hidden: String,
    /// `main` without its markers.
    stripped: String,
    /// The shown text with a blank wherever a tag other than an inline one
    /// stands, so that the words of two blocks stay apart.
    words: String,
    /// The page nests deeper than [`html::MAX_DEPTH`]: only its start was read.
    too_deep: bool,
}

/// Whether an element hides itself and what it holds from a reader.
fn hides(element: &Element) -> bool {
    HIDING_ELEMENTS.contains(&element.name())
        || element.attr("hidden").is_some()
        || element.attr("style").is_some_and(style_hides)
}

/// Whether an inline style says `display: none` or `visibility: hidden`
/// (or `collapse`), `!important` or not, in any letter case.
fn style_hides(style: &str) -> bool {
    style.split(';').any(|declaration| {
        let Some((property, value)) = declaration.split_once(':') else {
            return false;
        };
        let value = value.to_ascii_lowercase();
        let value = value.trim().trim_end_matches("!important").trim();
        match property.trim().to_ascii_lowercase().as_str() {
            "display" => value == "none",
            "visibility" => matches!(value, "hidden" | "collapse"),
            _ => false,
        }
    })
}

/// The buffers [`PageText`] is made of, filled by one walk over the tree.
#[derive(Default)]
struct Reader {
    main: String,
    comments: Vec<String>,
    hidden: Vec<String>,
    stripped: String,
    words: String,
    /// For every open element: whether it or an ancestor hides its content.
    open: Vec<bool>,
    /// Which of [`IMPLIED_ELEMENTS`] the page writes a tag for.
    written: Vec<&'static str>,
}

impl Reader {
    fn new(raw: &str) -> Reader {
        let lower = raw.to_ascii_lowercase();
        let written = IMPLIED_ELEMENTS
            .iter()
            .copied()
            .filter(|name| {
                lower.match_indices(&format!("<{name}")).any(|(at, tag)| {
                    lower[at + tag.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| c == '>' || c == '/' || c.is_ascii_whitespace())
                })
            })
            .collect();
        Reader {
            written,
            ..Reader::default()
        }
    }

    /// Whether an element gets a marker in the text a reader sees.
    fn marked(&self, name: &str) -> bool {
        !IMPLIED_ELEMENTS.contains(&name) || self.written.contains(&name)
    }

    fn hidden_here(&self) -> bool {
        self.open.last().copied().unwrap_or(false)
    }

    fn open_element(&mut self, element: &Element) {
        let inherited = self.hidden_here();
        let hidden = inherited || hides(element);
        self.open.push(hidden);
        self.separate_words(element);
        for (_, value) in element.attrs() {
            if !value.trim().is_empty() {
                self.hidden.push(value.to_owned());
            }
        }
        let name = element.name();
        if hidden {
            if !inherited {
                // The hidden part stands between the words around it.
                self.main.push(' ');
                self.stripped.push(' ');
            }
            return;
        }
        if !self.marked(name) {
            return;
        }
        self.main.push('<');
        self.main.push_str(name);
        for (attribute, value) in element.attrs() {
            for address in mailto_link(attribute, value)
                .into_iter()
                .chain(protected_address(attribute, value))
            {
                if !address.contains(['<', '>', '&']) && !address.contains(char::is_whitespace) {
                    self.main.push(' ');
                    self.main.push_str(&address);
                }
            }
        }
        self.main.push('>');
    }

    fn close_element(&mut self, element: &Element) {
        let hidden = self.open.pop().unwrap_or(false);
        self.separate_words(element);
        let name = element.name();
        if !hidden && self.marked(name) && !VOID_ELEMENTS.contains(&name) {
            self.main.push_str("</");
            self.main.push_str(name);
            self.main.push('>');
        }
    }

    fn text(&mut self, text: &str) {
        if self.hidden_here() {
            self.hidden.push(text.to_owned());
        } else {
            self.main.push_str(text);
            self.stripped.push_str(text);
            self.words.push_str(text);
        }
    }

    fn separate_words(&mut self, element: &Element) {
        if !INLINE_ELEMENTS.contains(&element.name()) && !self.words.ends_with(' ') {
            self.words.push(' ');
        }
    }

    fn comment(&mut self, comment: &str) {
        // Outside foreign content HTML5 reads `<![CDATA[...]]>` as a (bogus)
        // comment; no reader sees it either way.
        if comment.starts_with("[CDATA[") {
            self.hidden.push(comment.to_owned());
        } else {
            // Blanks inside the markers, so that an address at either end of
            // the comment does not run into `<!--` or `-->`.
            let gap = |blank: bool| if blank { "" } else { " " };
            let before = gap(comment.starts_with(char::is_whitespace));
            let after = gap(comment.ends_with(char::is_whitespace));
            self.comments
                .push(format!("<!--{before}{comment}{after}-->"));
        }
    }
}

impl PageText {
    /// Parses a page body (any encoding that keeps ASCII as ASCII) as HTML5.
    pub fn from_body(body: &[u8]) -> PageText {
        let raw = String::from_utf8_lossy(body);
        let parsed = html::parse(&raw);
        let mut reader = Reader::new(&raw);
        // The walk is iterative: however deep the tree, it cannot exhaust the stack.
        for edge in parsed.html.tree.root().traverse() {
            match edge {
                Edge::Open(node) => match node.value() {
                    Node::Element(element) => reader.open_element(element),
                    Node::Text(text) => reader.text(text),
                    Node::Comment(comment) => reader.comment(comment),
                    _ => {}
                },
                Edge::Close(node) => {
                    if let Node::Element(element) = node.value() {
                        reader.close_element(element);
                    }
                }
            }
        }
        PageText {
            main: visible(&reader.main),
            comments: visible(&reader.comments.join("\n")),
            hidden: visible(&reader.hidden.join("\n")),
            stripped: visible(&reader.stripped),
            words: visible(&reader.words),
            too_deep: parsed.too_deep,
        }
    }

    /// Whether the page nests its elements deeper than any browser renders
    /// them (see [`html::MAX_DEPTH`]); then only its start was read.
    pub fn too_deep(&self) -> bool {
        self.too_deep
    }

    /// The text a reader sees, the words of two blocks (a title and a
    /// heading, two paragraphs) kept apart: for finding names on the page.
    pub fn shown_text(&self) -> &str {
        &self.words
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
        if let Some(hit) = occurrences(&self.hidden, email).iter().find(same) {
            return Found::Hidden {
                snippet: snippet(&self.hidden, hit.start, hit.end),
            };
        }
        if let Some(hit) = occurrences(&self.stripped, email).iter().find(same) {
            return Found::BetweenTags {
                snippet: snippet(&self.stripped, hit.start, hit.end),
            };
        }
        for text in [&self.main, &self.stripped] {
            if let Some((start, end)) = obfuscated(text, email) {
                return Found::Obfuscated {
                    snippet: snippet(text, start, end),
                };
            }
        }
        Found::Absent
    }

    /// The distinct addresses a reader sees on the page, in page order (at most `limit`).
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

/// The address of a `mailto:` link (percent-encoding decoded, the
/// `?subject=...` part dropped), if the attribute is one.
fn mailto_link(attribute: &str, value: &str) -> Option<String> {
    if !attribute.eq_ignore_ascii_case("href") {
        return None;
    }
    let value = value.trim();
    let target = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("mailto:"))
        .map(|_| &value[7..])?;
    let address = target.split('?').next().unwrap_or_default();
    Some(percent_decode_str(address).decode_utf8_lossy().into_owned())
}

/// The address Cloudflare's email protection hides in an attribute, if it does.
fn protected_address(attribute: &str, value: &str) -> Option<String> {
    let hex_text = if attribute.eq_ignore_ascii_case("data-cfemail") {
        value
    } else if attribute.eq_ignore_ascii_case("href") {
        value.split_once("/cdn-cgi/l/email-protection#")?.1
    } else {
        return None;
    };
    decode_cfemail(hex_text.trim())
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

/// Where `email` stands written with `[at]`, `(at)`, ` at `, `＠` or spaces
/// around `@`, and the same family for the dots of its domain (letter case
/// ignored), as a whole token.
fn obfuscated(text: &str, email: &Email) -> Option<(usize, usize)> {
    let lower = text.to_ascii_lowercase(); // same byte offsets as `text`
    let local = email.local.to_ascii_lowercase();
    let labels: Vec<&str> = email.domain.split('.').collect();
    'candidates: for (start, _) in lower.match_indices(&local) {
        if lower[..start]
            .chars()
            .next_back()
            .is_some_and(is_local_char)
        {
            continue;
        }
        let mut at = start + local.len();
        match OBFUSCATED_AT.find(&text[at..]) {
            Some(sign) => at += sign.end(),
            None => continue,
        }
        for (i, label) in labels.iter().enumerate() {
            if i > 0 {
                match OBFUSCATED_DOT.find(&text[at..]) {
                    Some(dot) => at += dot.end(),
                    None => continue 'candidates,
                }
            }
            if !lower[at..].starts_with(label) {
                continue 'candidates;
            }
            at += label.len();
        }
        let mut after = text[at..].chars();
        let ends_here = match after.next() {
            None => true,
            Some('.') => !after.next().is_some_and(|c| c.is_ascii_alphanumeric()),
            Some(c) => !(c.is_ascii_alphanumeric() || c == '-'),
        };
        if ends_here {
            return Some((start, at));
        }
    }
    None
}

/// Text as a reader sees its characters: invisible characters gone (the
/// parser has decoded the entities already).
fn visible(text: &str) -> String {
    INVISIBLE.replace_all(text, "").into_owned()
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
mod tests;
