//! Reading a command gate program's verdict JSON, from either channel: the
//! lines of its stdout, or the whole content of its verdict descriptor. Pure
//! functions over bytes, so every reading is a unit test.

use serde::Deserialize;
use serde_json::Value;

use crate::domain::Verdict;
use crate::process::{Channel, MAX_VERDICT};

/// What a program may print. Unknown keys are ignored; fact parts may be any JSON.
#[derive(Debug, Deserialize)]
pub(super) struct Printed {
    verdict: String,
    #[serde(default)]
    pub(super) facts: Vec<PrintedFact>,
    #[serde(default)]
    pub(super) evidence: Vec<Value>,
}

/// One fact as printed.
#[derive(Debug, Deserialize)]
pub(super) struct PrintedFact {
    #[serde(default)]
    pub(super) check: Option<Value>,
    #[serde(default)]
    pub(super) field: Option<Value>,
    #[serde(default)]
    pub(super) expected: Option<Value>,
    #[serde(default)]
    pub(super) actual: Option<Value>,
    #[serde(default)]
    pub(super) hint: Option<Value>,
}

/// What a program's stdout says.
pub(super) enum Reading {
    /// No verdict JSON: the exit status decides.
    Nothing,
    /// The verdict JSON: the whole stdout, or else its last line.
    Verdict(Printed, Verdict),
    /// The last line is a verdict, and an earlier line printed a different one.
    Disagreeing(Vec<&'static str>),
}

/// Reads the verdict JSON: the whole (trimmed) stdout, or else its last line.
/// Other lines that look like a different verdict make the reading conflicting:
/// a program that prints its verdict and then output it does not control
/// (an agent's test) must not have its verdict overridden.
pub(super) fn read_printed(text: &str) -> Reading {
    if let Some((printed, verdict)) = verdict_of(text) {
        return Reading::Verdict(printed, verdict);
    }
    let Some((printed, verdict)) = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| verdict_of(l.trim()))
    else {
        return Reading::Nothing;
    };
    let mut seen = vec![verdict.as_str()];
    for (_, other) in text.lines().filter_map(|l| verdict_of(l.trim())) {
        if !seen.contains(&other.as_str()) {
            seen.push(other.as_str());
        }
    }
    if seen.len() > 1 {
        return Reading::Disagreeing(seen);
    }
    Reading::Verdict(printed, verdict)
}

/// One verdict JSON object, if `text` is one.
fn verdict_of(text: &str) -> Option<(Printed, Verdict)> {
    if !text.starts_with('{') {
        return None;
    }
    verdict_in(serde_json::from_str::<Value>(text).ok()?)
}

/// The verdict document `value` is, if it is one.
fn verdict_in(value: Value) -> Option<(Printed, Verdict)> {
    let printed = serde_json::from_value::<Printed>(value).ok()?;
    let verdict = match printed.verdict.trim().to_ascii_uppercase().as_str() {
        "PASS" => Verdict::Pass,
        "FAIL" => Verdict::Fail,
        "REVIEW" => Verdict::Review,
        _ => return None,
    };
    Some((printed, verdict))
}

/// Why a verdict channel holds no verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChannelFault {
    /// Nothing was written (or only whitespace).
    Nothing,
    /// It ends inside a JSON document, or ran past [`MAX_VERDICT`] bytes.
    Cut,
    /// Bytes that are not JSON, before or after the document.
    TrailingBytes,
    /// More than one JSON document.
    TwoDocuments,
    /// One JSON document, but not `{"verdict": "PASS" | "FAIL" | "REVIEW", ...}`.
    NotAVerdict,
}

impl ChannelFault {
    /// What the channel held instead of one verdict document.
    pub(super) fn described(self) -> String {
        match self {
            ChannelFault::Nothing => "nothing was written to it".into(),
            ChannelFault::Cut => format!(
                "it was cut: it ends inside a JSON document, or holds more than {MAX_VERDICT} bytes"
            ),
            ChannelFault::TrailingBytes => {
                "bytes that are not JSON follow or precede the document".into()
            }
            ChannelFault::TwoDocuments => "more than one JSON document".into(),
            ChannelFault::NotAVerdict => {
                "a JSON document that is not {\"verdict\": \"PASS\" | \"FAIL\" | \"REVIEW\"}".into()
            }
        }
    }
}

/// The verdict a channel holds: exactly one JSON verdict document, optionally
/// followed by whitespace. Anything else is a fault, never a guess: a second
/// document or trailing bytes may be someone else's words.
pub(super) fn read_channel(channel: &Channel) -> Result<(Printed, Verdict), ChannelFault> {
    if channel.cut {
        return Err(ChannelFault::Cut);
    }
    if channel.bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ChannelFault::Nothing);
    }
    let mut documents = serde_json::Deserializer::from_slice(&channel.bytes).into_iter::<Value>();
    let first = match documents.next() {
        Some(Ok(value)) => value,
        Some(Err(e)) if e.is_eof() => return Err(ChannelFault::Cut),
        Some(Err(_)) => return Err(ChannelFault::TrailingBytes),
        None => return Err(ChannelFault::Nothing),
    };
    match documents.next() {
        None => {}
        Some(Ok(_)) => return Err(ChannelFault::TwoDocuments),
        Some(Err(_)) => return Err(ChannelFault::TrailingBytes),
    }
    verdict_in(first).ok_or(ChannelFault::NotAVerdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<Verdict, ChannelFault> {
        read_channel(&Channel {
            bytes: bytes.to_vec(),
            cut: false,
        })
        .map(|(_, verdict)| verdict)
    }

    #[test]
    fn one_verdict_document_optionally_followed_by_whitespace_is_the_verdict() {
        assert_eq!(read(br#"{"verdict": "FAIL"}"#), Ok(Verdict::Fail));
        assert_eq!(
            read(b"\n {\"verdict\": \"pass\"}\n\n\t "),
            Ok(Verdict::Pass)
        );
        let (printed, _) = read_channel(&Channel {
            bytes: br#"{"verdict": "FAIL", "facts": [{"actual": 41}], "evidence": [1]}"#.to_vec(),
            cut: false,
        })
        .unwrap();
        assert_eq!(printed.facts.len(), 1);
        assert_eq!(printed.evidence, [serde_json::json!(1)]);
    }

    #[test]
    fn two_documents_trailing_bytes_a_cut_channel_or_nothing_are_each_named() {
        for (bytes, fault) in [
            (&b""[..], ChannelFault::Nothing),
            (b"  \n", ChannelFault::Nothing),
            (
                br#"{"verdict": "FAIL"}{"verdict": "PASS"}"#,
                ChannelFault::TwoDocuments,
            ),
            (
                b"{\"verdict\": \"FAIL\"}\n{\"verdict\": \"PASS\"}\n",
                ChannelFault::TwoDocuments,
            ),
            (br#"{"verdict": "PASS"} 1"#, ChannelFault::TwoDocuments),
            (br#"{"verdict": "FAIL"} PASS"#, ChannelFault::TrailingBytes),
            (br#"ok {"verdict": "PASS"}"#, ChannelFault::TrailingBytes),
            (br#"{"verdict": "PA"#, ChannelFault::Cut),
            (br#"{"verdict": "MAYBE"}"#, ChannelFault::NotAVerdict),
            (b"[1, 2]", ChannelFault::NotAVerdict),
        ] {
            assert_eq!(
                read(bytes),
                Err(fault),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let long = Channel {
            bytes: br#"{"verdict": "PASS"}"#.to_vec(),
            cut: true,
        };
        assert_eq!(
            read_channel(&long).map(|(_, v)| v),
            Err(ChannelFault::Cut),
            "a channel longer than the cap is cut, whatever its head says"
        );
    }

    #[test]
    fn on_stdout_the_last_line_is_read_and_a_contradicting_line_disagrees() {
        assert!(matches!(
            read_printed("running\n{\"verdict\": \"FAIL\"}"),
            Reading::Verdict(_, Verdict::Fail)
        ));
        assert!(matches!(read_printed("all good"), Reading::Nothing));
        match read_printed("{\"verdict\": \"FAIL\"}\nout\n{\"verdict\": \"PASS\"}") {
            Reading::Disagreeing(seen) => assert_eq!(seen, ["PASS", "FAIL"]),
            _ => panic!("contradicting lines disagree"),
        }
    }
}
