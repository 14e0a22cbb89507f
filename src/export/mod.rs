//! Exports: the original rows, in order and with their original values, plus the
//! quest columns. CSV and JSONL stream page by page; XLSX is written on the
//! blocking pool in constant-memory mode ([`xlsx`]), so memory does not grow
//! with the session in any format.
//!
//! Agents are untrusted, so what they sent never shapes the file: the result
//! columns are the gate's declared fields, every other key goes, capped, into
//! one `result_extra` column, and a text cell a spreadsheet would evaluate as
//! a formula is neutralised the way OWASP describes for CSV injection (a
//! leading `'`) in CSV and XLSX alike. JSONL, which no spreadsheet evaluates,
//! carries the values as they are.
//!
//! Exports are bounded: [`Exports`] hands out a fixed number of slots, two at
//! most per token, and a slot lives as long as the work does, so that a
//! client that goes away, or stops reading, frees its slot ([`slots`]).

pub mod slots;
pub mod xlsx;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures_util::Stream;
use serde_json::{Map, Value};

use self::slots::end_when_idle;
pub use self::slots::{Exports, NoSlot, RETRY_AFTER_SECONDS, Slot, StreamError};
use crate::domain::ids::SessionId;
use crate::domain::table::cell_as_text;
use crate::store::{ExportRow, Store, StoreError};

/// Rows read per page.
const PAGE: u32 = 500;

/// The longest `result_extra` cell, in bytes of JSON.
pub const RESULT_EXTRA_MAX: usize = 4096;

/// The export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Csv,
    Jsonl,
    Xlsx,
}

impl ExportFormat {
    /// Parses `csv`, `jsonl` or `xlsx`.
    pub fn parse(s: &str) -> Option<ExportFormat> {
        match s {
            "csv" => Some(ExportFormat::Csv),
            "jsonl" => Some(ExportFormat::Jsonl),
            "xlsx" => Some(ExportFormat::Xlsx),
            _ => None,
        }
    }

    /// The media type and file extension.
    pub fn media_type(self) -> (&'static str, &'static str) {
        match self {
            ExportFormat::Csv => ("text/csv; charset=utf-8", "csv"),
            ExportFormat::Jsonl => ("application/x-ndjson", "jsonl"),
            ExportFormat::Xlsx => (
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                "xlsx",
            ),
        }
    }
}

/// The columns of one export.
#[derive(Debug, Clone)]
pub struct Plan {
    pub session_id: SessionId,
    pub columns: Vec<String>,
    /// The gate's declared fields, one `result_<field>` column each.
    pub result_fields: Vec<String>,
    /// Whether some accepted result holds keys the gate does not declare.
    pub extra: bool,
    /// Whether the session has several reviewers: a `quest_reviews` column
    /// then gives every decision of a decided quest.
    pub reviews: bool,
    /// Every column name, unique: original columns as they are, then the added ones.
    header: Vec<String>,
}

impl Plan {
    /// The plan of a session whose gate declares `declared`: reads its columns
    /// and whether any accepted result holds other keys.
    pub async fn new(
        store: &dyn Store,
        session_id: SessionId,
        declared: Vec<String>,
    ) -> Result<Plan, StoreError> {
        let session = store.get_session(session_id).await?;
        let used = store.result_fields(session_id).await?;
        let extra = used.iter().any(|f| !declared.contains(f));
        let plan = Plan::with_columns(session_id, session.columns, declared, extra);
        Ok(plan.with_reviews(session.config.reviewers() > 1))
    }

    /// A plan for these original columns and declared result fields.
    pub fn with_columns(
        session_id: SessionId,
        columns: Vec<String>,
        result_fields: Vec<String>,
        extra: bool,
    ) -> Plan {
        let mut added: Vec<String> = ["quest_state", "quest_decided_by", "quest_tries"]
            .map(String::from)
            .to_vec();
        added.extend(result_fields.iter().map(|f| format!("result_{f}")));
        if extra {
            added.push("result_extra".into());
        }
        added.extend(
            [
                "quest_facts",
                "quest_evidence",
                "quest_receipt",
                // After SPEC §6's columns: what the latest re-check found.
                "quest_stale",
                "quest_rechecked_at",
                "quest_recheck_facts",
                // After the re-check's: the gold floor's and the audits' marks.
                "quest_suspect",
                "quest_audit",
            ]
            .map(String::from),
        );
        // An added column never hides an original one: a clash gets a numbered suffix.
        let mut taken: std::collections::HashSet<String> = columns.iter().cloned().collect();
        let mut header = columns.clone();
        for name in added {
            let mut unique = name.clone();
            let mut n = 2;
            while taken.contains(&unique) {
                unique = format!("{name}_{n}");
                n += 1;
            }
            taken.insert(unique.clone());
            header.push(unique);
        }
        Plan {
            session_id,
            columns,
            result_fields,
            extra,
            reviews: false,
            header,
        }
    }

    /// The plan with a last `quest_reviews` column, when `reviews`.
    pub fn with_reviews(mut self, reviews: bool) -> Plan {
        if reviews {
            let taken: std::collections::HashSet<&String> = self.header.iter().collect();
            let mut name = "quest_reviews".to_owned();
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("quest_reviews_{n}");
                n += 1;
            }
            self.header.push(name);
            self.reviews = true;
        }
        self
    }

    /// The header: original columns, then the quest columns.
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// One row as JSON values, in header order.
    fn values(&self, row: &ExportRow) -> Vec<Value> {
        let mut v: Vec<Value> = Vec::with_capacity(self.header.len());
        v.extend(self.columns.iter().map(|c| {
            row.input
                .get(c)
                .cloned()
                .unwrap_or(Value::String(String::new()))
        }));
        v.push(Value::String(row.state.as_str().to_owned()));
        v.push(row.decided_by.clone().map_or(Value::Null, Value::String));
        v.push(Value::from(row.tries));
        let result = row.result.as_ref();
        for field in &self.result_fields {
            v.push(
                result
                    .and_then(|r| r.get(field))
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
        if self.extra {
            v.push(result.map_or(Value::Null, |r| extra_cell(r, &self.result_fields)));
        }
        v.push(if row.last_facts.is_empty() {
            Value::Null
        } else {
            Value::String(serde_json::to_string(&row.last_facts).unwrap_or_default())
        });
        v.push(if row.last_evidence.is_empty() {
            Value::Null
        } else {
            Value::String(serde_json::to_string(&row.last_evidence).unwrap_or_default())
        });
        v.push(row.receipt.clone().map_or(Value::Null, Value::String));
        v.push(
            row.recheck_mark
                .map_or(Value::Null, |m| Value::String(m.as_str().to_owned())),
        );
        v.push(row.rechecked_at.map_or(Value::Null, |t| {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        }));
        v.push(if row.recheck_facts.is_empty() {
            Value::Null
        } else {
            Value::String(serde_json::to_string(&row.recheck_facts).unwrap_or_default())
        });
        v.push(if row.suspect {
            Value::Bool(true)
        } else {
            Value::Null
        });
        v.push(
            row.audit
                .map_or(Value::Null, |a| Value::String(a.to_owned())),
        );
        if self.reviews {
            v.push(row.reviews.clone().map_or(Value::Null, Value::String));
        }
        v
    }
}

/// The keys of `result` the gate does not declare, as compact JSON text of at
/// most [`RESULT_EXTRA_MAX`] bytes: keys in the agent's order while they fit,
/// then one `"…"` key that says how many were left out (the whole result stays
/// in the submission record).
fn extra_cell(result: &Map<String, Value>, declared: &[String]) -> Value {
    let mut kept = Map::new();
    let (mut size, mut left_out) = (2usize, 0usize);
    for (key, value) in result.iter().filter(|(k, _)| !declared.contains(k)) {
        // Key, value, quotes, colon, comma.
        let cost = serde_json::to_string(key).map_or(usize::MAX, |k| k.len())
            + serde_json::to_string(value).map_or(usize::MAX, |v| v.len())
            + 2;
        if left_out == 0 && size.saturating_add(cost) <= RESULT_EXTRA_MAX - 96 {
            size += cost;
            kept.insert(key.clone(), value.clone());
        } else {
            left_out += 1;
        }
    }
    if kept.is_empty() && left_out == 0 {
        return Value::Null;
    }
    if left_out > 0 {
        kept.insert(
            "…".into(),
            Value::String(format!(
                "{left_out} more keys left out; GET /v1/quests/{{id}} has the whole result"
            )),
        );
    }
    Value::String(Value::Object(kept).to_string())
}

/// Whether `text` is a plain decimal number (`-12`, `+3.5`, `1e-3`): data a
/// spreadsheet reads as a number, never as a formula.
fn is_plain_number(text: &str) -> bool {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match digits.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
        None => (digits, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, "0"));
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    all_digits(whole) && all_digits(fraction) && exponent.is_none_or(all_digits)
}

/// A text cell as a spreadsheet must show it: one that starts with `=`, `+`,
/// `-`, `@`, a tab, a carriage return, a line feed or NUL gets a leading `'`
/// (OWASP's advice against CSV injection), unless it is a plain number.
pub fn neutralise(text: String) -> String {
    let risky = matches!(
        text.as_bytes().first(),
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r' | b'\n' | b'\0')
    );
    if risky && !is_plain_number(&text) {
        format!("'{text}")
    } else {
        text
    }
}

fn csv_line(cells: impl IntoIterator<Item = String>) -> Bytes {
    let mut writer = csv::Writer::from_writer(Vec::new());
    // Writing to a Vec cannot fail.
    let _ = writer.write_record(cells);
    Bytes::from(writer.into_inner().unwrap_or_default())
}

fn render(format: ExportFormat, plan: &Plan, rows: &[ExportRow]) -> Bytes {
    let mut out = Vec::new();
    for row in rows {
        let values = plan.values(row);
        match format {
            ExportFormat::Csv => out.extend_from_slice(&csv_line(values.iter().map(|v| match v {
                Value::String(s) => neutralise(s.clone()),
                other => cell_as_text(other),
            }))),
            _ => {
                let object: Map<String, Value> =
                    plan.header().iter().cloned().zip(values).collect();
                out.extend_from_slice(Value::Object(object).to_string().as_bytes());
                out.push(b'\n');
            }
        }
    }
    Bytes::from(out)
}

/// Streams a CSV or JSONL export page by page, holding `slot` until the last
/// page is out, the stream is dropped, or nobody reads it for `idle`.
pub fn stream(
    store: Arc<dyn Store>,
    plan: Plan,
    format: ExportFormat,
    slot: Slot,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, StreamError>> + Send {
    end_when_idle(slot, idle, move |slot| {
        let head = (format == ExportFormat::Csv)
            .then(|| csv_line(plan.header().iter().cloned().map(neutralise)));
        let first = futures_util::stream::iter(head.map(Ok));
        let pages = futures_util::stream::try_unfold(
            (store, plan, None, Some(slot)),
            move |(store, plan, after, slot)| async move {
                let Some(slot) = slot else {
                    return Ok(None);
                };
                let rows = store
                    .export_page(plan.session_id, after, PAGE, plan.reviews)
                    .await?;
                let last = rows.last().map(|r| r.row_index);
                let chunk = render(format, &plan, &rows);
                let slot = if (rows.len() as u32) < PAGE {
                    slot.finish();
                    None
                } else {
                    Some(slot)
                };
                Ok(Some((chunk, (store, plan, last.or(after), slot))))
            },
        );
        futures_util::StreamExt::chain(first, pages)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_columns_never_hide_original_ones() {
        let columns = ["company", "quest_state", "result_email"]
            .map(String::from)
            .to_vec();
        let plan = Plan::with_columns(SessionId::new(), columns, vec!["email".into()], false);
        assert_eq!(
            plan.header(),
            [
                "company",
                "quest_state",
                "result_email",
                "quest_state_2",
                "quest_decided_by",
                "quest_tries",
                "result_email_2",
                "quest_facts",
                "quest_evidence",
                "quest_receipt",
                "quest_stale",
                "quest_rechecked_at",
                "quest_recheck_facts",
                "quest_suspect",
                "quest_audit"
            ]
        );
    }

    #[test]
    fn cells_a_spreadsheet_would_evaluate_are_neutralised_and_numbers_are_not() {
        for risky in [
            "=1+1",
            "+cmd|' /C calc'!A0",
            "-2+3",
            "@SUM(A1)",
            "\tx",
            "\rx",
            "\nx",
            "=HYPERLINK(\"http://x\")",
        ] {
            assert_eq!(neutralise(risky.into()), format!("'{risky}"), "{risky:?}");
        }
        for plain in ["-12", "+3.5", "-1e-3", "Acme", "a=b", "", "'quoted"] {
            assert_eq!(neutralise(plain.into()), plain, "{plain:?}");
        }
        assert_eq!(neutralise("-".into()), "'-");
        assert_eq!(neutralise("+1 555 1234".into()), "'+1 555 1234");
    }

    #[test]
    fn undeclared_keys_share_one_capped_column() {
        let declared = vec!["email".to_owned()];
        let small: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"email": "a@b.test", "note": "hi"})).unwrap();
        assert_eq!(
            extra_cell(&small, &declared),
            Value::String(r#"{"note":"hi"}"#.into())
        );
        let only_declared: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"email": "a@b.test"})).unwrap();
        assert_eq!(extra_cell(&only_declared, &declared), Value::Null);
        let junk: Map<String, Value> = (0..20_000)
            .map(|i| (format!("junk{i}"), Value::from(i)))
            .collect();
        let Value::String(cell) = extra_cell(&junk, &declared) else {
            panic!("a text cell");
        };
        assert!(cell.len() <= RESULT_EXTRA_MAX, "{} bytes", cell.len());
        let parsed: Map<String, Value> = serde_json::from_str(&cell).unwrap();
        assert_eq!(parsed["junk0"], 0, "the first keys are kept");
        assert!(parsed["…"].as_str().unwrap().contains("more keys left out"));
    }
}
