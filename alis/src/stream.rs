//! Request streams: parsing (JSON Lines, CSV), validation and interning of row keys into dense row indices.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::AlisError;

/// One request as read from a stream file, before validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawRequest {
    /// Caller-chosen request id (only used to order requests with equal time).
    pub request_id: u64,
    /// Arrival time in any monotone unit (seconds in our data).
    pub time: f64,
    /// Row ids touched by the request (duplicates allowed; they count once).
    pub row_ids: Vec<u64>,
    /// Table id of every row id (same length as `row_ids`); absent means table 0 for all.
    #[serde(default)]
    pub table_ids: Option<Vec<u32>>,
}

/// A validated request stream: requests sorted by (time, request id), rows interned to dense indices in
/// order of first appearance, stored as one compressed sparse row array.
///
/// Dense indices in first-appearance order mean that after replaying any prefix of the stream the rows known
/// so far are exactly `0..n_known`, so an assignment is a plain `Vec<u16>` prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    req_offsets: Vec<usize>,
    pins: Vec<u32>,
    times: Vec<f64>,
    request_ids: Vec<u64>,
    row_keys: Vec<u64>,
    row_tables: Vec<u32>,
    /// `known_after[i]`: one past the largest row index in requests `0..i` (prefix maxima, so that the strategies'
    /// per-update question costs O(1) instead of a scan of the whole history).
    known_after: Vec<usize>,
}

impl Stream {
    /// Validates raw requests and builds the stream. `first_line` is the 1-based line of `raw[0]` in its file
    /// (used in error messages; requests are assumed to be one per line).
    pub fn from_raw(raw: Vec<RawRequest>, first_line: usize) -> Result<Self, AlisError> {
        let lines: Vec<usize> = (first_line..first_line + raw.len()).collect();
        Self::from_lines(raw, &lines)
    }

    /// Validates `raw[i]` as the request found on line `lines[i]` and builds the stream.
    fn from_lines(raw: Vec<RawRequest>, lines: &[usize]) -> Result<Self, AlisError> {
        let mut indexed: Vec<(usize, RawRequest)> = Vec::with_capacity(raw.len());
        for (r, &line) in raw.into_iter().zip(lines) {
            validate(&r, line)?;
            indexed.push((line, r));
        }
        if indexed.is_empty() {
            return Err(AlisError::EmptyStream);
        }
        indexed.sort_by(|a, b| a.1.time.total_cmp(&b.1.time).then(a.1.request_id.cmp(&b.1.request_id)));
        let mut interner: HashMap<(u32, u64), u32> = HashMap::new();
        let mut s = Stream {
            req_offsets: vec![0],
            pins: Vec::new(),
            times: Vec::with_capacity(indexed.len()),
            request_ids: Vec::with_capacity(indexed.len()),
            row_keys: Vec::new(),
            row_tables: Vec::new(),
            known_after: Vec::new(),
        };
        for (line, r) in indexed {
            let start = s.pins.len();
            for (j, &row) in r.row_ids.iter().enumerate() {
                let table = r.table_ids.as_ref().map_or(0, |t| t[j]);
                let next = s.row_keys.len();
                if next >= u32::MAX as usize {
                    return Err(AlisError::InvalidParam {
                        field: "row_ids",
                        value: format!("line {line}: more than {} distinct rows", u32::MAX),
                        allowed: "at most u32::MAX - 1 distinct (table, row) pairs".into(),
                    });
                }
                let idx = *interner.entry((table, row)).or_insert_with(|| {
                    s.row_keys.push(row);
                    s.row_tables.push(table);
                    next as u32
                });
                if !s.pins[start..].contains(&idx) {
                    s.pins.push(idx);
                }
            }
            s.req_offsets.push(s.pins.len());
            s.times.push(r.time);
            s.request_ids.push(r.request_id);
        }
        s.index_known_rows();
        Ok(s)
    }

    /// Builds a stream directly from dense requests (rows already interned, first appearance order not
    /// required). Used by the synthetic generator; row keys are the dense indices themselves unless given.
    pub(crate) fn from_parts(req_offsets: Vec<usize>, pins: Vec<u32>, times: Vec<f64>, row_keys: Vec<u64>) -> Self {
        let n = times.len();
        let tables = vec![0; row_keys.len()];
        let mut s = Stream {
            req_offsets,
            pins,
            times,
            request_ids: (0..n as u64).collect(),
            row_keys,
            row_tables: tables,
            known_after: Vec::new(),
        };
        s.index_known_rows();
        s
    }

    fn index_known_rows(&mut self) {
        let mut known = 0usize;
        self.known_after = std::iter::once(0)
            .chain(self.req_offsets.windows(2).map(|w| {
                known = self.pins[w[0]..w[1]].iter().fold(known, |k, &r| k.max(r as usize + 1));
                known
            }))
            .collect();
    }

    /// Number of requests.
    #[must_use]
    pub fn n_requests(&self) -> usize {
        self.times.len()
    }

    /// Number of distinct rows (over all tables).
    #[must_use]
    pub fn n_rows(&self) -> usize {
        self.row_keys.len()
    }

    /// Total number of (request, distinct row) pins.
    #[must_use]
    pub fn n_pins(&self) -> usize {
        self.pins.len()
    }

    /// Dense row indices of request `i` (distinct).
    #[must_use]
    pub fn request(&self, i: usize) -> &[u32] {
        &self.pins[self.req_offsets[i]..self.req_offsets[i + 1]]
    }

    /// Time of request `i`.
    #[must_use]
    pub fn time(&self, i: usize) -> f64 {
        self.times[i]
    }

    /// Caller's id of request `i`.
    #[must_use]
    pub fn request_id(&self, i: usize) -> u64 {
        self.request_ids[i]
    }

    /// Original row id of dense row `row`.
    #[must_use]
    pub fn row_key(&self, row: u32) -> u64 {
        self.row_keys[row as usize]
    }

    /// Table id of dense row `row`.
    #[must_use]
    pub fn row_table(&self, row: u32) -> u32 {
        self.row_tables[row as usize]
    }

    /// Splits the request indices into consecutive windows of `window_requests` requests (the last may be
    /// shorter).
    pub fn windows(&self, window_requests: usize) -> Result<Vec<std::ops::Range<usize>>, AlisError> {
        if window_requests == 0 {
            return Err(AlisError::InvalidParam {
                field: "window_requests",
                value: "0".into(),
                allowed: ">= 1".into(),
            });
        }
        let n = self.n_requests();
        Ok((0..n.div_ceil(window_requests)).map(|w| w * window_requests..((w + 1) * window_requests).min(n)).collect())
    }

    /// One past the largest dense row index that occurs in requests `0..end` (rows are interned in first
    /// appearance order, so this is the number of rows known after those requests).
    #[must_use]
    pub fn rows_known_after(&self, end: usize) -> usize {
        self.known_after[end]
    }
}

/// The largest stream file the binaries read (1 GiB): larger is refused before it is read whole.
pub const MAX_STREAM_FILE_BYTES: u64 = 1 << 30;

/// The stream file extensions [`parse_named`] reads, in its error message's words.
pub const STREAM_EXTENSIONS: &str = ".jsonl, .json, .ndjson, .csv";

/// Parses a stream file's text in the format its name's extension says (case-insensitive): `.jsonl`,
/// `.json` and `.ndjson` are JSON Lines ([`parse_jsonl`]), `.csv` is CSV ([`parse_csv`]); any other
/// extension is refused naming it. `name` is only looked at, never opened: reading is the caller's.
pub fn parse_named(name: &str, text: &str) -> Result<Stream, AlisError> {
    let ext = std::path::Path::new(name).extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "csv" => parse_csv(text),
        "jsonl" | "json" | "ndjson" => parse_jsonl(text),
        other => Err(AlisError::InvalidParam {
            field: "stream file extension",
            value: format!("{other:?}"),
            allowed: STREAM_EXTENSIONS.into(),
        }),
    }
}

/// Parses the JSON Lines stream format: one object per non-empty line,
/// `{"request_id": 7, "time": 12.5, "row_ids": [3, 9, 4], "table_ids": [0, 0, 1]}` (`table_ids` optional).
pub fn parse_jsonl(text: &str) -> Result<Stream, AlisError> {
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let r: RawRequest = serde_json::from_str(trimmed).map_err(|e| AlisError::Parse {
            line: i + 1,
            field: "json",
            value: truncate(trimmed),
            reason: e.to_string(),
        })?;
        raw.push(r);
        lines.push(i + 1);
    }
    Stream::from_lines(raw, &lines)
}

/// Parses the CSV stream format: a header `request_id,time,row_ids[,table_ids]`, then one request per
/// record; `row_ids` and `table_ids` are lists separated by spaces or `;`.
pub fn parse_csv(text: &str) -> Result<Stream, AlisError> {
    let mut rdr = csv::ReaderBuilder::new().flexible(true).trim(csv::Trim::All).from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| csv_err(1, "header", "", &e))?.clone();
    let col = |name: &'static str| headers.iter().position(|h| h == name);
    let (Some(c_id), Some(c_time), Some(c_rows)) = (col("request_id"), col("time"), col("row_ids")) else {
        return Err(AlisError::Parse {
            line: 1,
            field: "header",
            value: truncate(&headers.iter().collect::<Vec<_>>().join(",")),
            reason: "needs columns request_id, time, row_ids (and optionally table_ids)".into(),
        });
    };
    let c_tables = col("table_ids");
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            csv_err(line, "record", "", &e)
        })?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        let get = |c: usize, field: &'static str| {
            rec.get(c).ok_or_else(|| AlisError::Parse {
                line,
                field,
                value: String::new(),
                reason: "missing column".into(),
            })
        };
        let id_s = get(c_id, "request_id")?;
        let request_id = id_s.parse::<u64>().map_err(|e| AlisError::Parse {
            line,
            field: "request_id",
            value: truncate(id_s),
            reason: e.to_string(),
        })?;
        let t_s = get(c_time, "time")?;
        let time = t_s
            .parse::<f64>()
            .map_err(|e| e.to_string())
            .and_then(|t| if t.is_finite() { Ok(t) } else { Err("must be a finite number".to_string()) });
        // The value as written (`nan`, `inf`), not as Rust prints the parsed float.
        let time = time.map_err(|reason| AlisError::Parse { line, field: "time", value: truncate(t_s), reason })?;
        let row_ids = parse_list::<u64>(get(c_rows, "row_ids")?, line, "row_ids")?;
        let table_ids = match c_tables.and_then(|c| rec.get(c)) {
            Some(s) if !s.is_empty() => Some(parse_list::<u32>(s, line, "table_ids")?),
            _ => None,
        };
        raw.push(RawRequest { request_id, time, row_ids, table_ids });
        lines.push(line);
    }
    Stream::from_lines(raw, &lines)
}

fn validate(r: &RawRequest, line: usize) -> Result<(), AlisError> {
    if !r.time.is_finite() {
        return Err(AlisError::Parse {
            line,
            field: "time",
            value: r.time.to_string(),
            reason: "must be a finite number".into(),
        });
    }
    if r.row_ids.is_empty() {
        return Err(AlisError::Parse {
            line,
            field: "row_ids",
            value: "[]".into(),
            reason: "a request must touch at least one row".into(),
        });
    }
    if let Some(t) = &r.table_ids
        && t.len() != r.row_ids.len()
    {
        return Err(AlisError::Parse {
            line,
            field: "table_ids",
            value: format!("{} entries", t.len()),
            reason: format!("must have one entry per row id ({})", r.row_ids.len()),
        });
    }
    Ok(())
}

fn parse_list<T: std::str::FromStr>(s: &str, line: usize, field: &'static str) -> Result<Vec<T>, AlisError>
where
    T::Err: std::fmt::Display,
{
    s.split(|c: char| c == ';' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<T>().map_err(|e| AlisError::Parse { line, field, value: truncate(t), reason: e.to_string() })
        })
        .collect()
}

fn csv_err(line: usize, field: &'static str, value: &str, e: &csv::Error) -> AlisError {
    AlisError::Parse { line, field, value: truncate(value), reason: e.to_string() }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        s.to_string()
    } else {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_sorts_by_time_and_interns_in_first_appearance_order() {
        let text = "{\"request_id\":2,\"time\":5.0,\"row_ids\":[7,7,8]}\n\n{\"request_id\":1,\"time\":1.0,\"row_ids\":[8,9],\"table_ids\":[0,1]}\n";
        let s = parse_jsonl(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.n_requests(), 2);
        assert_eq!(s.request_id(0), 1);
        assert_eq!(s.request(0), &[0, 1]);
        // Row 7 of table 0 is new, row 8 of table 0 was seen first; duplicates count once.
        assert_eq!(s.request(1), &[2, 0]);
        assert_eq!(s.row_table(1), 1);
        assert_eq!(s.rows_known_after(1), 2);
    }

    #[test]
    fn the_file_name_chooses_the_format() {
        let jsonl = "{\"request_id\":1,\"time\":1.0,\"row_ids\":[8,9]}\n";
        let csv = "request_id,time,row_ids\n1,1.0,8 9\n";
        for name in ["a.jsonl", "dir.v2/A.JSON", "b.ndjson"] {
            assert_eq!(parse_named(name, jsonl).unwrap().n_requests(), 1, "{name}");
        }
        assert_eq!(parse_named("s.CSV", csv).unwrap().n_requests(), 1);
        // The CSV text read as JSON Lines fails, so the extension, not the content, decided.
        assert!(parse_named("s.jsonl", csv).is_err());
        for (name, shown) in [("s.txt", "\"txt\""), ("stream", "\"\""), ("dir.csv/s", "\"\"")] {
            let e = parse_named(name, jsonl).unwrap_err().to_string();
            assert_eq!(e, format!("invalid stream file extension = {shown} (allowed: {STREAM_EXTENSIONS})"), "{name}");
        }
    }

    #[test]
    fn jsonl_error_names_line_and_field() {
        let text = "{\"request_id\":1,\"time\":1.0,\"row_ids\":[1]}\n{\"request_id\":2,\"time\":2.0,\"row_ids\":[]}\n";
        let e = parse_jsonl(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("line 2") && e.contains("row_ids"), "{e}");
        let e = parse_jsonl("{\"request_id\":1,\"time\":1.0,\"row_ids\":[1]}\nnot json\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn csv_parses_lists_and_reports_bad_values() {
        let text = "request_id,time,row_ids,table_ids\n1,0.5,3;4 5,\n2,1.5,5;6,0;2\n";
        let s = parse_csv(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.n_requests(), 2);
        assert_eq!(s.request(0).len(), 3);
        // Row 5 of table 0 repeats; row 6 lives in table 2.
        assert_eq!(s.n_rows(), 4);
        assert_eq!(s.row_table(3), 2);
        let e = parse_csv("request_id,time,row_ids\n1,0.5,3;x\n").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("line 2") && e.contains("row_ids") && e.contains('x'), "{e}");
        let e = parse_csv("id,time\n1,2\n").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("header"), "{e}");
        // Non-finite times are refused, echoed as written.
        for t in ["nan", "inf", "-Infinity"] {
            let e = parse_csv(&format!("request_id,time,row_ids\n1,{t},3\n"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("line 2") && e.contains(&format!("{t:?}")) && e.contains("finite"), "{e}");
        }
    }
}
