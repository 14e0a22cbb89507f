//! Uploaded tables: CSV (`,` `;` or tab, detected), XLSX, JSONL and plain text,
//! parsed into ordered columns and rows.
//!
//! Parsing is all or nothing: the first bad row stops it with an error that names
//! the row and what to do, so a bad file stores nothing. Uploads are untrusted:
//! every format is read under the same [`Limits`] (rows, columns, cells, the
//! size of the rows, time), checked while reading, so that no file makes the
//! reader allocate more than the limits allow. A row is kept as compact JSON
//! text ([`Row`]), which costs about what the row costs in the upload.

pub mod gold;
mod text;
mod xlsx;

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// A parsed table: column names in their original order, rows in upload order.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// For each row, where it is in the file (line or sheet row, 1-based, header included),
    /// so that errors point at what a person sees in an editor.
    pub lines: Vec<usize>,
}

/// One row: a JSON object with every column of its table, in column order, as
/// compact text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row(Box<str>);

impl Row {
    /// The row of these values under these columns (missing values are `""`).
    fn build(columns: &[String], values: &[Value]) -> Row {
        let text = serde_json::to_string(&Pairs { columns, values })
            .expect("a row of JSON values serialises");
        Row(text.into_boxed_str())
    }

    /// A row from a JSON object, keys in the object's order.
    pub fn from_map(map: &Map<String, Value>) -> Row {
        Row(Value::Object(map.clone()).to_string().into_boxed_str())
    }

    /// The row as compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The row as a JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        serde_json::from_str(&self.0).expect("a row holds a JSON object")
    }

    /// The value of one column, read without building the whole object.
    pub fn get(&self, column: &str) -> Option<Value> {
        let mut de = serde_json::Deserializer::from_str(&self.0);
        FieldOf(column)
            .deserialize(&mut de)
            .expect("a row holds a JSON object")
    }
}

/// Serialises `columns` and `values` as one JSON object, pairwise.
struct Pairs<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.columns.len()))?;
        let empty = Value::String(String::new());
        for (i, column) in self.columns.iter().enumerate() {
            map.serialize_entry(column, self.values.get(i).unwrap_or(&empty))?;
        }
        map.end()
    }
}

/// Reads one field of a JSON object and skips the rest.
struct FieldOf<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if found.is_none() && key == self.0 {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The `items` of a JSON scan, read one object at a time into JSONL text
/// (one compact object a line), so that a large body never exists as a tree
/// of JSON values. Anything but an array of objects is refused as serde would.
#[derive(Debug, Default)]
pub struct ItemsJsonl(pub String);

impl<'de> Deserialize<'de> for ItemsJsonl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Items;
        impl<'de> Visitor<'de> for Items {
            type Value = ItemsJsonl;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of JSON objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ItemsJsonl, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Map<String, Value>>()? {
                    serde_json::to_writer(&mut out, &Value::Object(item))
                        .map_err(de::Error::custom)?;
                    out.push(b'\n');
                }
                out.shrink_to_fit();
                // serde_json writes UTF-8 only.
                String::from_utf8(out)
                    .map(ItemsJsonl)
                    .map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_seq(Items)
    }
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
    /// The file goes past one of the [`Limits`]; the message names it.
    #[error("{0}")]
    Limit(String),
}

/// What one scan may read. Every format is held to the same numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Data rows.
    pub rows: usize,
    /// Columns.
    pub columns: usize,
    /// Data rows times columns.
    pub cells: usize,
    /// The rows as JSON text (column names are repeated in every row).
    pub row_bytes: usize,
    /// Strings in an XLSX workbook's shared-string table.
    pub shared_strings: usize,
    /// An XLSX workbook's parts, unpacked.
    pub unpacked_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            rows: 1_000_000,
            columns: 1_000,
            cells: 10_000_000,
            row_bytes: 256 << 20,
            shared_strings: 5_000_000,
            unpacked_bytes: 1 << 30,
        }
    }
}

/// How to read one upload.
pub struct ScanOptions<'a> {
    /// The XLSX sheet to read; the first one when `None`.
    pub sheet: Option<&'a str>,
    pub limits: &'a Limits,
    /// Whether the scan's time is up; asked every few thousand rows. The clock
    /// stays outside the domain: the caller decides what "up" means.
    pub out_of_time: &'a (dyn Fn() -> bool + Sync),
}

/// Counts what a parse has read against the limits.
struct Budget<'a> {
    limits: &'a Limits,
    out_of_time: &'a (dyn Fn() -> bool + Sync),
    columns: usize,
    rows: usize,
    bytes: usize,
    ticks: u32,
}

/// How often (in rows or cells) the clock is asked.
const TICKS_PER_CLOCK_READ: u32 = 4096;

impl<'a> Budget<'a> {
    fn new(options: &ScanOptions<'a>) -> Budget<'a> {
        Budget {
            limits: options.limits,
            out_of_time: options.out_of_time,
            columns: 0,
            rows: 0,
            bytes: 0,
            ticks: 0,
        }
    }

    /// Counts one unit of work (a row, a cell, an XML event); fails when time is up.
    fn tick(&mut self) -> Result<(), TableError> {
        let check = self.ticks.is_multiple_of(TICKS_PER_CLOCK_READ);
        self.ticks = self.ticks.wrapping_add(1);
        if check && (self.out_of_time)() {
            return Err(TableError::Limit(
                "reading the file took longer than a scan may take: split the table into smaller files"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Fails when a table of `columns` columns is too wide.
    fn check_columns(&mut self, columns: usize) -> Result<(), TableError> {
        if columns > self.limits.columns {
            return Err(too_many_columns(columns, self.limits.columns));
        }
        self.columns = columns;
        Ok(())
    }

    /// Fails when `rows` data rows are too many rows or cells.
    fn check_rows(&self, rows: usize) -> Result<(), TableError> {
        if rows > self.limits.rows {
            return Err(TableError::Limit(format!(
                "the table has more than {} data rows, the limit of a session: split it into several sessions",
                self.limits.rows
            )));
        }
        if rows.saturating_mul(self.columns) > self.limits.cells {
            return Err(TableError::Limit(format!(
                "the table has more than {} cells (rows times columns), the limit of a session: \
                 drop columns the quests do not need or split the table",
                self.limits.cells
            )));
        }
        Ok(())
    }

    /// Counts one more data row of `bytes` bytes of JSON.
    fn row(&mut self, bytes: usize) -> Result<(), TableError> {
        self.tick()?;
        self.rows += 1;
        self.check_rows(self.rows)?;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limits.row_bytes {
            return Err(TableError::Limit(format!(
                "the rows take more than {} as JSON (every row repeats the column names): \
                 shorten the column names, drop columns or split the table",
                size(self.limits.row_bytes as u64)
            )));
        }
        Ok(())
    }
}

/// A byte count as people read it.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

fn too_many_columns(columns: usize, limit: usize) -> TableError {
    TableError::Limit(format!(
        "the table has {columns} columns; at most {limit} columns are read: drop the columns the quests do not need"
    ))
}

/// The name of the only column of a plain-text upload.
pub const TEXT_COLUMN: &str = "item";

/// Parses `bytes` as a table of the given format, within `options.limits`.
pub fn parse(format: Format, bytes: &[u8], options: &ScanOptions) -> Result<Table, TableError> {
    let mut budget = Budget::new(options);
    match format {
        Format::Csv => text::parse_csv(text(bytes)?, &mut budget),
        Format::Xlsx => xlsx::parse_xlsx(bytes, options.sheet, &mut budget),
        Format::Jsonl => text::parse_jsonl(text(bytes)?, &mut budget),
        Format::Text => text::parse_text(text(bytes)?, &mut budget),
    }
}

fn text(bytes: &[u8]) -> Result<&str, TableError> {
    let s = std::str::from_utf8(bytes).map_err(|e| TableError::NotUtf8(e.valid_up_to()))?;
    Ok(s.strip_prefix('\u{feff}').unwrap_or(s))
}

/// Checks that every column has a name and no name repeats; one pass with a
/// set, so that a wide header costs linear time.
fn check_header(columns: Vec<String>, budget: &mut Budget) -> Result<Vec<String>, TableError> {
    if columns.is_empty() || columns.iter().all(|c| c.trim().is_empty()) {
        return Err(TableError::Empty);
    }
    budget.check_columns(columns.len())?;
    let mut seen = HashSet::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate() {
        if c.trim().is_empty() {
            return Err(TableError::Header(format!(
                "column {} has no name: give every column a name",
                i + 1
            )));
        }
        if !seen.insert(c.as_str()) {
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
                let key = row
                    .get(column)
                    .map(|v| cell_as_text(&v))
                    .unwrap_or_default();
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

/// The rows whose key repeats an earlier row's, equal after trimming the
/// whitespace around them: pairs of 1-based data row numbers (the earlier
/// row, the repeating one), in the order the repeats appear.
pub fn repeated_keys(keys: &[String]) -> Vec<(usize, usize)> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut pairs = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match first.entry(key.trim()) {
            std::collections::hash_map::Entry::Occupied(seen) => pairs.push((*seen.get(), i + 1)),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(i + 1);
            }
        }
    }
    pairs
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_keys_pair_each_repeat_with_its_first_row_after_trimming() {
        let keys: Vec<String> = ["Acme", "Beta", " Acme ", "Gamma", "Beta", "Acme"]
            .map(String::from)
            .to_vec();
        assert_eq!(repeated_keys(&keys), [(1, 3), (2, 5), (1, 6)]);
        assert!(
            repeated_keys(&["a".into(), "A".into()]).is_empty(),
            "case matters"
        );
    }

    /// Options with the default limits, a sheet, and a clock that never runs out.
    pub(crate) fn read(
        format: Format,
        bytes: &[u8],
        sheet: Option<&str>,
    ) -> Result<Table, TableError> {
        read_with(format, bytes, sheet, &Limits::default())
    }

    pub(crate) fn read_with(
        format: Format,
        bytes: &[u8],
        sheet: Option<&str>,
        limits: &Limits,
    ) -> Result<Table, TableError> {
        parse(
            format,
            bytes,
            &ScanOptions {
                sheet,
                limits,
                out_of_time: &|| false,
            },
        )
    }

    #[test]
    fn headers_must_be_named_and_unique() {
        assert!(matches!(
            read(Format::Csv, b"a,a\n1,2\n", None),
            Err(TableError::Header(_))
        ));
        assert!(matches!(
            read(Format::Csv, b"a,\n1,2\n", None),
            Err(TableError::Header(_))
        ));
        assert_eq!(read(Format::Csv, b"a,b\n", None), Err(TableError::Empty));
        assert_eq!(read(Format::Csv, b"", None), Err(TableError::Empty));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        assert_eq!(
            read(Format::Csv, b"a\n\xff\n", None),
            Err(TableError::NotUtf8(2))
        );
    }

    #[test]
    fn keys_name_the_row_and_column_of_an_empty_cell() {
        let t = read(Format::Csv, b"company,city\nAcme,Seoul\n,Busan\n", None).unwrap();
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

    #[test]
    fn a_row_reads_one_field_without_the_rest() {
        let row = Row::build(
            &["a".into(), "b".into(), "c".into()],
            &[json!({"deep": [1, 2]}), json!(7)],
        );
        assert_eq!(row.as_str(), r#"{"a":{"deep":[1,2]},"b":7,"c":""}"#);
        assert_eq!(row.get("b"), Some(json!(7)));
        assert_eq!(row.get("c"), Some(json!("")));
        assert_eq!(row.get("z"), None);
        assert_eq!(Row::from_map(&row.to_map()), row);
    }

    #[test]
    fn json_items_become_jsonl_one_object_a_line_and_nothing_else_is_taken() {
        let items: ItemsJsonl =
            serde_json::from_str(r#"[{"z": 1, "a": "x\ny"}, {"b": true}]"#).unwrap();
        assert_eq!(items.0, "{\"z\":1,\"a\":\"x\\ny\"}\n{\"b\":true}\n");
        assert!(serde_json::from_str::<ItemsJsonl>("[1]").is_err());
        assert!(serde_json::from_str::<ItemsJsonl>(r#""nope""#).is_err());
        assert_eq!(serde_json::from_str::<ItemsJsonl>("[]").unwrap().0, "");
    }

    #[test]
    fn a_wide_header_is_refused_naming_the_column_limit() {
        let header = (0..1001)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let file = format!("{header}\n{}\n", vec!["x"; 1001].join(","));
        let err = read(Format::Csv, file.as_bytes(), None).unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("at most 1000 columns")),
            "{err}"
        );
    }

    #[test]
    fn every_format_stops_at_the_row_cell_and_size_limits() {
        let limits = Limits {
            rows: 3,
            cells: 8,
            row_bytes: 64,
            ..Limits::default()
        };
        let rows = |n: usize| "k\n".to_owned() + &"x\n".repeat(n);
        assert!(read_with(Format::Csv, rows(3).as_bytes(), None, &limits).is_ok());
        for format in [Format::Csv, Format::Text] {
            let err = read_with(format, rows(4).as_bytes(), None, &limits).unwrap_err();
            assert!(
                matches!(&err, TableError::Limit(m) if m.contains("more than 3 data rows")),
                "{err}"
            );
        }
        let jsonl = "{\"a\":1,\"b\":2,\"c\":3}\n".repeat(3);
        let err = read_with(Format::Jsonl, jsonl.as_bytes(), None, &limits).unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("more than 8 cells")),
            "{err}"
        );
        let long = format!("k\n{}\n", "y".repeat(100));
        let err = read_with(Format::Csv, long.as_bytes(), None, &limits).unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("64 bytes as JSON")),
            "{err}"
        );
    }

    #[test]
    fn a_scan_whose_time_is_up_stops_with_the_time_limit() {
        let err = parse(
            Format::Csv,
            b"k\nx\n",
            &ScanOptions {
                sheet: None,
                limits: &Limits::default(),
                out_of_time: &|| true,
            },
        )
        .unwrap_err();
        assert!(
            matches!(&err, TableError::Limit(m) if m.contains("longer than a scan may take")),
            "{err}"
        );
    }
}
