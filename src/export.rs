//! Exports: the original rows, in order and with their original values, plus the
//! quest columns. CSV and JSONL stream page by page, so memory does not grow with
//! the session; XLSX is assembled in memory because the format is a zip.

use std::sync::Arc;

use axum::body::Bytes;
use futures_util::Stream;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::domain::table::cell_as_text;
use crate::store::{ExportRow, Store, StoreError};

/// Rows read per page.
const PAGE: u32 = 500;

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
    pub session_id: Uuid,
    pub columns: Vec<String>,
    pub result_fields: Vec<String>,
    /// Every column name, unique: original columns as they are, then the added ones.
    header: Vec<String>,
}

impl Plan {
    /// Reads the session's columns and the result fields its quests produced.
    pub async fn new(store: &dyn Store, session_id: Uuid) -> Result<Plan, StoreError> {
        let session = store.get_session(session_id).await?;
        let result_fields = store.result_fields(session_id).await?;
        Ok(Plan::with_columns(
            session_id,
            session.columns,
            result_fields,
        ))
    }

    /// A plan for these original columns and result fields.
    pub fn with_columns(
        session_id: Uuid,
        columns: Vec<String>,
        result_fields: Vec<String>,
    ) -> Plan {
        let mut added: Vec<String> = ["quest_state", "quest_decided_by", "quest_tries"]
            .map(String::from)
            .to_vec();
        added.extend(result_fields.iter().map(|f| format!("result_{f}")));
        added.extend(["quest_facts", "quest_evidence", "quest_receipt"].map(String::from));
        // An added column never hides an original one: a clash gets a numbered suffix.
        let mut header = columns.clone();
        for name in added {
            let mut unique = name.clone();
            let mut n = 2;
            while header.contains(&unique) {
                unique = format!("{name}_{n}");
                n += 1;
            }
            header.push(unique);
        }
        Plan {
            session_id,
            columns,
            result_fields,
            header,
        }
    }

    /// The header: original columns, then the quest columns.
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// One row as JSON values, in header order.
    fn values(&self, row: &ExportRow) -> Vec<Value> {
        let mut v: Vec<Value> = self
            .columns
            .iter()
            .map(|c| {
                row.input
                    .get(c)
                    .cloned()
                    .unwrap_or(Value::String(String::new()))
            })
            .collect();
        v.push(Value::String(row.state.as_str().to_owned()));
        v.push(row.decided_by.clone().map_or(Value::Null, Value::String));
        v.push(Value::from(row.tries));
        for field in &self.result_fields {
            v.push(
                row.result
                    .as_ref()
                    .and_then(|r| r.get(field))
                    .cloned()
                    .unwrap_or(Value::Null),
            );
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
        v
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
            ExportFormat::Csv => out.extend_from_slice(&csv_line(values.iter().map(cell_as_text))),
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

/// Streams a CSV or JSONL export page by page.
pub fn stream(
    store: Arc<dyn Store>,
    plan: Plan,
    format: ExportFormat,
) -> impl Stream<Item = Result<Bytes, StoreError>> + Send {
    let head = (format == ExportFormat::Csv).then(|| csv_line(plan.header().iter().cloned()));
    let first = futures_util::stream::iter(head.map(Ok));
    let pages = futures_util::stream::try_unfold(
        (store, plan, None, false),
        move |(store, plan, after, done)| async move {
            if done {
                return Ok(None);
            }
            let rows = store.export_page(plan.session_id, after, PAGE).await?;
            let last = rows.last().map(|r| r.row_index);
            let chunk = render(format, &plan, &rows);
            let done = (rows.len() as u32) < PAGE;
            Ok(Some((chunk, (store, plan, last.or(after), done))))
        },
    );
    futures_util::StreamExt::chain(first, pages)
}

/// Builds an XLSX export in memory.
pub async fn xlsx(store: &dyn Store, plan: &Plan) -> Result<Vec<u8>, anyhow::Error> {
    use rust_xlsxwriter::{Format, Workbook};
    let mut book = Workbook::new();
    let sheet = book.add_worksheet().set_name("quests")?;
    let bold = Format::new().set_bold();
    for (col, name) in plan.header().iter().enumerate() {
        sheet.write_string_with_format(0, col as u16, name, &bold)?;
    }
    let mut after = None;
    let mut line = 1u32;
    loop {
        let rows = store.export_page(plan.session_id, after, PAGE).await?;
        for row in &rows {
            for (col, value) in plan.values(row).iter().enumerate() {
                let col = col as u16;
                match value {
                    Value::Null => {}
                    Value::Number(n) if n.as_f64().is_some() => {
                        sheet.write_number(line, col, n.as_f64().unwrap_or_default())?;
                    }
                    Value::Bool(b) => {
                        sheet.write_boolean(line, col, *b)?;
                    }
                    other => {
                        sheet.write_string(line, col, cell_as_text(other))?;
                    }
                }
            }
            line += 1;
        }
        after = rows.last().map(|r| r.row_index).or(after);
        if (rows.len() as u32) < PAGE {
            break;
        }
    }
    Ok(book.save_to_buffer()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_columns_never_hide_original_ones() {
        let columns = ["company", "quest_state", "result_email"]
            .map(String::from)
            .to_vec();
        let plan = Plan::with_columns(Uuid::nil(), columns, vec!["email".into()]);
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
                "quest_receipt"
            ]
        );
    }
}
