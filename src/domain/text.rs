//! The rules for text the server keeps: what is refused at the door (a NUL,
//! which PostgreSQL cannot store in `text` or `jsonb`), how text the server
//! did not write (gate, page, program and model output) is cleaned instead,
//! and how long a fact, an evidence item and a verdict's list of facts may
//! grow. Every rule here is idempotent: applying it to its own output
//! changes nothing, so that a verdict cleaned twice is the same verdict.

use std::borrow::Cow;

use serde_json::Value;

use super::Fact;

/// The most facts a gate's verdict keeps, the last one saying how many more
/// there were.
pub const MAX_FACTS: usize = 50;
/// The longest part of a fact (`check`, `field`, `expected`, `actual`,
/// `hint`), in characters, the cut mark included.
pub const MAX_FACT_CHARS: usize = 1000;
/// The largest evidence item, in bytes of compact JSON.
pub const MAX_EVIDENCE_BYTES: usize = 16 * 1024;
/// What stands in for a NUL in text the server cleans.
pub const REPLACEMENT: char = '\u{FFFD}';
/// What marks a cut.
const CUT_MARK: char = '…';

/// Whether `text` holds a character no database column may hold.
pub fn has_nul(text: &str) -> bool {
    text.contains('\0')
}

/// The JSON pointer of the first string or member name in `value` that holds
/// a NUL (`""` for `value` itself); `None` when there is none.
pub fn nul_pointer(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => has_nul(s).then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_pointer(item).map(|rest| format!("/{i}{rest}"))),
        Value::Object(members) => members.iter().find_map(|(name, item)| {
            if has_nul(name) {
                return Some(format!("/{}", pointer_token(name)));
            }
            nul_pointer(item).map(|rest| format!("/{}{rest}", pointer_token(name)))
        }),
        _ => None,
    }
}

/// A member name escaped for a JSON pointer (RFC 6901), its NULs shown as
/// `\u0000` so that the pointer itself can be printed and stored.
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0")
        .replace('/', "~1")
        .replace('\0', "\\u0000")
}

/// `text` with every NUL replaced by U+FFFD.
pub fn clean(text: &str) -> Cow<'_, str> {
    if has_nul(text) {
        Cow::Owned(text.replace('\0', &REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

/// Replaces every NUL in a string: whether there was one.
pub fn clean_in_place(text: &mut String) -> bool {
    if let Cow::Owned(cleaned) = clean(text) {
        *text = cleaned;
        true
    } else {
        false
    }
}

/// Replaces every NUL in `value`'s strings and member names: whether there
/// was one.
pub fn clean_value(value: &mut Value) -> bool {
    match value {
        Value::String(s) => clean_in_place(s),
        Value::Array(items) => items.iter_mut().fold(false, |any, v| clean_value(v) | any),
        Value::Object(members) => {
            if members.keys().any(|k| has_nul(k)) {
                *members = std::mem::take(members)
                    .into_iter()
                    .map(|(k, v)| (clean(&k).into_owned(), v))
                    .collect();
                members.values_mut().for_each(|v| {
                    clean_value(v);
                });
                return true;
            }
            members
                .values_mut()
                .fold(false, |any, v| clean_value(v) | any)
        }
        _ => false,
    }
}

/// `text` cut to at most `max` characters (at a character boundary), the
/// last of them "…" when something was cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            Cow::Owned(format!("{}{CUT_MARK}", &text[..end]))
        }
    }
}

/// A fact with every part cut to [`MAX_FACT_CHARS`].
pub fn cut_fact(fact: &Fact) -> Cow<'_, Fact> {
    let parts = [
        &fact.check,
        &fact.field,
        &fact.expected,
        &fact.actual,
        &fact.hint,
    ];
    if parts
        .iter()
        .all(|p| p.chars().nth(MAX_FACT_CHARS).is_none())
    {
        return Cow::Borrowed(fact);
    }
    let [check, field, expected, actual, hint] = parts.map(|p| cut(p, MAX_FACT_CHARS).into_owned());
    Cow::Owned(Fact {
        check,
        field,
        expected,
        actual,
        hint,
        unanswered: fact.unanswered,
    })
}

/// Replaces every NUL in a fact's parts: whether there was one.
pub fn clean_fact(fact: &mut Fact) -> bool {
    [
        &mut fact.check,
        &mut fact.field,
        &mut fact.expected,
        &mut fact.actual,
        &mut fact.hint,
    ]
    .into_iter()
    .fold(false, |any, part| clean_in_place(part) | any)
}

/// The fact that says a NUL was replaced in what a gate, a page or a program
/// gave back.
pub fn nul_replaced_fact() -> Fact {
    Fact::new(
        "text",
        "",
        "text without U+0000",
        "U+0000 replaced by U+FFFD in the gate's facts or evidence",
        "nothing for you to fix: the server cleaned what the gate saw",
    )
}

/// Cleans what a verifier (a model or a program) replied and the reason
/// taken from it; the reason, which reviewers see as the verifier's fact,
/// then says that a NUL was replaced.
pub fn clean_reply(raw: &mut Option<String>, reason: &mut String) {
    let in_raw = raw.as_mut().is_some_and(clean_in_place);
    if clean_in_place(reason) | in_raw {
        reason.push_str(" (the reply held U+0000, replaced by U+FFFD)");
    }
}

/// At most [`MAX_FACTS`] facts: the first `MAX_FACTS - 1` in order and one
/// that says how many more there were. A list that fits is kept as it is.
pub fn cap_facts(mut facts: Vec<Fact>) -> Vec<Fact> {
    if facts.len() <= MAX_FACTS {
        return facts;
    }
    let more = facts.len() - (MAX_FACTS - 1);
    facts.truncate(MAX_FACTS - 1);
    facts.push(Fact::new(
        "facts",
        "",
        format!("at most {MAX_FACTS} facts"),
        format!("{more} more not shown"),
        "fix the facts shown first; the others come back after the next check",
    ));
    facts
}

/// An evidence item of at most [`MAX_EVIDENCE_BYTES`]: one that fits is
/// kept; else its strings are cut, longest first, to shorter and shorter
/// lengths until it fits; an item that still does not fit (too many members)
/// becomes `{"cut": <its first bytes as text>, "bytes": <its size>}`.
pub fn bound_evidence(item: Value) -> Value {
    let size = json_len(&item);
    if size <= MAX_EVIDENCE_BYTES {
        return item;
    }
    let mut max = MAX_EVIDENCE_BYTES / 2;
    while max >= 16 {
        let mut shorter = item.clone();
        cut_strings(&mut shorter, max);
        if json_len(&shorter) <= MAX_EVIDENCE_BYTES {
            return shorter;
        }
        max /= 2;
    }
    let text = item.to_string();
    // Room for the wrapper and the escapes the text needs inside a string.
    let head = cut(&text, MAX_EVIDENCE_BYTES / 8).into_owned();
    serde_json::json!({"cut": head, "bytes": size})
}

fn cut_strings(value: &mut Value, max: usize) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(cut) = cut(s, max) {
                *s = cut;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| cut_strings(v, max)),
        Value::Object(members) => members.values_mut().for_each(|v| cut_strings(v, max)),
        _ => {}
    }
}

/// The size of `value` as compact JSON.
pub fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pointer_names_the_first_string_or_member_name_with_a_nul() {
        assert_eq!(
            nul_pointer(&json!({"a": "ok", "b": ["x", "y\u{0}"]})).as_deref(),
            Some("/b/1")
        );
        assert_eq!(
            nul_pointer(&json!({"a/b\u{0}": 1})).as_deref(),
            Some("/a~1b\\u0000")
        );
        assert_eq!(nul_pointer(&json!("\u{0}")).as_deref(), Some(""));
        assert_eq!(nul_pointer(&json!({"a": [1, "two", null]})), None);
    }

    #[test]
    fn cleaning_replaces_nuls_in_strings_and_names_and_says_so_once() {
        let mut value = json!({"k\u{0}": ["a\u{0}b", 3], "ok": "fine"});
        assert!(clean_value(&mut value));
        assert_eq!(value, json!({"k\u{FFFD}": ["a\u{FFFD}b", 3], "ok": "fine"}));
        assert!(!clean_value(&mut value), "a cleaned value is clean");
        assert_eq!(clean("plain"), Cow::Borrowed("plain"));
    }

    #[test]
    fn a_reply_with_a_nul_is_cleaned_and_its_reason_says_so() {
        let (mut raw, mut reason) = (Some("NO\u{0} fine".to_owned()), "fine".to_owned());
        clean_reply(&mut raw, &mut reason);
        assert_eq!(raw.as_deref(), Some("NO\u{FFFD} fine"));
        assert_eq!(reason, "fine (the reply held U+0000, replaced by U+FFFD)");
        let (mut raw, mut reason) = (None, "no answer".to_owned());
        clean_reply(&mut raw, &mut reason);
        assert_eq!(reason, "no answer");
    }

    #[test]
    fn a_cut_keeps_whole_characters_marks_itself_and_is_idempotent() {
        let text = "é".repeat(1500);
        let once = cut(&text, MAX_FACT_CHARS).into_owned();
        assert_eq!(once.chars().count(), MAX_FACT_CHARS);
        assert!(once.ends_with('…'));
        assert_eq!(cut(&once, MAX_FACT_CHARS), Cow::Borrowed(once.as_str()));
        assert_eq!(cut("short", 5), "short");
        assert_eq!(cut("longer", 5), "long…");
    }

    #[test]
    fn a_long_list_of_facts_keeps_forty_nine_and_counts_the_rest() {
        let facts: Vec<Fact> = (0..200)
            .map(|i| Fact::new("schema", format!("/{i}"), "", "", ""))
            .collect();
        let capped = cap_facts(facts);
        assert_eq!(capped.len(), MAX_FACTS);
        assert_eq!(capped[48].field, "/48");
        assert_eq!(capped[49].check, "facts");
        assert_eq!(capped[49].actual, "151 more not shown");
        assert_eq!(cap_facts(capped.clone()), capped, "a capped list is kept");
    }

    #[test]
    fn every_part_of_a_fact_is_cut_and_a_short_fact_is_not_copied() {
        let long = "x".repeat(5000);
        let fact = Fact::new(&long, &long, &long, &long, &long);
        let cut = cut_fact(&fact).into_owned();
        for part in [
            &cut.check,
            &cut.field,
            &cut.expected,
            &cut.actual,
            &cut.hint,
        ] {
            assert_eq!(part.chars().count(), MAX_FACT_CHARS);
        }
        assert!(matches!(cut_fact(&cut), Cow::Borrowed(_)));
    }

    #[test]
    fn large_evidence_is_cut_to_sixteen_kib_keeping_its_shape_when_it_can() {
        let small = json!({"url": "https://a.test/", "status": 200});
        assert_eq!(bound_evidence(small.clone()), small);

        let page = json!({"url": "https://a.test/", "snippet": "y".repeat(100_000)});
        let bounded = bound_evidence(page);
        assert!(json_len(&bounded) <= MAX_EVIDENCE_BYTES);
        assert_eq!(bounded["url"], "https://a.test/");
        assert_eq!(bound_evidence(bounded.clone()), bounded);

        let wide = Value::Array((0..20_000).map(|i| json!(i)).collect());
        let bounded = bound_evidence(wide);
        assert!(
            json_len(&bounded) <= MAX_EVIDENCE_BYTES,
            "{}",
            json_len(&bounded)
        );
        assert!(bounded["cut"].as_str().unwrap().starts_with("[0,1,2"));
        assert_eq!(bound_evidence(bounded.clone()), bounded);
    }
}
