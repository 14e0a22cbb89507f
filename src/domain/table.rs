//! Uploaded tables: CSV (`,` `;` or tab, detected), XLSX, JSONL and plain text,
//! parsed into ordered columns and rows of JSON values.
//!
//! Parsing is all or nothing: the first bad row stops it with an error that names
//! the row and what to do, so a bad file stores nothing.

use std::io::Cursor;

use serde_json::{Map, Value};

/// A parsed table: column names in their original order, rows in upload order.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Map<String, Value>>,
    /// For each row, where it is in the file (line or sheet row, 1-based, header included),
    /// so that errors point at what a person sees in an editor.
    pub lines: Vec<usize>,
}

/// The formats a table may be uploaded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Xlsx,
    Jsonl,
    Text,
}

impl Format {
    /// The format a file name's extension names, if any.
    pub fn from_file_name(name: &str) -> Option<Format> {
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "csv" | "tsv" => Some(Format::Csv),
            "xlsx" => Some(Format::Xlsx),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            "txt" => Some(Format::Text),
            _ => None,
        }
    }

    /// The media type used when the file is served back.
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv",
            Format::Xlsx => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            Format::Jsonl => "application/x-ndjson",
            Format::Text => "text/plain; charset=utf-8",
        }
    }
}

/// Why an upload could not be read as a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("the file is empty: upload a table with a header row and at least one data row")]
    Empty,
    #[error("the file is not valid UTF-8 text (at byte {0}): save it as UTF-8 and upload it again")]
    NotUtf8(usize),
    #[error("row {row}: {message}")]
    Row { row: usize, message: String },
    #[error("header: {0}")]
    Header(String),
    #[error("{0}")]
    Workbook(String),
    #[error("row {row}, column `{column}`: {message}")]
    Key {
        row: usize,
        column: String,
        message: String,
    },
}

/// The name of the only column of a plain-text upload.
pub const TEXT_COLUMN: &str = "item";

/// Parses `bytes` as a table of the given format. `sheet` picks an XLSX sheet by name.
pub fn parse(format: Format, bytes: &[u8], sheet: Option<&str>) -> Result<Table, TableError> {
    match format {
        Format::Csv => parse_csv(text(bytes)?),
        Format::Xlsx => parse_xlsx(bytes, sheet),
        Format::Jsonl => parse_jsonl(text(bytes)?),
        Format::Text => parse_text(text(bytes)?),
    }
}

fn text(bytes: &[u8]) -> Result<&str, TableError> {
    let s = std::str::from_utf8(bytes).map_err(|e| TableError::NotUtf8(e.valid_up_to()))?;
    Ok(s.strip_prefix('\u{feff}').unwrap_or(s))
}

/// Picks the delimiter that occurs most often in the header line (`,` on a tie).
fn detect_delimiter(text: &str) -> u8 {
    let header = text.lines().next().unwrap_or_default();
    [b',', b';', b'\t']
        .into_iter()
        .max_by_key(|d| (header.bytes().filter(|b| b == d).count(), *d == b','))
        .unwrap_or(b',')
}

fn parse_csv(text: &str) -> Result<Table, TableError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(detect_delimiter(text))
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| TableError::Header(e.to_string()))?;
    let columns = check_header(header.iter().map(str::to_owned).collect())?;
    let (mut rows, mut lines) = (Vec::new(), Vec::new());
    for record in reader.records() {
        let record = record.map_err(|e| TableError::Row {
            row: e.position().map_or(0, |p| p.line() as usize),
            message: csv_message(&e, columns.len()),
        })?;
        lines.push(record.position().map_or(0, |p| p.line() as usize));
        rows.push(
            columns
                .iter()
                .zip(record.iter())
                .map(|(c, v)| (c.clone(), Value::String(v.to_owned())))
                .collect(),
        );
    }
    non_empty(Table {
        columns,
        rows,
        lines,
    })
}

fn csv_message(error: &csv::Error, expected: usize) -> String {
    match error.kind() {
        csv::ErrorKind::UnequalLengths { len, .. } => {
            format!(
                "has {len} fields but the header has {expected}: quote fields that contain the delimiter"
            )
        }
        _ => format!("{error}: fix the row and upload again"),
    }
}

fn check_header(columns: Vec<String>) -> Result<Vec<String>, TableError> {
    if columns.is_empty() || columns.iter().all(|c| c.trim().is_empty()) {
        return Err(TableError::Empty);
    }
    for (i, c) in columns.iter().enumerate() {
        if c.trim().is_empty() {
            return Err(TableError::Header(format!(
                "column {} has no name: give every column a name",
                i + 1
            )));
        }
        if columns[..i].contains(c) {
            return Err(TableError::Header(format!(
                "column `{c}` appears twice: column names must be unique"
            )));
        }
    }
    Ok(columns)
}

fn non_empty(table: Table) -> Result<Table, TableError> {
    if table.rows.is_empty() {
        Err(TableError::Empty)
    } else {
        Ok(table)
    }
}

fn parse_xlsx(bytes: &[u8], sheet: Option<&str>) -> Result<Table, TableError> {
    use calamine::{Data, Reader, Xlsx};
    let mut book = Xlsx::new(Cursor::new(bytes)).map_err(|e| {
        TableError::Workbook(format!(
            "not a readable XLSX workbook ({e}): save it as .xlsx again"
        ))
    })?;
    let range = match sheet {
        Some(name) => {
            let names = book.sheet_names();
            if !names.iter().any(|n| n == name) {
                return Err(TableError::Workbook(format!(
                    "the workbook has no sheet `{name}`; its sheets are: {}",
                    names.join(", ")
                )));
            }
            book.worksheet_range(name)
        }
        None => book
            .worksheet_range_at(0)
            .ok_or_else(|| TableError::Workbook("the workbook has no sheet".into()))?,
    }
    .map_err(|e| TableError::Workbook(format!("the sheet cannot be read: {e}")))?;
    let first_row = range.start().map_or(0, |(row, _)| row as usize);
    let mut sheet_rows = range.rows();
    let header = sheet_rows.next().ok_or(TableError::Empty)?;
    let columns = check_header(header.iter().map(|c| cell_text(c)).collect())?;
    let (mut rows, mut lines) = (Vec::new(), Vec::new());
    for (i, cells) in sheet_rows.enumerate() {
        if cells.iter().all(|c| matches!(c, Data::Empty)) {
            continue;
        }
        // The row number a spreadsheet shows: 1-based, the header is row 1 of the range.
        let row = first_row + i + 2;
        let mut map = Map::new();
        for (col, name) in columns.iter().enumerate() {
            let value = match cells.get(col).unwrap_or(&Data::Empty) {
                Data::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(*f as i64),
                Data::Float(f) => Value::from(*f),
                Data::Int(n) => Value::from(*n),
                Data::Bool(b) => Value::Bool(*b),
                Data::Error(e) => {
                    return Err(TableError::Row {
                        row,
                        message: format!("column `{name}` holds the error {e:?}"),
                    });
                }
                other => Value::String(cell_text(other)),
            };
            map.insert(name.clone(), value);
        }
        rows.push(map);
        lines.push(row);
    }
    non_empty(Table {
        columns,
        rows,
        lines,
    })
}

fn cell_text(cell: &calamine::Data) -> String {
    use calamine::Data;
    match cell {
        Data::Empty => String::new(),
        Data::String(s) | Data::DateTimeIso(s) | Data::DurationIso(s) => s.clone(),
        Data::DateTime(t) if t.is_datetime() => {
            // A date as the sheet shows it, not Excel's serial number.
            let (y, mo, d, h, mi, s, ms) = t.to_ymd_hms_milli();
            match (h, mi, s, ms) {
                (0, 0, 0, 0) => format!("{y:04}-{mo:02}-{d:02}"),
                (_, _, _, 0) => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}"),
                _ => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}"),
            }
        }
        other => other.to_string(),
    }
}

fn parse_jsonl(text: &str) -> Result<Table, TableError> {
    let (mut objects, mut lines) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = i + 1;
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => {
                objects.push(map);
                lines.push(row);
            }
            Ok(_) => {
                return Err(TableError::Row {
                    row,
                    message: "is not a JSON object: write one object per line".into(),
                });
            }
            Err(e) => {
                return Err(TableError::Row {
                    row,
                    message: format!("is not valid JSON ({e})"),
                });
            }
        }
    }
    from_objects(objects)
}

/// Builds a table from JSON objects: columns in first-seen order, missing cells
/// empty; rows are numbered from 1.
pub fn from_objects(objects: Vec<Map<String, Value>>) -> Result<Table, TableError> {
    let mut columns: Vec<String> = Vec::new();
    for object in &objects {
        for key in object.keys() {
            if !columns.contains(key) {
                columns.push(key.clone());
            }
        }
    }
    let columns = check_header(columns)?;
    let rows = objects
        .into_iter()
        .map(|mut object| {
            columns
                .iter()
                .map(|c| {
                    (
                        c.clone(),
                        object.remove(c).unwrap_or(Value::String(String::new())),
                    )
                })
                .collect()
        })
        .collect::<Vec<_>>();
    let lines = (1..=rows.len()).collect();
    non_empty(Table {
        columns,
        rows,
        lines,
    })
}

fn parse_text(text: &str) -> Result<Table, TableError> {
    let (lines, rows) = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            (
                i,
                Map::from_iter([(TEXT_COLUMN.to_owned(), Value::String(l.to_owned()))]),
            )
        })
        .unzip();
    non_empty(Table {
        columns: vec![TEXT_COLUMN.to_owned()],
        rows,
        lines,
    })
}

/// The text of a cell as a quest key: strings as they are, other values as JSON.
pub fn cell_as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Table {
    /// The key of every row, read from `column`; an unknown column or an empty key
    /// cell is an error that names the row and the column.
    pub fn keys(&self, column: &str) -> Result<Vec<String>, TableError> {
        if !self.columns.iter().any(|c| c == column) {
            return Err(TableError::Key {
                row: 0,
                column: column.to_owned(),
                message: format!(
                    "no such column; the columns are: {}",
                    self.columns.join(", ")
                ),
            });
        }
        self.rows
            .iter()
            .zip(&self.lines)
            .map(|(row, line)| {
                let key = row.get(column).map(cell_as_text).unwrap_or_default();
                if key.trim().is_empty() {
                    Err(TableError::Key {
                        row: *line,
                        column: column.to_owned(),
                        message: "the key cell is empty: every row needs a key".into(),
                    })
                } else {
                    Ok(key)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_delimiters_are_detected() {
        for (text, delim) in [
            ("a,b\n1,2\n", ","),
            ("a;b\n1;2\n", ";"),
            ("a\tb\n1\t2\n", "\t"),
        ] {
            let t = parse(Format::Csv, text.as_bytes(), None).unwrap();
            assert_eq!(t.columns, ["a", "b"], "delimiter {delim:?}");
            assert_eq!(t.rows[0]["b"], json!("2"));
        }
    }

    #[test]
    fn csv_keeps_quoted_commas_newlines_and_a_bom_free_header() {
        let t = parse(
            Format::Csv,
            "\u{feff}name,note\n\"Acme, Inc.\",\"two\nlines\"\n".as_bytes(),
            None,
        )
        .unwrap();
        assert_eq!(t.columns, ["name", "note"]);
        assert_eq!(t.rows[0]["name"], json!("Acme, Inc."));
        assert_eq!(t.rows[0]["note"], json!("two\nlines"));
    }

    #[test]
    fn a_ragged_csv_row_names_its_row() {
        let err = parse(Format::Csv, b"a,b\n1,2\n3\n", None).unwrap_err();
        assert!(
            matches!(err, TableError::Row { row: 3, .. }),
            "line 3 of the file: {err}"
        );
    }

    #[test]
    fn headers_must_be_named_and_unique() {
        assert!(matches!(
            parse(Format::Csv, b"a,a\n1,2\n", None),
            Err(TableError::Header(_))
        ));
        assert!(matches!(
            parse(Format::Csv, b"a,\n1,2\n", None),
            Err(TableError::Header(_))
        ));
        assert_eq!(parse(Format::Csv, b"a,b\n", None), Err(TableError::Empty));
        assert_eq!(parse(Format::Csv, b"", None), Err(TableError::Empty));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        assert_eq!(
            parse(Format::Csv, b"a\n\xff\n", None),
            Err(TableError::NotUtf8(2))
        );
    }

    #[test]
    fn jsonl_keeps_first_seen_column_order() {
        let t = parse(
            Format::Jsonl,
            b"{\"z\": 1, \"a\": \"x\"}\n\n{\"b\": true}\n",
            None,
        )
        .unwrap();
        assert_eq!(t.columns, ["z", "a", "b"]);
        assert_eq!(t.rows[1]["z"], json!(""));
        assert_eq!(t.rows[1]["b"], json!(true));
        let err = parse(Format::Jsonl, b"{\"a\":1}\n[1]\n", None).unwrap_err();
        assert!(matches!(err, TableError::Row { row: 2, .. }));
    }

    #[test]
    fn text_lines_become_items() {
        let t = parse(Format::Text, b"alpha\r\n\nbeta\n", None).unwrap();
        assert_eq!(t.columns, [TEXT_COLUMN]);
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1][TEXT_COLUMN], json!("beta"));
    }

    #[test]
    fn xlsx_first_sheet_or_named_sheet() {
        let mut book = rust_xlsxwriter::Workbook::new();
        let first = book.add_worksheet().set_name("first").unwrap();
        first.write_string(0, 0, "company").unwrap();
        first.write_string(0, 1, "size").unwrap();
        first.write_string(1, 0, "Acme").unwrap();
        first.write_number(1, 1, 10.0).unwrap();
        let second = book.add_worksheet().set_name("second").unwrap();
        second.write_string(0, 0, "other").unwrap();
        second.write_string(1, 0, "x").unwrap();
        let bytes = book.save_to_buffer().unwrap();

        let t = parse(Format::Xlsx, &bytes, None).unwrap();
        assert_eq!(t.columns, ["company", "size"]);
        assert_eq!(t.rows[0]["size"], json!(10));
        assert_eq!(
            parse(Format::Xlsx, &bytes, Some("second")).unwrap().columns,
            ["other"]
        );
        assert!(matches!(
            parse(Format::Xlsx, &bytes, Some("nope")),
            Err(TableError::Workbook(_))
        ));
        assert!(matches!(
            parse(Format::Xlsx, b"not a zip", None),
            Err(TableError::Workbook(_))
        ));
    }

    #[test]
    fn xlsx_dates_read_as_the_sheet_shows_them_and_rows_keep_sheet_numbers() {
        let mut book = rust_xlsxwriter::Workbook::new();
        let sheet = book.add_worksheet();
        let date = rust_xlsxwriter::Format::new().set_num_format("yyyy-mm-dd");
        sheet.write_string(0, 0, "company").unwrap();
        sheet.write_string(0, 1, "founded").unwrap();
        sheet.write_string(1, 0, "Acme").unwrap();
        let day = rust_xlsxwriter::ExcelDateTime::from_ymd(2024, 1, 1).unwrap();
        sheet.write_datetime_with_format(1, 1, &day, &date).unwrap();
        sheet.write_string(3, 1, "no key").unwrap();
        let t = parse(Format::Xlsx, &book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(t.rows[0]["founded"], json!("2024-01-01"));
        assert_eq!(
            t.lines,
            [2, 4],
            "the empty sheet row 3 is skipped, numbers stay the sheet's"
        );
        assert!(matches!(
            t.keys("company"),
            Err(TableError::Key { row: 4, .. })
        ));
    }

    #[test]
    fn keys_name_the_row_and_column_of_an_empty_cell() {
        let t = parse(Format::Csv, b"company,city\nAcme,Seoul\n,Busan\n", None).unwrap();
        assert_eq!(
            t.keys("company").unwrap_err(),
            TableError::Key {
                row: 3,
                column: "company".into(),
                message: "the key cell is empty: every row needs a key".into()
            }
        );
        assert!(matches!(
            t.keys("nope"),
            Err(TableError::Key { row: 0, .. })
        ));
        assert_eq!(t.keys("city").unwrap(), ["Seoul", "Busan"]);
    }

    #[test]
    fn file_names_pick_formats() {
        assert_eq!(Format::from_file_name("a.CSV"), Some(Format::Csv));
        assert_eq!(Format::from_file_name("a.b.xlsx"), Some(Format::Xlsx));
        assert_eq!(Format::from_file_name("a.jsonl"), Some(Format::Jsonl));
        assert_eq!(Format::from_file_name("a.txt"), Some(Format::Text));
        assert_eq!(Format::from_file_name("a.pdf"), None);
        assert_eq!(Format::from_file_name("noext"), None);
    }
}
