//! XLSX: a guard over the zip before calamine sees it, then the sheet read
//! cell by cell.
//!
//! calamine trusts a workbook: it reserves as many shared strings as the
//! workbook declares and builds a dense range spanning the outermost cells,
//! so a small file could ask for terabytes, and a failed allocation aborts the
//! process. So the guard checks the parts' unpacked sizes and the declared
//! shared-string count first, and the sheet is read through calamine's cell
//! reader, row by row, into rows no wider than the header, never into a range.

use std::io::{Cursor, Read};

use calamine::{Data, DataRef, Reader, Xlsx};
use serde_json::Value;

use super::{Budget, Limits, Row, Table, TableError, check_header, non_empty, size};

/// More parts than any workbook a person saves.
const MAX_PARTS: usize = 10_000;

fn unreadable(e: impl std::fmt::Display) -> TableError {
    TableError::Workbook(format!(
        "not a readable XLSX workbook ({e}): save it as .xlsx again"
    ))
}

pub(super) fn parse_xlsx(
    bytes: &[u8],
    sheet: Option<&str>,
    budget: &mut Budget,
) -> Result<Table, TableError> {
    guard(bytes, budget)?;
    let mut book = Xlsx::new(Cursor::new(bytes)).map_err(unreadable)?;
    let names = book.sheet_names();
    let name = match sheet {
        Some(name) if names.iter().any(|n| n == name) => name.to_owned(),
        Some(name) => {
            return Err(TableError::Workbook(format!(
                "the workbook has no sheet `{name}`; its sheets are: {}",
                names.join(", ")
            )));
        }
        None => names
            .first()
            .cloned()
            .ok_or_else(|| TableError::Workbook("the workbook has no sheet".into()))?,
    };
    let cannot_read =
        |e: calamine::XlsxError| TableError::Workbook(format!("the sheet cannot be read: {e}"));
    let mut cells = book.worksheet_cells_reader(&name).map_err(cannot_read)?;
    check_dimensions(cells.dimensions(), budget.limits)?;
    let mut sheet = SheetRows::default();
    while let Some(cell) = cells.next_cell().map_err(cannot_read)? {
        budget.tick()?;
        let value = cell.get_value();
        if matches!(value, DataRef::Empty) {
            continue;
        }
        let (row, col) = cell.get_position();
        sheet.push(row, col, Data::from(value.clone()), budget)?;
    }
    sheet.finish(budget)
}

/// The checks made on the zip before calamine opens it.
fn guard(bytes: &[u8], budget: &mut Budget) -> Result<(), TableError> {
    let limits = budget.limits;
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(unreadable)?;
    if zip.len() > MAX_PARTS {
        return Err(TableError::Limit(format!(
            "the workbook has {} parts; at most {MAX_PARTS} are read: save it as .xlsx again",
            zip.len()
        )));
    }
    // The zip reader stops any part at the size the central directory declares,
    // so the sum bounds what calamine can unpack.
    let mut unpacked = 0u64;
    for i in 0..zip.len() {
        let part = zip.by_index_raw(i).map_err(unreadable)?;
        unpacked = unpacked.saturating_add(part.size());
    }
    if unpacked > limits.unpacked_bytes {
        return Err(TableError::Limit(format!(
            "the workbook unpacks to more than {}, the limit of a scan: split the table or upload it as CSV",
            size(limits.unpacked_bytes)
        )));
    }
    for i in 0..zip.len() {
        let is_strings = zip
            .name_for_index(i)
            .and_then(Result::ok)
            .is_some_and(|n| n.to_ascii_lowercase().ends_with("sharedstrings.xml"));
        if is_strings {
            let part = zip.by_index(i).map_err(unreadable)?;
            check_shared_strings(part, budget)?;
        }
    }
    Ok(())
}

/// Refuses a shared-string table that declares or holds more strings than
/// the limit: calamine reserves the declared count before it reads one.
fn check_shared_strings(part: impl Read, budget: &mut Budget) -> Result<(), TableError> {
    use quick_xml::events::Event;
    let limit = budget.limits.shared_strings;
    let too_many = |n: u128| {
        TableError::Limit(format!(
            "the workbook's shared-string table holds {n} strings; at most {limit} are read: \
             split the table or upload it as CSV"
        ))
    };
    let mut xml = quick_xml::Reader::from_reader(std::io::BufReader::new(part));
    let (mut buf, mut strings) = (Vec::new(), 0u128);
    loop {
        buf.clear();
        budget.tick()?;
        let tag = match xml.read_event_into(&mut buf).map_err(unreadable)? {
            Event::Start(tag) | Event::Empty(tag) => tag,
            Event::Eof => return Ok(()),
            _ => continue,
        };
        match tag.local_name().as_ref() {
            "sst" => {
                for attribute in tag.attributes().with_checks(false).flatten() {
                    let declared = attribute.value.trim();
                    let is_count = attribute.key.local_name().as_ref() == "uniqueCount";
                    let is_number =
                        !declared.is_empty() && declared.bytes().all(|b| b.is_ascii_digit());
                    if is_count && is_number {
                        let n = declared.parse::<u128>().unwrap_or(u128::MAX);
                        if n > limit as u128 {
                            return Err(too_many(n));
                        }
                    }
                }
            }
            "si" => {
                strings += 1;
                if strings > limit as u128 {
                    return Err(too_many(strings));
                }
            }
            _ => {}
        }
    }
}

/// Refuses a sheet whose declared extent is wider or longer than a table may be.
fn check_dimensions(dimensions: calamine::Dimensions, limits: &Limits) -> Result<(), TableError> {
    let (start, end) = (dimensions.start, dimensions.end);
    let width = u64::from(end.1.saturating_sub(start.1)) + 1;
    let height = u64::from(end.0.saturating_sub(start.0)) + 1;
    let extent = || {
        format!(
            "{}{}:{}{}",
            column_name(start.1),
            start.0 + 1,
            column_name(end.1),
            end.0 + 1
        )
    };
    if width > limits.columns as u64 {
        return Err(TableError::Limit(format!(
            "the sheet declares {width} columns ({}); at most {} columns are read: \
             delete the unused columns and save it again",
            extent(),
            limits.columns
        )));
    }
    // The header row comes on top of the data rows.
    if height > limits.rows as u64 + 1 {
        return Err(TableError::Limit(format!(
            "the sheet declares {height} rows ({}); a session takes at most {} data rows: \
             delete the unused rows or split the table",
            extent(),
            limits.rows
        )));
    }
    Ok(())
}

/// The letters of a 0-based column index (0 → A, 26 → AA).
fn column_name(mut index: u32) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(b'A' + (index % 26) as u8);
        if index < 26 {
            break;
        }
        index = index / 26 - 1;
    }
    letters.reverse();
    String::from_utf8(letters).unwrap_or_default()
}

/// Rows assembled from the cells as they stream by: the first row holding a
/// value is the header, and it fixes the columns.
#[derive(Default)]
struct SheetRows {
    /// The header's first column and its names, once the header row is done.
    columns: Option<(u32, Vec<String>)>,
    /// The sheet row being assembled.
    at: Option<u32>,
    /// The header's cells as read, and its leftmost and rightmost column.
    header: Vec<(u32, Data)>,
    span: Option<(u32, u32)>,
    /// The cells of the data row being assembled, by column offset.
    cells: Vec<Data>,
    rows: Vec<Row>,
    lines: Vec<usize>,
}

impl SheetRows {
    fn push(
        &mut self,
        row: u32,
        col: u32,
        value: Data,
        budget: &mut Budget,
    ) -> Result<(), TableError> {
        match self.at {
            Some(at) if row < at => {
                return Err(TableError::Workbook(format!(
                    "sheet row {} comes after row {}: open the workbook in a spreadsheet and save it again",
                    row + 1,
                    at + 1
                )));
            }
            Some(at) if row > at => self.flush(budget)?,
            _ => {}
        }
        self.at = Some(row);
        let Some((start, names)) = &self.columns else {
            let (lo, hi) = self
                .span
                .map_or((col, col), |(lo, hi)| (lo.min(col), hi.max(col)));
            let width = (hi - lo) as usize + 1;
            if width > budget.limits.columns {
                return Err(super::too_many_columns(width, budget.limits.columns));
            }
            self.span = Some((lo, hi));
            self.header.push((col, value));
            return Ok(());
        };
        let offset = col.checked_sub(*start).map(|o| o as usize);
        let Some(offset) = offset.filter(|o| *o < names.len()) else {
            return Err(TableError::Header(format!(
                "sheet row {} has a value in column {}, which has no name in the header row: \
                 give every column a name",
                row + 1,
                column_name(col)
            )));
        };
        if self.cells.is_empty() {
            self.cells.resize(names.len(), Data::Empty);
        }
        self.cells[offset] = value;
        Ok(())
    }

    /// Ends the row being assembled: the header, or one data row.
    fn flush(&mut self, budget: &mut Budget) -> Result<(), TableError> {
        let Some(at) = self.at.take() else {
            return Ok(());
        };
        let Some((_, columns)) = &self.columns else {
            let (lo, hi) = self.span.unwrap_or_default();
            let mut names = vec![String::new(); (hi - lo) as usize + 1];
            for (col, value) in self.header.drain(..) {
                names[(col - lo) as usize] = cell_text(&value);
            }
            self.columns = Some((lo, check_header(names, budget)?));
            return Ok(());
        };
        // The row number a spreadsheet shows: 1-based.
        let line = at as usize + 1;
        let cells = std::mem::take(&mut self.cells);
        let mut values = Vec::with_capacity(columns.len());
        for (col, name) in columns.iter().enumerate() {
            values.push(match cells.get(col).unwrap_or(&Data::Empty) {
                Data::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(*f as i64),
                Data::Float(f) => Value::from(*f),
                Data::Int(n) => Value::from(*n),
                Data::Bool(b) => Value::Bool(*b),
                Data::Error(e) => {
                    return Err(TableError::Row {
                        row: line,
                        message: format!("column `{name}` holds the error {e:?}"),
                    });
                }
                other => Value::String(cell_text(other)),
            });
        }
        let row = Row::build(columns, &values);
        budget.row(row.0.len())?;
        self.rows.push(row);
        self.lines.push(line);
        Ok(())
    }

    fn finish(mut self, budget: &mut Budget) -> Result<Table, TableError> {
        self.flush(budget)?;
        let (_, columns) = self.columns.ok_or(TableError::Empty)?;
        non_empty(Table {
            columns,
            rows: self.rows,
            lines: self.lines,
        })
    }
}

fn cell_text(cell: &Data) -> String {
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

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::super::tests::{read, read_with};
    use super::super::{Format, Limits};
    use super::*;
    use serde_json::json;

    /// A workbook with `company` in A1 and `Acme` in A2.
    fn plain_book() -> Vec<u8> {
        let mut book = rust_xlsxwriter::Workbook::new();
        let sheet = book.add_worksheet();
        sheet.write_string(0, 0, "company").unwrap();
        sheet.write_string(1, 0, "Acme").unwrap();
        book.save_to_buffer().unwrap()
    }

    /// `book` with some of its parts replaced by hand-written XML.
    pub(crate) fn patched(book: &[u8], parts: &[(&str, &str)]) -> Vec<u8> {
        let mut zip = zip::ZipArchive::new(Cursor::new(book)).unwrap();
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for i in 0..zip.len() {
            let mut part = zip.by_index(i).unwrap();
            let name = part.name().unwrap().into_owned();
            let mut bytes = Vec::new();
            part.read_to_end(&mut bytes).unwrap();
            if let Some((_, xml)) = parts.iter().find(|(n, _)| *n == name) {
                bytes = xml.as_bytes().to_vec();
            }
            out.start_file(name, stored).unwrap();
            out.write_all(&bytes).unwrap();
        }
        out.finish().unwrap().into_inner()
    }

    const SHEET: &str = "xl/worksheets/sheet1.xml";
    const STRINGS: &str = "xl/sharedStrings.xml";

    fn sheet_xml(dimension: &str, cells: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{dimension}<sheetData>{cells}</sheetData></worksheet>"#
        )
    }

    fn limit_message(result: Result<Table, TableError>) -> String {
        match result {
            Err(TableError::Limit(m)) => m,
            other => panic!("expected a limit, got {other:?}"),
        }
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

        let t = read(Format::Xlsx, &bytes, None).unwrap();
        assert_eq!(t.columns, ["company", "size"]);
        assert_eq!(t.rows[0].to_map()["size"], json!(10));
        assert_eq!(
            read(Format::Xlsx, &bytes, Some("second")).unwrap().columns,
            ["other"]
        );
        assert!(matches!(
            read(Format::Xlsx, &bytes, Some("nope")),
            Err(TableError::Workbook(_))
        ));
        assert!(matches!(
            read(Format::Xlsx, b"not a zip", None),
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
        let t = read(Format::Xlsx, &book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(t.rows[0].to_map()["founded"], json!("2024-01-01"));
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
    fn a_table_may_start_anywhere_on_the_sheet_and_keeps_its_gaps() {
        let mut book = rust_xlsxwriter::Workbook::new();
        let sheet = book.add_worksheet();
        sheet.write_string(2, 3, "company").unwrap();
        sheet.write_string(2, 4, "city").unwrap();
        sheet.write_string(3, 4, "Seoul").unwrap();
        sheet.write_string(4, 3, "Beta").unwrap();
        let t = read(Format::Xlsx, &book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(t.columns, ["company", "city"]);
        assert_eq!(t.rows[0].as_str(), r#"{"company":"","city":"Seoul"}"#);
        assert_eq!(t.rows[1].as_str(), r#"{"company":"Beta","city":""}"#);
        assert_eq!(t.lines, [4, 5]);
        let mut book = rust_xlsxwriter::Workbook::new();
        let sheet = book.add_worksheet();
        sheet.write_string(0, 1, "company").unwrap();
        sheet.write_string(1, 0, "stray").unwrap();
        let err = read(Format::Xlsx, &book.save_to_buffer().unwrap(), None).unwrap_err();
        assert!(
            matches!(&err, TableError::Header(m) if m.contains("column A")),
            "{err}"
        );
    }

    #[test]
    fn a_declared_shared_string_count_past_the_limit_is_refused_before_calamine_reserves_it() {
        let sst = r#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="2" uniqueCount="100000000000"><si><t>company</t></si><si><t>Acme</t></si></sst>"#;
        let bomb = patched(&plain_book(), &[(STRINGS, sst)]);
        let message = limit_message(read(Format::Xlsx, &bomb, None));
        assert!(message.contains("100000000000 strings"), "{message}");
        assert!(message.contains("at most 5000000"), "{message}");
    }

    #[test]
    fn more_shared_strings_than_the_limit_are_refused_even_when_undeclared() {
        let strings = "<si><t>x</t></si>".repeat(11);
        let sst = format!(
            r#"<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{strings}</sst>"#
        );
        let bomb = patched(&plain_book(), &[(STRINGS, &sst)]);
        let limits = Limits {
            shared_strings: 10,
            ..Limits::default()
        };
        let message = limit_message(read_with(Format::Xlsx, &bomb, None, &limits));
        assert!(message.contains("at most 10 are read"), "{message}");
    }

    #[test]
    fn a_declared_dimension_past_the_limits_is_refused() {
        let cells = r#"<row r="1"><c r="A1" t="inlineStr"><is><t>company</t></is></c></row><row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row>"#;
        let bomb = patched(
            &plain_book(),
            &[(
                SHEET,
                &sheet_xml(r#"<dimension ref="A1:XFD1048576"/>"#, cells),
            )],
        );
        let message = limit_message(read(Format::Xlsx, &bomb, None));
        assert!(
            message.contains("16384 columns (A1:XFD1048576)"),
            "{message}"
        );
        assert!(message.contains("at most 1000 columns"), "{message}");
        let long = patched(
            &plain_book(),
            &[(
                SHEET,
                &sheet_xml(r#"<dimension ref="A1:B1048576"/>"#, cells),
            )],
        );
        let message = limit_message(read(Format::Xlsx, &long, None));
        assert!(message.contains("at most 1000000 data rows"), "{message}");
    }

    #[test]
    fn outermost_cells_without_a_dimension_never_become_a_dense_range() {
        let far = r#"<row r="1"><c r="A1" t="inlineStr"><is><t>company</t></is></c></row><row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row>"#;
        let bomb = patched(&plain_book(), &[(SHEET, &sheet_xml("", far))]);
        let err = read(Format::Xlsx, &bomb, None).unwrap_err();
        assert!(
            matches!(&err, TableError::Header(m) if m.contains("column XFD")),
            "{err}"
        );
        let wide = r#"<row r="1"><c r="A1" t="inlineStr"><is><t>company</t></is></c><c r="XFD1" t="inlineStr"><is><t>x</t></is></c></row>"#;
        let bomb = patched(&plain_book(), &[(SHEET, &sheet_xml("", wide))]);
        let message = limit_message(read(Format::Xlsx, &bomb, None));
        assert!(message.contains("16384 columns"), "{message}");
    }

    #[test]
    fn a_workbook_that_unpacks_past_the_limit_is_refused() {
        let limits = Limits {
            unpacked_bytes: 1000,
            ..Limits::default()
        };
        let message = limit_message(read_with(Format::Xlsx, &plain_book(), None, &limits));
        assert!(message.contains("more than 1000 bytes"), "{message}");
    }

    #[test]
    fn column_names_are_letters() {
        assert_eq!(column_name(0), "A");
        assert_eq!(column_name(25), "Z");
        assert_eq!(column_name(26), "AA");
        assert_eq!(column_name(16383), "XFD");
    }
}
