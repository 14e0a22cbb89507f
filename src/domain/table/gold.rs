//! Gold rows in an upload: in a session with gold, a `gold_expected` column
//! gives, for the rows that are known answers, their expected result as a
//! JSON object. Those rows become gold items and the column leaves the
//! table: no input, column list or stored source holds it, and no stored
//! source holds a gold row, so that nothing an agent or a viewer reads
//! tells a gold quest from a real one.

use serde_json::{Map, Value};

use super::{Format, Row, Table, TableError};

/// The column of an upload that holds a gold row's expected result.
pub const GOLD_EXPECTED: &str = "gold_expected";

/// One gold row of an upload: its input and expected result.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldRow {
    pub input: Map<String, Value>,
    pub expected: Map<String, Value>,
}

/// Takes the gold rows and the `gold_expected` column out of the table:
/// a row whose cell is empty (or null) is a real one, any other cell must
/// be a JSON object (in a text cell or, from JSON Lines, as it is). `None`
/// when the table has no such column.
pub fn take_gold(table: &mut Table) -> Result<Option<Vec<GoldRow>>, TableError> {
    let Some(at) = table.columns.iter().position(|c| c == GOLD_EXPECTED) else {
        return Ok(None);
    };
    table.columns.remove(at);
    let (mut rows, mut lines, mut gold) = (Vec::new(), Vec::new(), Vec::new());
    for (row, line) in std::mem::take(&mut table.rows)
        .into_iter()
        .zip(std::mem::take(&mut table.lines))
    {
        let mut input = row.to_map();
        let cell = input.shift_remove(GOLD_EXPECTED).unwrap_or(Value::Null);
        let bad = |why: &str| TableError::Row {
            row: line,
            message: format!(
                "`{GOLD_EXPECTED}` {why}: give the expected result as a JSON object, e.g. \
                 {{\"email\": \"sales@acme.test\"}}, or leave it empty for a real row"
            ),
        };
        let expected = match cell {
            Value::Null => None,
            Value::String(s) if s.trim().is_empty() => None,
            Value::String(s) => match serde_json::from_str::<Value>(&s) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => return Err(bad("is JSON but not an object")),
                Err(_) => return Err(bad("is not JSON")),
            },
            Value::Object(map) => Some(map),
            _ => return Err(bad("is not an object")),
        };
        match expected {
            Some(expected) => gold.push(GoldRow { input, expected }),
            None => {
                rows.push(Row::from_map(&input));
                lines.push(line);
            }
        }
    }
    if rows.is_empty() {
        return Err(TableError::Header(format!(
            "every row has a `{GOLD_EXPECTED}`: a session needs at least one real row \
             (leave `{GOLD_EXPECTED}` empty on it)"
        )));
    }
    table.rows = rows;
    table.lines = lines;
    Ok(Some(gold))
}

/// The source to keep for a table whose gold rows were taken out: its real
/// rows, written again (JSON Lines from JSON Lines, else CSV), with the
/// file name and media type to serve it under.
pub fn source_of(format: Format, name: &str, table: &Table) -> (Vec<u8>, String, Format) {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    match format {
        Format::Jsonl => {
            let mut out = Vec::new();
            for row in &table.rows {
                out.extend_from_slice(row.as_str().as_bytes());
                out.push(b'\n');
            }
            (out, format!("{stem}.jsonl"), Format::Jsonl)
        }
        Format::Csv | Format::Xlsx | Format::Text => {
            let mut out = csv::Writer::from_writer(Vec::new());
            out.write_record(&table.columns)
                .expect("a CSV record is written to memory");
            for row in &table.rows {
                let map = row.to_map();
                let cells = table.columns.iter().map(|c| match map.get(c) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                });
                out.write_record(cells)
                    .expect("a CSV record is written to memory");
            }
            let bytes = out.into_inner().expect("CSV written to memory");
            (bytes, format!("{stem}.csv"), Format::Csv)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table(rows: &[Value]) -> Table {
        let columns: Vec<String> = ["company", "city", GOLD_EXPECTED]
            .iter()
            .map(|c| c.to_string())
            .collect();
        Table {
            columns,
            rows: rows
                .iter()
                .map(|r| Row::from_map(r.as_object().unwrap()))
                .collect(),
            lines: (2..2 + rows.len()).collect(),
        }
    }

    #[test]
    fn rows_with_an_expected_result_become_gold_and_the_column_leaves_the_table() {
        let mut t = table(&[
            json!({"company": "Acme", "city": "Oslo", GOLD_EXPECTED: ""}),
            json!({"company": "Gold", "city": "Busan", GOLD_EXPECTED: "{\"email\": \"g@gold.test\"}"}),
            json!({"company": "Beta", "city": "Rome", GOLD_EXPECTED: null}),
        ]);
        let gold = take_gold(&mut t).unwrap().unwrap();
        assert_eq!(t.columns, ["company", "city"]);
        assert_eq!(t.lines, [2, 4]);
        assert_eq!(
            t.rows.iter().map(|r| r.to_map()).collect::<Vec<_>>(),
            [
                json!({"company": "Acme", "city": "Oslo"})
                    .as_object()
                    .unwrap()
                    .clone(),
                json!({"company": "Beta", "city": "Rome"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ]
        );
        assert_eq!(gold.len(), 1);
        assert_eq!(
            Value::Object(gold[0].input.clone()),
            json!({"company": "Gold", "city": "Busan"})
        );
        assert_eq!(
            Value::Object(gold[0].expected.clone()),
            json!({"email": "g@gold.test"})
        );
        let (csv, name, format) = source_of(Format::Xlsx, "firms.xlsx", &t);
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "company,city\nAcme,Oslo\nBeta,Rome\n"
        );
        assert_eq!((name.as_str(), format), ("firms.csv", Format::Csv));
    }

    #[test]
    fn a_cell_that_is_no_json_object_names_its_row() {
        let mut t =
            table(&[json!({"company": "Acme", "city": "Oslo", GOLD_EXPECTED: "sales@acme"})]);
        let err = take_gold(&mut t).unwrap_err().to_string();
        assert!(
            err.starts_with("row 2: `gold_expected` is not JSON"),
            "{err}"
        );
        let mut t = table(&[json!({"company": "Acme", "city": "Oslo", GOLD_EXPECTED: "[1]"})]);
        assert!(take_gold(&mut t).is_err());
    }

    #[test]
    fn a_table_of_gold_rows_only_is_refused_and_one_without_the_column_is_left_alone() {
        let mut t = table(&[json!({"company": "Gold", "city": "Busan", GOLD_EXPECTED: "{}"})]);
        assert!(take_gold(&mut t).is_err());
        let mut t = table(&[json!({"company": "Acme", "city": "Oslo", GOLD_EXPECTED: ""})]);
        t.columns.pop();
        assert_eq!(take_gold(&mut t).unwrap(), None);
    }
}
