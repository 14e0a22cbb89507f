//! Tying the site to the company of the row: the company's name as the row
//! writes it, found on a page, and the company's own domain when the table
//! has a column for it.
//!
//! A name is compared word by word, in any script: each word of the name but
//! its legal form (Ltd, Inc, GmbH, Co., 주식회사, 株式会社, ...) must stand on
//! the page, letter case and accents ignored (NFKD, combining marks dropped).
//! In scripts written without spaces between words (Han, kana, Thai, ...) and
//! in Hangul, where particles attach to names, a word may stand inside a longer
//! run of letters; elsewhere it must be a whole word.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;
use url::{Host, Url};

use super::address::registrable;
use super::{EmailGate, Findings, ReadPage, Screen, is_unwell, read_page, readable};
use crate::domain::table::cell_as_text;
use crate::domain::{Fact, Verdict};

/// Legal forms, as separate words of a name.
const LEGAL_WORDS: &[&str] = &[
    // English and the Commonwealth
    "ltd",
    "limited",
    "inc",
    "incorporated",
    "corp",
    "corporation",
    "co",
    "company",
    "llc",
    "llp",
    "lp",
    "plc",
    "pty",
    "pte",
    "pvt",
    "bhd",
    "sdn",
    "lc",
    // German, Dutch, Nordic
    "gmbh",
    "mbh",
    "ag",
    "kg",
    "kgaa",
    "ohg",
    "ug",
    "se",
    "bv",
    "nv",
    "vof",
    "oy",
    "oyj",
    "ab",
    "as",
    "asa",
    "aps",
    // Romance languages
    "sa",
    "sas",
    "sasu",
    "sarl",
    "srl",
    "spa",
    "sl",
    "slu",
    "sca",
    "scs",
    "ltda",
    "sab",
    "cv",
    // Central and Eastern Europe, written in Latin letters
    "sro",
    "spol",
    "zrt",
    "nyrt",
    "kft",
    "doo",
    "dd",
    "ad",
    "jsc",
    "ojsc",
    "pjsc",
    "cjsc",
    "ooo",
    "oao",
    "zao",
    "pao",
    // Asia, written in Latin letters
    "kk",
    "yk",
    "pt",
    "tbk",
    // Cyrillic
    "ооо",
    "оао",
    "зао",
    "пао",
    "ао",
    "ип",
    // Korean, Japanese and Chinese, written apart or in parentheses: (주), ㈜, (株)
    "주식회사",
    "유한회사",
    "유한책임회사",
    "합자회사",
    "합명회사",
    "주",
    "유",
    "株式会社",
    "有限会社",
    "合同会社",
    "合資会社",
    "合名会社",
    "株",
    "有",
    "有限公司",
    "股份有限公司",
    "有限责任公司",
    "有限責任公司",
    "公司",
];

/// Legal forms written onto the name without a space (`삼성전자주식회사`,
/// `株式会社トヨタ`), longest first so that the longest is taken off.
const LEGAL_AFFIXES: &[&str] = &[
    "股份有限公司",
    "有限责任公司",
    "有限責任公司",
    "유한책임회사",
    "주식회사",
    "유한회사",
    "합자회사",
    "합명회사",
    "株式会社",
    "有限会社",
    "合同会社",
    "合資会社",
    "合名会社",
    "有限公司",
    "公司",
];

static LEGAL: LazyLock<HashSet<String>> =
    LazyLock::new(|| LEGAL_WORDS.iter().map(|w| fold(w)).collect());
static AFFIXES: LazyLock<Vec<String>> =
    LazyLock::new(|| LEGAL_AFFIXES.iter().map(|w| fold(w)).collect());
/// Addresses and URLs on a page: a name inside them (`info@acme.test`) is not
/// the page naming the company.
static ADDRESS_OR_URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\S+@\S+|\bhttps?://\S+").unwrap());

/// Text as it is compared: compatibility-decomposed, combining marks (accents)
/// dropped, in lower case.
fn fold(text: &str) -> String {
    text.nfkd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether `c` belongs to a script that runs words (or a word and its
/// particles) together, so that a name may stand inside a longer run.
fn is_unspaced(c: char) -> bool {
    matches!(c,
        '\u{0E00}'..='\u{0EFF}'     // Thai, Lao
        | '\u{1000}'..='\u{109F}'   // Myanmar
        | '\u{1100}'..='\u{11FF}'   // Hangul jamo (what NFKD makes of syllables)
        | '\u{1780}'..='\u{17FF}'   // Khmer
        | '\u{2E80}'..='\u{9FFF}'   // CJK radicals, kana, CJK ideographs
        | '\u{A960}'..='\u{A97F}' | '\u{AC00}'..='\u{D7FF}' // Hangul
        | '\u{F900}'..='\u{FAFF}'   // CJK compatibility ideographs
        | '\u{FF66}'..='\u{FF9F}'   // half-width katakana
        | '\u{20000}'..='\u{3FFFF}')
}

/// The company a row names, as words to find on a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanyName {
    /// The words, folded; never empty.
    words: Vec<String>,
}

impl CompanyName {
    /// The name's words without its legal form; `None` when nothing else is left.
    pub fn of(name: &str) -> Option<CompanyName> {
        let folded = fold(name);
        let tokens: Vec<&str> = folded
            .split(|c: char| !c.is_alphanumeric())
            .filter(|t| !t.is_empty())
            .collect();
        let mut words = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            // Initials written with dots (`S.A.`, `B.V.`, `A/S`) are one legal form.
            let run = tokens[i..]
                .iter()
                .take_while(|t| t.chars().count() == 1)
                .count();
            if run > 1 && LEGAL.contains(&tokens[i..i + run].concat()) {
                i += run;
                continue;
            }
            let token = strip_affixes(tokens[i]);
            if !token.is_empty() && !LEGAL.contains(token) {
                words.push(token.to_owned());
            }
            i += 1;
        }
        (!words.is_empty()).then_some(CompanyName { words })
    }

    /// The words looked for.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Whether every word of the name stands in `text` (a page's shown text),
    /// addresses and URLs left out.
    pub fn named_in(&self, text: &str) -> bool {
        let text = fold(&ADDRESS_OR_URL.replace_all(text, " "));
        self.words.iter().all(|word| contains_word(&text, word))
    }
}

/// `token` without a legal form written onto its start or end.
fn strip_affixes(mut token: &str) -> &str {
    for affix in AFFIXES.iter() {
        if token.len() > affix.len() {
            token = token
                .strip_prefix(affix.as_str())
                .or_else(|| token.strip_suffix(affix.as_str()))
                .unwrap_or(token);
        }
    }
    token
}

/// Whether `word` stands in `text` with no letter of the same spaced word
/// right before or after it.
fn contains_word(text: &str, word: &str) -> bool {
    let joined = |a: Option<char>, b: Option<char>| match (a, b) {
        (Some(a), Some(b)) => {
            a.is_alphanumeric() && b.is_alphanumeric() && !is_unspaced(a) && !is_unspaced(b)
        }
        _ => false,
    };
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !joined(before, word.chars().next()) && !joined(word.chars().next_back(), after)
    })
}

/// The registrable domain a table cell gives for the company's site: a URL,
/// a host name or an address (`https://www.acme.co.kr/en`, `acme.co.kr`,
/// `info@acme.co.kr`). `Ok(None)` for an empty cell; `Err` with what the cell
/// holds when no domain can be read from it.
pub fn site_domain(cell: &Value) -> Result<Option<String>, String> {
    let text = cell_as_text(cell);
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let host_part = text.rsplit('@').next().unwrap_or(text);
    let with_scheme = if host_part.contains("://") {
        host_part.to_owned()
    } else {
        format!("http://{host_part}")
    };
    let domain = Url::parse(&with_scheme)
        .ok()
        .and_then(|url| match url.host() {
            Some(Host::Domain(host)) => registrable(host),
            _ => None,
        });
    domain.map(Some).ok_or_else(|| text.to_owned())
}

impl EmailGate {
    /// Check 6: the site is the company's. With `site_column`, the site must be
    /// on the domain the row's cell gives (FAIL); the source page, or else the
    /// site's home page, must name the company as the row's key does (REVIEW).
    /// Returns the evidence, when there was anything to check.
    pub(super) async fn company_check(
        &self,
        findings: &mut Findings,
        screen: &Screen<'_>,
        input: &Value,
        key: &str,
        source: Option<&ReadPage>,
    ) -> Option<Value> {
        let mut evidence = json!({"check": "company"});
        let mut checked = false;
        if let (Some(column), Some(site)) = (&self.site_column, screen.site) {
            checked = true;
            evidence["site_column"] = json!(column);
            let cell = input.get(column).unwrap_or(&Value::Null);
            match site_domain(cell) {
                Ok(None) => evidence["expected_domain"] = Value::Null,
                Ok(Some(expected)) => {
                    let host = site.host_str().unwrap_or_default();
                    if registrable(host).as_deref() != Some(expected.as_str()) {
                        findings.fail(Fact::new(
                            "company",
                            "/site",
                            format!("a site on {expected}, the domain column `{column}` gives for this company"),
                            host,
                            format!(
                                "the table says this company's site is on {expected}: find the contact \
                                 address on {expected} and submit that site"
                            ),
                        ));
                    }
                    evidence["expected_domain"] = json!(expected);
                }
                Err(written) => {
                    findings.review(Fact::new(
                        "company",
                        "/site",
                        format!("the company's site as column `{column}` gives it"),
                        format!("column `{column}` holds `{written}`, which names no domain"),
                        "a person will compare the site with the company; nothing for you to fix",
                    ));
                    evidence["expected_domain"] = Value::Null;
                }
            }
        }
        if let (Some(name), Some(source)) = (CompanyName::of(key), source) {
            checked = true;
            evidence["name"] = json!(key);
            evidence["words"] = json!(name.words());
            if name.named_in(source.text.shown_text()) {
                evidence["named_on"] = json!(source.url);
            } else if findings.0.iter().any(|(v, _)| *v == Verdict::Fail) {
                // The claim fails anyway: the home page is not worth a request.
                evidence["named_on"] = Value::Null;
            } else {
                let home = self.home_names(&name, screen, &source.url).await;
                evidence["home"] = home.evidence;
                evidence["named_on"] = json!(home.named.then_some(&home.url));
                if !home.named {
                    let pages = match home.url {
                        Some(url) => format!("neither {} nor the home page {url}", source.url),
                        None => source.url.clone(),
                    };
                    let fact = Fact::new(
                        "company",
                        "/source",
                        format!("a page of the site that names {key}"),
                        format!("{pages} names {key}"),
                        "a person will confirm that the site is this company's own; if a page of \
                         the company's site names it and shows the address, cite that page",
                    );
                    findings.review(if home.unanswered {
                        fact.no_answer()
                    } else {
                        fact
                    });
                }
            }
        }
        checked.then_some(evidence)
    }

    /// Whether the claimed site's home page names the company (not asked when
    /// it is the page already read, or a placeholder).
    async fn home_names(&self, name: &CompanyName, screen: &Screen<'_>, read: &str) -> Home {
        let Some(site) = screen.site.filter(|_| screen.site_blacklisted.is_none()) else {
            return Home::default();
        };
        let url = site.as_str().to_owned();
        if url == read {
            return Home::default();
        }
        match self.fetcher.fetch(&url).await {
            Ok(page)
                if (200..=299).contains(&page.status) && readable(page.content_type.as_deref()) =>
            {
                let text = read_page(&page.body).await;
                let named = !text.too_deep() && name.named_in(text.shown_text());
                Home {
                    evidence: json!({"url": url, "status": page.status, "final_url": page.final_url}),
                    url: Some(url),
                    named,
                    unanswered: false,
                }
            }
            Ok(page) => Home {
                evidence: json!({"url": url, "status": page.status}),
                url: Some(url),
                named: false,
                unanswered: is_unwell(page.status),
            },
            Err(error) => Home {
                evidence: json!({"url": url, "error": error.to_string()}),
                url: Some(url),
                named: false,
                unanswered: error.is_no_answer(),
            },
        }
    }
}

/// What the site's home page said about the company's name.
#[derive(Default)]
struct Home {
    url: Option<String>,
    named: bool,
    evidence: Value,
    /// The home page gave no answer (a timeout, a 5xx): whether it names the
    /// company is unknown, not denied.
    unanswered: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(name: &str) -> Vec<String> {
        CompanyName::of(name).map(|c| c.words).unwrap_or_default()
    }

    #[test]
    fn legal_forms_are_left_out_in_any_spelling_and_script() {
        assert_eq!(words("Acme Co., Ltd."), ["acme"]);
        assert_eq!(words("ACME GmbH & Co. KG"), ["acme"]);
        assert_eq!(words("Société Générale S.A."), ["societe", "generale"]);
        assert_eq!(words("Møller A/S"), ["møller"]);
        assert_eq!(words("Grupo Bimbo, S.A.B."), ["grupo", "bimbo"]);
        assert_eq!(words("Beta Labs Inc"), ["beta", "labs"]);
        assert_eq!(words("주식회사 에이크미"), [fold("에이크미")]);
        assert_eq!(words("(주)에이크미"), [fold("에이크미")]);
        assert_eq!(words("㈜에이크미"), [fold("에이크미")]);
        assert_eq!(words("삼성전자주식회사"), [fold("삼성전자")]);
        assert_eq!(words("トヨタ自動車株式会社"), [fold("トヨタ自動車")]);
        assert_eq!(words("ООО «Ромашка»"), ["ромашка"]);
        assert_eq!(words("3M Company"), ["3m"]);
        assert_eq!(CompanyName::of("Inc."), None);
        assert_eq!(CompanyName::of(" — "), None);
    }

    #[test]
    fn a_name_is_found_case_and_accent_insensitively_as_whole_words() {
        let name = |n: &str| CompanyName::of(n).unwrap();
        assert!(name("Société Générale SA").named_in("Bienvenue chez SOCIETE GENERALE"));
        assert!(name("Muller GmbH").named_in("Müller – Impressum"));
        assert!(name("Acme Corp").named_in("<title>Acme</title> Contact"));
        assert!(name("Beta Labs").named_in("Labs of Beta, Seoul"));
        assert!(!name("Beta Labs").named_in("Beta Foods"));
        assert!(!name("Acme").named_in("Acmeology and Pacmen"));
        assert!(
            !name("Acme").named_in("Write to info@acme.test or see https://acme.test/x"),
            "an address or a URL does not name the company"
        );
        assert!(name("Acme").named_in("Acme's contact page"));
    }

    #[test]
    fn a_name_in_a_script_without_spaces_is_found_inside_a_run_of_letters() {
        let name = |n: &str| CompanyName::of(n).unwrap();
        assert!(name("주식회사 에이크미").named_in("에이크미는 서울에 있습니다"));
        assert!(name("(주)에이크미").named_in("Copyright ⓒ 에이크미 Inc."));
        assert!(!name("주식회사 에이크미").named_in("에이스 주식회사"));
        assert!(name("トヨタ自動車株式会社").named_in("トヨタ自動車の会社概要"));
        assert!(name("Ромашка ООО").named_in("Контакты РОМАШКА"));
    }

    #[test]
    fn a_site_cell_gives_its_registrable_domain() {
        for cell in [
            json!("https://www.acme.co.kr/en"),
            json!("acme.co.kr"),
            json!("WWW.ACME.CO.KR."),
            json!("info@acme.co.kr"),
            json!(" shop.acme.co.kr/contact "),
        ] {
            assert_eq!(
                site_domain(&cell),
                Ok(Some("acme.co.kr".to_owned())),
                "{cell}"
            );
        }
        assert_eq!(site_domain(&json!("")), Ok(None));
        assert_eq!(site_domain(&Value::Null), Ok(None));
        for cell in ["not a site", "co.kr", "10.0.0.1", "http://"] {
            assert_eq!(site_domain(&json!(cell)), Err(cell.to_owned()), "{cell}");
        }
    }
}
