//! What the pages show, shaped for the templates: counts as bar segments,
//! results and evidence as labelled text, links only where a URL is http(s),
//! and the match inside an evidence snippet marked. Values stay text here;
//! the templates escape them.

use crate::domain::ids::{QuestId, SessionId, SubmissionId, TokenId};
use chrono::{DateTime, Utc};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use serde_json::Value;

use crate::api::{self, L2Answer, ReviewDecision, Status};
use crate::domain::{Fact, Phase, State, SubmissionVerdict};

/// What a query value escapes: all but unreserved characters.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `s` escaped for a query string.
pub fn query_escape(s: &str) -> String {
    utf8_percent_encode(s, QUERY).to_string()
}

/// A query string from the pairs whose value is present: `?a=1&b=x%20y`, or `""`.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.filter(|v| !v.is_empty())
                .map(|v| format!("{k}={}", query_escape(v)))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// `s` when it is an absolute http(s) URL, the only kind the console links to.
pub fn safe_link(s: &str) -> Option<String> {
    let url = url::Url::parse(s.trim()).ok()?;
    matches!(url.scheme(), "http" | "https").then(|| url.to_string())
}

/// "just now", "4 min ago", "3 h ago", "2 d ago".
pub fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let s = (now - then).num_seconds();
    match s {
        ..60 => "just now".to_owned(),
        60..3600 => format!("{} min ago", s / 60),
        3600..86400 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86400),
    }
}

/// One coloured part of a session's progress bar, in percent of the total.
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    pub name: &'static str,
    pub count: u64,
    pub x: f64,
    pub width: f64,
}

/// The bar of a session: terminal states first, then the phases of TODO.
pub fn segments(s: &Status) -> Vec<Segment> {
    let parts = [
        ("pass", s.pass),
        ("review", s.review),
        ("done", s.done),
        ("verifying", s.verifying),
        ("checking", s.checking),
        ("leased", s.leased),
        ("open", s.open),
    ];
    let total = s.total.max(1) as f64;
    let mut x = 0.0;
    parts
        .into_iter()
        .map(|(name, count)| {
            let width = count as f64 * 100.0 / total;
            let segment = Segment {
                name,
                count,
                x,
                width,
            };
            x += width;
            segment
        })
        .collect()
}

/// A session as a row of the dashboard or the head of its page.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    pub id: SessionId,
    pub name: String,
    pub gate: String,
    pub source_name: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub max_tries: u32,
    pub status: Status,
    pub live: Live,
}

/// The figures of a session that the console shows and keeps live, worked
/// out here once for the page and for its event stream: the script only
/// writes them in (text where text is shown, the bar's segments placed).
#[derive(Debug, Clone, Serialize)]
pub struct Live {
    /// Percent of quests decided (PASS or DONE; a quest in REVIEW is not).
    pub progress: u64,
    /// The agents' ETA while they have work; then the reviewers'.
    pub eta_seconds: Option<u64>,
    /// [`Self::eta_seconds`] as the page writes it (see [`duration`]).
    pub eta: String,
    /// Quests decided per minute over the last five, to one decimal: `12.5`.
    pub rate: String,
    /// Once the agents are done with quests waiting for a person, the words for it.
    pub backlog: Option<String>,
    /// The progress bar, in the order it is drawn.
    pub segments: Vec<Segment>,
}

impl Live {
    pub fn of(st: &Status) -> Live {
        let agents_done = st.remaining == 0;
        let eta_seconds = if agents_done {
            st.review_eta_seconds
        } else {
            st.eta_seconds
        };
        Live {
            progress: (st.pass + st.done) * 100 / st.total.max(1),
            eta_seconds,
            eta: duration(eta_seconds),
            rate: format!("{:.1}", st.rate_per_minute),
            backlog: (agents_done && st.review > 0)
                .then(|| crate::domain::backlog::agents_done(st.review)),
            segments: segments(st),
        }
    }
}

/// Seconds as `45 s`, `12 min`, `3 h 20 min` or `2 d 4 h`; `—` for none.
pub fn duration(value: Option<u64>) -> String {
    let Some(s) = value else {
        return "—".to_owned();
    };
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s.div_ceil(60)),
        3600..86400 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86400, (s % 86400) / 3600),
    }
}

/// A status as the console's event stream sends it: the API's, and the live figures.
#[derive(Debug, Clone, Serialize)]
pub struct LiveStatus<'a> {
    #[serde(flatten)]
    pub status: &'a Status,
    pub live: Live,
}

impl From<&api::Session> for SessionView {
    fn from(s: &api::Session) -> Self {
        let st = &s.status;
        SessionView {
            id: s.id,
            name: s.name.clone(),
            gate: s.config.gate.kind.clone(),
            source_name: s.source_name.clone(),
            created_by: s.created_by.clone(),
            created_at: s.created_at,
            max_tries: s.config.max_tries,
            live: Live::of(st),
            status: st.clone(),
        }
    }
}

/// One named value: a column of the input or a field of a result.
#[derive(Debug, Clone, Serialize)]
pub struct FieldView {
    pub name: String,
    pub text: String,
    /// Set when the value is an http(s) URL.
    pub link: Option<String>,
}

/// The text a value shows: a string as it is, anything else as compact JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The fields of a JSON object (or the value itself, unnamed).
pub fn fields(value: &Value) -> Vec<FieldView> {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| FieldView {
                name: k.clone(),
                text: text_of(v),
                link: v.as_str().and_then(safe_link),
            })
            .collect(),
        other => vec![FieldView {
            name: String::new(),
            text: text_of(other),
            link: None,
        }],
    }
}

/// A piece of a snippet; `mark` when it is a submitted value found on the page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub text: String,
    pub mark: bool,
}

/// Cuts `text` around every occurrence of a needle (ASCII letter case ignored).
pub fn highlight(text: &str, needles: &[String]) -> Vec<Part> {
    let lower = text.to_ascii_lowercase();
    let mut marks: Vec<(usize, usize)> = Vec::new();
    for needle in needles.iter().map(|n| n.to_ascii_lowercase()) {
        let mut from = 0;
        while let Some(at) = lower[from..].find(&needle) {
            let start = from + at;
            marks.push((start, start + needle.len()));
            from = start + needle.len();
        }
    }
    marks.sort();
    let mut parts = Vec::new();
    let mut at = 0;
    for (start, end) in marks {
        if start < at {
            continue; // overlaps a mark already made
        }
        if start > at {
            parts.push(Part {
                text: text[at..start].to_owned(),
                mark: false,
            });
        }
        parts.push(Part {
            text: text[start..end].to_owned(),
            mark: true,
        });
        at = end;
    }
    if at < text.len() {
        parts.push(Part {
            text: text[at..].to_owned(),
            mark: false,
        });
    }
    parts
}

/// The values of a result worth marking in a snippet.
fn needles(result: &Value) -> Vec<String> {
    let mut out: Vec<String> = match result {
        Value::Object(map) => map
            .values()
            .filter_map(Value::as_str)
            .filter(|s| s.len() >= 3 && safe_link(s).is_none())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// One labelled item of evidence.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceItem {
    pub label: String,
    /// A detail a reviewer rarely needs (digests, sizes, headers): folded away.
    pub minor: bool,
    /// `text`, `link`, `snippet` or `list`.
    pub kind: &'static str,
    pub text: String,
    pub parts: Vec<Part>,
    pub items: Vec<String>,
}

/// What one check of the gate observed.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceView {
    pub check: String,
    pub items: Vec<EvidenceItem>,
}

/// Evidence a reviewer rarely needs to see at once.
const MINOR: &[&str] = &["sha256", "bytes", "truncated", "content_type", "fetched_at"];

/// Evidence as labelled items: URLs as links, the snippet with the submitted
/// values marked, lists of hosts or addresses as lists, the rest as text.
pub fn evidence(evidence: &[Value], result: &Value) -> Vec<EvidenceView> {
    let needles = needles(result);
    let item = |label: &str, kind, text: String| EvidenceItem {
        label: label.to_owned(),
        minor: MINOR.contains(&label),
        kind,
        text,
        parts: Vec::new(),
        items: Vec::new(),
    };
    evidence
        .iter()
        .map(|e| {
            let Value::Object(map) = e else {
                return EvidenceView {
                    check: String::new(),
                    items: vec![item("", "text", text_of(e))],
                };
            };
            let check = map
                .get("check")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let items = map
                .iter()
                .filter(|(k, v)| k.as_str() != "check" && !v.is_null())
                .map(|(k, v)| match v {
                    Value::String(s) if k == "snippet" => EvidenceItem {
                        parts: highlight(s, &needles),
                        ..item(k, "snippet", s.clone())
                    },
                    Value::String(s) if safe_link(s).is_some() => item(k, "link", s.clone()),
                    Value::Array(list) if list.iter().all(Value::is_string) => EvidenceItem {
                        items: list.iter().map(text_of).collect(),
                        ..item(k, "list", String::new())
                    },
                    other => item(k, "text", text_of(other)),
                })
                .collect();
            EvidenceView { check, items }
        })
        .collect()
}

/// The agent name of an identity `<token id>/<name>`.
pub fn agent_name(agent: &str) -> &str {
    agent.split_once('/').map_or(agent, |(_, name)| name)
}

/// One submission in a quest's history.
#[derive(Debug, Clone, Serialize)]
pub struct SubmissionView {
    pub id: SubmissionId,
    pub number: usize,
    pub agent: String,
    pub agent_id: String,
    pub verdict: SubmissionVerdict,
    pub state_after: Option<State>,
    pub tries_after: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub gate: String,
    pub receipt: Option<String>,
    pub result: Vec<FieldView>,
    pub result_raw: Value,
    pub facts: Vec<Fact>,
    pub evidence: Vec<EvidenceView>,
    pub l2: Vec<L2Answer>,
}

/// A live review claim.
#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    pub by: String,
    pub until: DateTime<Utc>,
    /// Held by the signed-in reviewer.
    pub mine: bool,
}

/// A quest with its whole history.
#[derive(Debug, Clone, Serialize)]
pub struct QuestView {
    pub id: QuestId,
    pub session_id: SessionId,
    pub key: String,
    pub row: u64,
    pub state: State,
    pub phase: Option<Phase>,
    pub tries: u32,
    pub lapses: u32,
    pub decided_by: Option<String>,
    pub updated_at: DateTime<Utc>,
    pub receipt: Option<String>,
    pub input: Vec<FieldView>,
    pub result: Option<Vec<FieldView>>,
    pub last_facts: Vec<Fact>,
    pub claim: Option<Claim>,
    pub submissions: Vec<SubmissionView>,
    pub reviews: Vec<ReviewDecision>,
    /// How many reviewers' agreeing looks decide it.
    pub reviews_required: u32,
    /// Its reviewers' looks disagree: an adjudicator decides it.
    pub adjudication: bool,
    /// The submission the quest's state rests on (the latest), when there is one.
    pub current: Option<SubmissionView>,
    /// What the latest re-check left on a PASS quest.
    pub recheck_mark: Option<crate::domain::recheck::Mark>,
    pub rechecked_at: Option<DateTime<Utc>>,
    /// Every re-check, newest first.
    pub rechecks: Vec<api::Recheck>,
    /// Marked suspect by the gold floor (it stays PASS).
    pub suspect: bool,
    /// Found wrong by an audit (it stays PASS).
    pub audit_rejected: bool,
}

impl QuestView {
    /// Shapes a quest for its page; `me` is the signed-in token: a claim is
    /// its own when that token holds it, whatever the holder's name.
    pub fn new(q: api::Quest, now: DateTime<Utc>, me: TokenId) -> QuestView {
        let claim = match (&q.review_claimed_by, q.review_claim_expires_at) {
            (Some(by), Some(until)) if until > now && q.state == State::Review => Some(Claim {
                mine: q.review_claimed_by_token == Some(me),
                by: by.clone(),
                until,
            }),
            _ => None,
        };
        let submissions: Vec<SubmissionView> = q
            .submissions
            .iter()
            .enumerate()
            .map(|(i, s)| SubmissionView {
                id: s.id,
                number: i + 1,
                agent: agent_name(&s.agent).to_owned(),
                agent_id: s.agent.clone(),
                verdict: s.verdict,
                state_after: s.state_after,
                tries_after: s.tries_after,
                created_at: s.created_at,
                decided_at: s.decided_at,
                gate: match (&s.gate, &s.gate_version) {
                    (Some(g), Some(v)) => format!("{g} {v}"),
                    (Some(g), None) => g.clone(),
                    _ => String::new(),
                },
                receipt: s.receipt.clone(),
                result: fields(&s.result),
                result_raw: s.result.clone(),
                facts: s.facts.clone(),
                evidence: evidence(&s.evidence, &s.result),
                l2: q
                    .l2_answers
                    .iter()
                    .filter(|a| a.submission_id == s.id)
                    .cloned()
                    .collect(),
            })
            .collect();
        let rechecks = q.rechecks.iter().rev().cloned().collect();
        let adjudication = matches!(
            crate::service::review::standing(&q),
            Some((crate::domain::review::Stage::Adjudication, _))
        );
        QuestView {
            suspect: q.suspect,
            audit_rejected: q.audit_rejected,
            recheck_mark: q.recheck_mark,
            rechecked_at: q.rechecked_at,
            rechecks,
            id: q.id,
            session_id: q.session_id,
            key: q.key,
            row: q.row,
            state: q.state,
            phase: q.phase,
            tries: q.tries,
            lapses: q.lapses,
            decided_by: q.decided_by,
            updated_at: q.updated_at,
            receipt: q.receipt,
            input: fields(&q.input),
            result: q.result.as_ref().map(fields),
            last_facts: q.last_facts,
            claim,
            current: submissions.last().cloned(),
            submissions,
            reviews_required: q.reviews_required.unwrap_or(1),
            adjudication,
            reviews: q.reviews,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_http_and_https_urls_become_links() {
        assert_eq!(
            safe_link("https://acme.test/contact").as_deref(),
            Some("https://acme.test/contact")
        );
        assert!(safe_link("http://acme.test").is_some());
        for bad in [
            "javascript:alert(1)",
            "data:text/html,<b>",
            "JaVaScRiPt:alert(1)",
            "//acme.test",
            "mailto:a@b.test",
            "acme.test",
        ] {
            assert_eq!(safe_link(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_submitted_email_is_marked_in_the_snippet() {
        let parts = highlight(
            "Write to INFO@acme.test or sales@acme.test",
            &["info@acme.test".into()],
        );
        assert_eq!(
            parts,
            vec![
                Part {
                    text: "Write to ".into(),
                    mark: false
                },
                Part {
                    text: "INFO@acme.test".into(),
                    mark: true
                },
                Part {
                    text: " or sales@acme.test".into(),
                    mark: false
                },
            ]
        );
        assert_eq!(
            highlight("nothing here", &["x@y.test".into()]),
            vec![Part {
                text: "nothing here".into(),
                mark: false
            }]
        );
    }

    #[test]
    fn evidence_is_labelled_with_links_lists_and_a_marked_snippet() {
        let result = json!({"email": "info@acme.test", "source": "https://acme.test/contact"});
        let views = evidence(
            &[
                json!({"check": "source", "url": "https://acme.test/contact", "status": 200, "snippet": "mail info@acme.test now"}),
                json!({"check": "mx", "hosts": ["mx1.acme.test"], "url": "javascript:alert(1)"}),
            ],
            &result,
        );
        assert_eq!(views[0].check, "source");
        let kinds: Vec<_> = views[0]
            .items
            .iter()
            .map(|i| (i.label.as_str(), i.kind))
            .collect();
        assert_eq!(
            kinds,
            [("url", "link"), ("status", "text"), ("snippet", "snippet")]
        );
        let folded = evidence(
            &[json!({"check": "source", "sha256": "ab", "snippet": null})],
            &result,
        );
        assert_eq!(folded[0].items.len(), 1, "a missing value is left out");
        assert!(folded[0].items[0].minor, "a digest is folded away");
        assert!(
            views[0].items[2]
                .parts
                .iter()
                .any(|p| p.mark && p.text == "info@acme.test")
        );
        assert_eq!(views[1].items[0].kind, "list");
        assert_eq!(
            views[1].items[1].kind, "text",
            "a javascript: URL is text, never a link"
        );
    }

    #[test]
    fn the_bar_is_cut_in_proportion_to_the_counts() {
        let status: Status = serde_json::from_value(json!({
            "session_id": uuid::Uuid::nil(), "total": 4, "remaining": 2, "open": 1, "leased": 1, "checking": 0,
            "verifying": 0, "pass": 1, "review": 1, "done": 0, "submissions": 2, "agents_active": 1,
            "rate_per_minute": 0.0, "eta_seconds": null
        }))
        .unwrap();
        let s = segments(&status);
        assert_eq!((s[0].name, s[0].x, s[0].width), ("pass", 0.0, 25.0));
        assert_eq!((s[1].name, s[1].x), ("review", 25.0));
        assert_eq!((s[6].name, s[6].x, s[6].width), ("open", 75.0, 25.0));
        assert_eq!(
            query(&[("a", Some("x y&")), ("b", None), ("c", Some(""))]),
            "?a=x%20y%26"
        );
    }
}
