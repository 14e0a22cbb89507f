//! The XLSX export: pages are read on the runtime and handed over a small
//! channel to a writer on the blocking pool, which keeps rows in
//! rust_xlsxwriter's constant-memory mode (a temporary file) and saves the
//! workbook into another temporary file, served from disk.
//!
//! The reading side lives in the request's future: when the client goes away
//! the future is dropped, the channel closes, and the writer stops at its next
//! page without saving anything.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use rust_xlsxwriter::{Format, Workbook, Worksheet, XlsxError};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{PAGE, Plan, Slot, neutralise};
use crate::domain::quality::Quality;
use crate::domain::table::cell_as_text;
use crate::store::{ExportRow, Store, StoreError};

/// The most characters a spreadsheet cell holds.
const CELL_MAX_CHARS: usize = 32_767;
/// XLSX has 16,384 columns.
const MAX_COLUMNS: usize = 16_384;

/// Why an XLSX export could not be built.
#[derive(Debug, thiserror::Error)]
pub enum XlsxExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The session has more columns than a worksheet.
    #[error("the export has {0} columns and a worksheet holds 16384: export CSV or JSONL instead")]
    TooWide(usize),
    #[error("the workbook could not be written: {0}")]
    Write(String),
    /// The request went away before the workbook was done.
    #[error("the export was cancelled")]
    Cancelled,
}

impl From<XlsxError> for XlsxExportError {
    fn from(e: XlsxError) -> Self {
        XlsxExportError::Write(e.to_string())
    }
}

impl From<std::io::Error> for XlsxExportError {
    fn from(e: std::io::Error) -> Self {
        XlsxExportError::Write(e.to_string())
    }
}

enum Page {
    Rows(Vec<ExportRow>),
    End,
}

/// Builds the workbook of `plan` into an unnamed temporary file, rewound.
/// `slot` is held by the writer until it is done or gives up.
pub async fn build(
    store: Arc<dyn Store>,
    plan: Plan,
    quality: Quality,
    temp_dir: Option<&Path>,
    slot: Slot,
) -> Result<File, XlsxExportError> {
    if plan.header().len() > MAX_COLUMNS {
        return Err(XlsxExportError::TooWide(plan.header().len()));
    }
    let (session_id, reviews) = (plan.session_id, plan.reviews);
    let temp_dir = temp_dir.map(Path::to_path_buf);
    // Two pages in flight: the reader stays one page ahead of the writer.
    let (pages, received) = mpsc::channel(2);
    let writer = tokio::task::spawn_blocking(move || {
        let mut slot = slot;
        let file = write(&plan, &quality, received, temp_dir.as_deref())?;
        slot.finish();
        Ok::<_, XlsxExportError>(file)
    });
    let mut after = None;
    loop {
        let rows = store.export_page(session_id, after, PAGE, reviews).await?;
        let last_page = (rows.len() as u32) < PAGE;
        after = rows.last().map(|r| r.row_index).or(after);
        if pages.send(Page::Rows(rows)).await.is_err() {
            break;
        }
        if last_page {
            let _ = pages.send(Page::End).await;
            break;
        }
    }
    drop(pages);
    writer
        .await
        .map_err(|e| XlsxExportError::Write(e.to_string()))?
}

fn write(
    plan: &Plan,
    quality: &Quality,
    mut pages: mpsc::Receiver<Page>,
    temp_dir: Option<&Path>,
) -> Result<File, XlsxExportError> {
    let mut book = Workbook::new();
    if let Some(dir) = temp_dir {
        book.set_tempdir(dir)?;
    }
    let sheet = book.add_worksheet_with_constant_memory()?;
    sheet.set_name("quests")?;
    let bold = Format::new().set_bold();
    for (col, name) in plan.header().iter().enumerate() {
        sheet.write_string_with_format(0, col as u16, cell(name), &bold)?;
    }
    let mut line = 1u32;
    loop {
        match pages.blocking_recv() {
            Some(Page::Rows(rows)) => {
                for row in &rows {
                    write_row(sheet, line, 0, &plan.values(row))?;
                    line += 1;
                }
            }
            Some(Page::End) => break,
            None => return Err(XlsxExportError::Cancelled),
        }
    }
    write_quality(&mut book, quality, &bold)?;
    let mut file = match temp_dir {
        Some(dir) => tempfile::tempfile_in(dir)?,
        None => tempfile::tempfile()?,
    };
    book.save_to_writer(&mut file)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(file)
}

/// The `quality` sheet: how wrong the PASS rows may be, the method and
/// every count the bound rests on (the figures of `GET …/quality`).
fn write_quality(book: &mut Workbook, q: &Quality, bold: &Format) -> Result<(), XlsxError> {
    let sheet = book.add_worksheet();
    sheet.set_name("quality")?;
    let share = |x: Option<f64>| x.map_or(Value::Null, Value::from);
    let mut rows: Vec<(&str, Value)> = vec![
        ("summary", q.summary.clone().into()),
        ("measured", q.measured.into()),
        ("method", q.method.clone().into()),
        ("confidence", q.confidence.into()),
        ("error_bound", share(q.error_bound)),
        ("audited", q.audited.into()),
        ("errors", q.errors.into()),
        ("audit_rate", share(q.audit_rate)),
        ("pending_audits", q.pending_audits.into()),
        ("covered", q.covered.into()),
        ("unaudited", q.unaudited.into()),
        ("decided_by_person", q.decided_by_person.into()),
    ];
    for s in &q.strata {
        let name = serde_json::to_value(s.stratum).expect("plain data serialises");
        let name = name.as_str().unwrap_or_default();
        rows.push((
            "stratum",
            format!("{name}: {} wrong in {} audits", s.errors, s.audited).into(),
        ));
    }
    for (line, (name, value)) in rows.iter().enumerate() {
        sheet.write_string_with_format(line as u32, 0, *name, bold)?;
        write_row(sheet, line as u32, 1, std::slice::from_ref(value))?;
    }
    Ok(())
}

/// Writes `values` on `line` from column `first` on.
fn write_row(
    sheet: &mut Worksheet,
    line: u32,
    first: u16,
    values: &[Value],
) -> Result<(), XlsxError> {
    for (col, value) in values.iter().enumerate() {
        // The header has at most MAX_COLUMNS columns, checked before writing.
        let col = first + col as u16;
        match value {
            Value::Null => {}
            Value::Number(n) if n.as_f64().is_some() => {
                sheet.write_number(line, col, n.as_f64().unwrap_or_default())?;
            }
            Value::Bool(b) => {
                sheet.write_boolean(line, col, *b)?;
            }
            other => {
                sheet.write_string(line, col, cell(&cell_as_text(other)))?;
            }
        }
    }
    Ok(())
}

/// Text as a worksheet cell: neutralised, and cut to the cell's limit.
fn cell(text: &str) -> String {
    let text = neutralise(text.to_owned());
    if text.chars().count() <= CELL_MAX_CHARS {
        return text;
    }
    let marker = "… [cut: the cell limit is 32767 characters]";
    let keep = CELL_MAX_CHARS - marker.chars().count();
    text.chars().take(keep).chain(marker.chars()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_past_the_spreadsheet_limit_is_cut_and_says_so() {
        let long = cell(&"x".repeat(40_000));
        assert_eq!(long.chars().count(), CELL_MAX_CHARS);
        assert!(long.ends_with("characters]"));
        assert_eq!(cell("=1"), "'=1");
        assert_eq!(cell("ok"), "ok");
    }
}
