//! The text formats: CSV (delimiter detected), JSONL and plain text.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::{Budget, Row, TEXT_COLUMN, Table, TableError, check_header, non_empty};

/// Picks the delimiter that occurs most often in the header line (`,` on a tie).
fn detect_delimiter(text: &str) -> u8 {
    let header = text.lines().next().unwrap_or_default();
    [b',', b';', b'\t']
        .into_iter()
        .max_by_key(|d| (header.bytes().filter(|b| b == d).count(), *d == b','))
        .unwrap_or(b',')
}

pub(super) fn parse_csv(text: &str, budget: &mut Budget) -> Result<Table, TableError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(detect_delimiter(text))
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| TableError::Header(e.to_string()))?;
    // Counted before a name is copied: a header of millions of empty fields stops here.
    budget.check_columns(header.len())?;
    let columns = check_header(header.iter().map(str::to_owned).collect(), budget)?;
    let (mut rows, mut lines) = (Vec::new(), Vec::new());
    let mut record = csv::StringRecord::new();
    let mut values = Vec::with_capacity(columns.len());
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                return Err(TableError::Row {
                    row: e.position().map_or(0, |p| p.line() as usize),
                    message: csv_message(&e, columns.len()),
                });
            }
        }
        values.clear();
        values.extend(record.iter().map(|v| Value::String(v.to_owned())));
        let row = Row::build(&columns, &values);
        budget.row(row.0.len())?;
        lines.push(record.position().map_or(0, |p| p.line() as usize));
        rows.push(row);
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

/// One JSON object a line, blank lines skipped; the line number of each.
fn objects(text: &str) -> impl Iterator<Item = Result<(usize, Map<String, Value>), TableError>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let row = i + 1;
            match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(map)) => Ok((row, map)),
                Ok(_) => Err(TableError::Row {
                    row,
                    message: "is not a JSON object: write one object per line".into(),
                }),
                Err(e) => Err(TableError::Row {
                    row,
                    message: format!("is not valid JSON ({e})"),
                }),
            }
        })
}

/// Columns are the keys in first-seen order, missing cells empty. Two passes
/// over the text (keys, then rows), so that no object outlives its line.
pub(super) fn parse_jsonl(text: &str, budget: &mut Budget) -> Result<Table, TableError> {
    let (mut columns, mut seen) = (Vec::new(), HashSet::new());
    let mut count = 0;
    for object in objects(text) {
        let (_, object) = object?;
        budget.tick()?;
        for key in object.keys() {
            if !seen.contains(key.as_str()) {
                seen.insert(key.clone());
                columns.push(key.clone());
                budget.check_columns(columns.len())?;
            }
        }
        count += 1;
        budget.check_rows(count)?;
    }
    drop(seen);
    let columns = check_header(columns, budget)?;
    budget.check_rows(count)?;
    let (mut rows, mut lines) = (Vec::with_capacity(count), Vec::with_capacity(count));
    let mut values = Vec::with_capacity(columns.len());
    for object in objects(text) {
        let (line, mut object) = object?;
        values.clear();
        values.extend(
            columns
                .iter()
                .map(|c| object.remove(c).unwrap_or(Value::String(String::new()))),
        );
        let row = Row::build(&columns, &values);
        budget.row(row.0.len())?;
        rows.push(row);
        lines.push(line);
    }
    non_empty(Table {
        columns,
        rows,
        lines,
    })
}

pub(super) fn parse_text(text: &str, budget: &mut Budget) -> Result<Table, TableError> {
    let columns = vec![TEXT_COLUMN.to_owned()];
    budget.check_columns(1)?;
    let (mut rows, mut lines) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let row = Row::build(&columns, &[Value::String(line.to_owned())]);
        budget.row(row.0.len())?;
        rows.push(row);
        lines.push(i + 1);
    }
    non_empty(Table {
        columns,
        rows,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::super::tests::read;
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_delimiters_are_detected() {
        for (text, delim) in [
            ("a,b\n1,2\n", ","),
            ("a;b\n1;2\n", ";"),
            ("a\tb\n1\t2\n", "\t"),
        ] {
            let t = read(Format::Csv, text.as_bytes(), None).unwrap();
            assert_eq!(t.columns, ["a", "b"], "delimiter {delim:?}");
            assert_eq!(t.rows[0].to_map()["b"], json!("2"));
        }
    }

    #[test]
    fn csv_keeps_quoted_commas_newlines_and_a_bom_free_header() {
        let t = read(
            Format::Csv,
            "\u{feff}name,note\n\"Acme, Inc.\",\"two\nlines\"\n".as_bytes(),
            None,
        )
        .unwrap();
        assert_eq!(t.columns, ["name", "note"]);
        assert_eq!(t.rows[0].to_map()["name"], json!("Acme, Inc."));
        assert_eq!(t.rows[0].to_map()["note"], json!("two\nlines"));
    }

    #[test]
    fn a_ragged_csv_row_names_its_row() {
        let err = read(Format::Csv, b"a,b\n1,2\n3\n", None).unwrap_err();
        assert!(
            matches!(err, TableError::Row { row: 3, .. }),
            "line 3 of the file: {err}"
        );
    }

    #[test]
    fn jsonl_keeps_first_seen_column_order() {
        let t = read(
            Format::Jsonl,
            b"{\"z\": 1, \"a\": \"x\"}\n\n{\"b\": true}\n",
            None,
        )
        .unwrap();
        assert_eq!(t.columns, ["z", "a", "b"]);
        assert_eq!(t.rows[1].to_map()["z"], json!(""));
        assert_eq!(t.rows[1].to_map()["b"], json!(true));
        assert_eq!(t.lines, [1, 3]);
        let err = read(Format::Jsonl, b"{\"a\":1}\n[1]\n", None).unwrap_err();
        assert!(matches!(err, TableError::Row { row: 2, .. }));
    }

    #[test]
    fn text_lines_become_items() {
        let t = read(Format::Text, b"alpha\r\n\nbeta\n", None).unwrap();
        assert_eq!(t.columns, [TEXT_COLUMN]);
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1].to_map()[TEXT_COLUMN], json!("beta"));
    }

    #[test]
    fn a_header_of_a_million_empty_fields_is_refused_before_it_is_copied() {
        let file = ",".repeat(1_000_000) + "\n";
        let err = read(Format::Csv, file.as_bytes(), None).unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("at most 1000 columns")),
            "{err}"
        );
    }

    #[test]
    fn jsonl_with_too_many_keys_stops_at_the_column_limit() {
        let wide: Map<String, Value> = (0..1001).map(|i| (format!("k{i}"), json!(1))).collect();
        let file = format!("{}\n", Value::Object(wide));
        let err = read(Format::Jsonl, file.as_bytes(), None).unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("at most 1000 columns")),
            "{err}"
        );
    }
}
