//! Parsing table lists from bytes: the shared CSV format, our JSON format and TorchRec-style JSON
//! table definitions (all documented in `docs/FORMATS.md`). Two stages: raw records, then validated
//! [`TableSpec`]s.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::table::{ElementType, NUM_BINS, OptimizerState, TableInput, TableSpec, bins_from_slice};

/// Columns a tables CSV may have. `row` and `rows` are synonyms (the shared pool file says `row`).
pub const CSV_COLUMNS: &[&str] = &["table_id", "name", "row", "rows", "dim", "pooling_factor", "dtype", "optimizer"];

/// Parses a tables CSV. `default_dim` applies when the file has no `dim` column (the shared pool file
/// has none); without it such a file is refused, naming the missing column.
pub fn parse_tables_csv(text: &str, default_dim: Option<u32>) -> Result<Vec<TableSpec>> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| Error::Parse { context: "tables CSV header".into(), message: e.to_string() })?
        .clone();
    if headers.iter().all(str::is_empty) {
        return Err(Error::Parse {
            context: "tables CSV".into(),
            message: "the file is empty: expected a header line such as `name,rows,dim,pooling_factor`, then one line per table"
                .into(),
        });
    }
    let col = |name: &str| headers.iter().position(|h| h == name);
    for (i, h) in headers.iter().enumerate() {
        if headers.iter().take(i).any(|x| x == h) {
            return Err(Error::field(
                "tables CSV header",
                "column",
                format!("{h:?}"),
                "each column once (it appears twice)",
            ));
        }
        let is_bin = h.strip_prefix("bin_").and_then(|k| k.parse::<usize>().ok()).is_some_and(|k| k < NUM_BINS);
        if !is_bin && !CSV_COLUMNS.contains(&h) {
            return Err(Error::field(
                "tables CSV header",
                "column",
                format!("{h:?}"),
                format!("one of {}, bin_0..bin_16", CSV_COLUMNS.join(", ")),
            ));
        }
    }
    let rows_col = col("rows")
        .or_else(|| col("row"))
        .ok_or_else(|| Error::field("tables CSV header", "rows", "missing", "a `rows` (or `row`) column"))?;
    let pf_col = col("pooling_factor")
        .ok_or_else(|| Error::field("tables CSV header", "pooling_factor", "missing", "a `pooling_factor` column"))?;
    let dim_col = col("dim");
    if let (Some(_), Some(d)) = (dim_col, default_dim) {
        return Err(Error::field(
            "tables CSV",
            "--dim",
            d,
            "no --dim: the file has a `dim` column (--dim is for a CSV without one)",
        ));
    }
    if dim_col.is_none() && default_dim.is_none() {
        return Err(Error::field(
            "tables CSV header",
            "dim",
            "missing",
            "a `dim` column, or a dimension given separately (e.g. --dim 64)",
        ));
    }
    let bin_cols: Vec<Option<usize>> = (0..NUM_BINS).map(|k| col(&format!("bin_{k}"))).collect();
    let n_bins = bin_cols.iter().filter(|c| c.is_some()).count();
    if n_bins != 0 && n_bins != NUM_BINS {
        return Err(Error::field(
            "tables CSV header",
            "bin_*",
            format!("{n_bins} bin columns"),
            "all of bin_0..bin_16 or none",
        ));
    }
    let (name_col, id_col, dtype_col, opt_col) = (col("name"), col("table_id"), col("dtype"), col("optimizer"));

    let mut out = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let context = format!("tables CSV line {line}");
        let record = record.map_err(|e| Error::Parse { context: context.clone(), message: e.to_string() })?;
        let get = |c: usize| record.get(c).unwrap_or("");
        let num = |c: usize, field: &str| -> Result<f64> {
            get(c).parse::<f64>().map_err(|_| Error::field(&context, field, format!("{:?}", get(c)), "a number"))
        };
        let int = |c: usize, field: &str| -> Result<u64> {
            get(c)
                .parse::<u64>()
                .map_err(|_| Error::field(&context, field, format!("{:?}", get(c)), "a non-negative integer"))
        };
        let rows = int(rows_col, "rows")?;
        let pooling_factor = num(pf_col, "pooling_factor")?;
        let dim = match dim_col {
            Some(c) => {
                u32::try_from(int(c, "dim")?).map_err(|_| Error::field(&context, "dim", get(c), "at most 65536"))?
            }
            None => default_dim.unwrap_or(0),
        };
        let name = match (name_col, id_col) {
            (Some(c), _) if !get(c).is_empty() => get(c).to_string(),
            (_, Some(c)) => format!("t{}", get(c)),
            _ => format!("t{i}"),
        };
        let bins = if n_bins == NUM_BINS {
            let v: Vec<f64> = bin_cols
                .iter()
                .enumerate()
                .map(|(k, c)| num(c.unwrap_or(0), &format!("bin_{k}")))
                .collect::<Result<_>>()?;
            bins_from_slice(&context, Some(&v), pooling_factor)?
        } else {
            bins_from_slice(&context, None, pooling_factor)?
        };
        let dtype = match dtype_col {
            Some(c) if !get(c).is_empty() => ElementType::parse(&context, "dtype", get(c))?,
            _ => ElementType::Fp32,
        };
        let optimizer = match opt_col {
            Some(c) => OptimizerState::parse(&context, "optimizer", get(c))?,
            None => OptimizerState::None,
        };
        out.push(TableSpec::new(
            &format!("{context} (`{}`)", crate::table::shown_name(&name)),
            name,
            rows,
            dim,
            pooling_factor,
            bins,
            dtype,
            optimizer,
        )?);
    }
    check_unique_names(&out)?;
    Ok(out)
}

/// Our JSON tables format: a list of table records, or an object `{"tables": [...]}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum TablesJson {
    List(Vec<serde_json::Value>),
    Object { tables: Vec<serde_json::Value> },
}

/// A TorchRec-style table definition: `EmbeddingBagConfig`'s fields plus the pooling factor that
/// TorchRec's `ParameterConstraints(pooling_factors=[...])` would carry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchRecTableInput {
    /// Table name.
    pub name: String,
    /// Rows.
    pub num_embeddings: u64,
    /// Columns.
    pub embedding_dim: u32,
    /// Features looked up in the table (at least one).
    pub feature_names: Vec<String>,
    /// Mean lookups per sample.
    pub pooling_factor: f64,
    /// TorchRec `DataType` name: `FP32` (default), `FP16` or `INT8`.
    #[serde(default)]
    pub data_type: Option<String>,
    /// The compute kernel a `ParameterConstraints` fixes (`fused`, `fused_uvm_caching`, `fused_uvm`);
    /// absent: the planner chooses.
    #[serde(default)]
    pub compute_kernel: Option<String>,
    /// `CacheParams.load_factor` of a `fused_uvm_caching` table.
    #[serde(default)]
    pub cache_load_factor: Option<f64>,
}

impl TorchRecTableInput {
    /// Validates the record; `index` is its position in the input.
    pub fn validate(self, index: usize) -> Result<TableSpec> {
        let context = format!("TorchRec table {index} (`{}`)", crate::table::shown_name(&self.name));
        if self.feature_names.is_empty() || self.feature_names.iter().any(|f| f.trim().is_empty()) {
            return Err(Error::field(
                &context,
                "feature_names",
                format!("{:?}", self.feature_names),
                "a non-empty list of non-empty names",
            ));
        }
        let dtype = match self.data_type.as_deref() {
            None => ElementType::Fp32,
            Some(d) => ElementType::parse(&context, "data_type", d)?,
        };
        let bins = bins_from_slice(&context, None, self.pooling_factor)?;
        let tier = crate::table::Tier::from_fields(&context, self.compute_kernel.as_deref(), self.cache_load_factor)?;
        TableSpec::new(
            &context,
            self.name,
            self.num_embeddings,
            self.embedding_dim,
            self.pooling_factor,
            bins,
            dtype,
            OptimizerState::None,
        )
        .map_err(|e| match e {
            // Name the fields as the user wrote them.
            Error::InvalidField { context, field, value, allowed } => Error::InvalidField {
                context,
                field: match field.as_str() {
                    "rows" => "num_embeddings".into(),
                    "dim" => "embedding_dim".into(),
                    _ => field,
                },
                value,
                allowed,
            },
            e => e,
        })
        .map(|t| t.with_tier(tier))
    }
}

/// Parses TorchRec-style table definitions: a list (or `{"tables": [...]}`) of
/// `{name, num_embeddings, embedding_dim, feature_names, pooling_factor[, data_type]}`.
pub fn parse_torchrec_tables_json(text: &str) -> Result<Vec<TableSpec>> {
    let tables = json_records(text)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let input: TorchRecTableInput = serde_json::from_value(v).map_err(|e| Error::Parse {
                context: format!("TorchRec tables JSON record {i}"),
                message: e.to_string(),
            })?;
            input.validate(i)
        })
        .collect::<Result<Vec<_>>>()?;
    check_unique_names(&tables)?;
    Ok(tables)
}

fn json_records(text: &str) -> Result<Vec<serde_json::Value>> {
    let doc: TablesJson = serde_json::from_str(text).map_err(|e| Error::Parse {
        context: "tables JSON".into(),
        message: format!("{e}; expected a list of tables or {{\"tables\": [...]}}"),
    })?;
    Ok(match doc {
        TablesJson::List(v) | TablesJson::Object { tables: v } => v,
    })
}

/// Parses a tables JSON document: our records (see [`TableInput`]), or TorchRec-style definitions
/// ([`parse_torchrec_tables_json`]) when the first record has a `num_embeddings` field.
pub fn parse_tables_json(text: &str) -> Result<Vec<TableSpec>> {
    let records = json_records(text)?;
    if records.first().and_then(|r| r.get("num_embeddings")).is_some() {
        return parse_torchrec_tables_json(text);
    }
    let tables = records
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let input: TableInput = serde_json::from_value(v)
                .map_err(|e| Error::Parse { context: format!("tables JSON record {i}"), message: e.to_string() })?;
            input.validate(i)
        })
        .collect::<Result<Vec<_>>>()?;
    check_unique_names(&tables)?;
    Ok(tables)
}

/// Table names must be unique within a task (plans and exports refer to tables by name).
pub fn check_unique_names(tables: &[TableSpec]) -> Result<()> {
    let mut seen = std::collections::BTreeMap::new();
    for (i, t) in tables.iter().enumerate() {
        if let Some(first) = seen.insert(t.name.as_str(), i) {
            return Err(Error::field(
                format!("table {i}"),
                "name",
                format!("{:?}", t.name),
                format!("a name not used by table {first}"),
            ));
        }
    }
    if tables.is_empty() {
        return Err(Error::field("tables", "count", 0, "at least one table"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_control_characters_is_shown_escaped_in_every_refusal() {
        for e in [
            err(parse_tables_csv("name,rows,dim,pooling_factor\n\u{1b}[31mred,10,8,1\n", None)),
            err(parse_tables_json(r#"[{"name": "\u001b[31mred", "rows": 10, "dim": 8, "pooling_factor": 1}]"#)),
            err(parse_tables_csv("name,rows,dim,pooling_factor\n\u{1b}[31mred,0,8,1\n", None)),
        ] {
            assert!(!e.contains('\u{1b}') && e.contains("\\u{1b}[31mred"), "{e}");
        }
    }

    fn err(r: Result<Vec<TableSpec>>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn shared_csv_loads_as_is_with_a_dim() {
        let t = parse_tables_csv(crate::pool::DLRM_T856_CSV, Some(16)).unwrap();
        assert_eq!(t.len(), 856);
        assert_eq!(t[0].name, "t0");
        assert_eq!(t[0].rows, 8_015_938);
        assert!(err(parse_tables_csv(crate::pool::DLRM_T856_CSV, None)).contains("`dim`"));
    }

    #[test]
    fn csv_errors_name_field_and_value() {
        assert!(err(parse_tables_csv("rows,dim,pooling_factor,colour\n1,4,1,red\n", None)).contains("\"colour\""));
        let e = err(parse_tables_csv("rows,dim,pooling_factor\n-5,4,1\n", None));
        assert!(e.contains("`rows`") && e.contains("-5") && e.contains("line 2"), "{e}");
        let e = err(parse_tables_csv("rows,dim,pooling_factor\n5,6,1\n", None));
        assert!(e.contains("`dim` = 6"), "{e}");
        let e = err(parse_tables_csv("name,rows,dim,pooling_factor\na,5,4,1\na,5,4,1\n", None));
        assert!(e.contains("\"a\""), "{e}");
        let e = err(parse_tables_csv("name,rows,rows,dim,pooling_factor\na,5,7,4,1\n", None));
        assert!(e.contains("\"rows\"") && e.contains("twice"), "{e}");
        let e = err(parse_tables_csv("rows,dim,pooling_factor\n5,4,1e20\n", None));
        assert!(e.contains("pooling_factor") && e.contains("1e20") || e.contains("100000000000000000000"), "{e}");
    }

    #[test]
    fn json_both_shapes() {
        let a = parse_tables_json(r#"[{"name":"a","rows":10,"dim":8,"pooling_factor":2}]"#).unwrap();
        let b = parse_tables_json(r#"{"tables":[{"name":"a","rows":10,"dim":8,"pooling_factor":2}]}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].bins[0], 1.0);
        let e = err(parse_tables_json(r#"[{"rows":10,"dim":8,"pooling_factor":2,"dtype":"fp64"}]"#));
        assert!(e.contains("record 0") && e.contains("fp64"), "{e}");
    }

    #[test]
    fn torchrec_style_definitions() {
        let text = r#"[{"name": "user", "num_embeddings": 1000, "embedding_dim": 64, "feature_names": ["uid"],
                        "pooling_factor": 1.5},
                       {"name": "item", "num_embeddings": 50, "embedding_dim": 16, "feature_names": ["a", "b"],
                        "pooling_factor": 20, "data_type": "FP16"}]"#;
        let t = parse_tables_json(text).unwrap();
        assert_eq!(t, parse_torchrec_tables_json(text).unwrap());
        assert_eq!((t[0].rows, t[0].dim, t[0].pooling_factor), (1000, 64, 1.5));
        assert_eq!(t[1].dtype, ElementType::Fp16);
        assert_eq!(t[1].bins[0], 1.0);
        let e = err(parse_torchrec_tables_json(
            r#"[{"name": "x", "num_embeddings": 10, "embedding_dim": 6, "feature_names": ["f"], "pooling_factor": 1}]"#,
        ));
        assert!(e.contains("`embedding_dim` = 6"), "{e}");
        let e = err(parse_tables_json(
            r#"[{"name": "x", "num_embeddings": 10, "embedding_dim": 8, "feature_names": [], "pooling_factor": 1}]"#,
        ));
        assert!(e.contains("`feature_names`") && e.contains("[]"), "{e}");
        let e = err(parse_tables_json(
            r#"[{"name": "x", "num_embeddings": 10, "embedding_dim": 8, "feature_names": ["f"], "pooling_factors": [1]}]"#,
        ));
        assert!(e.contains("pooling_factors"), "{e}");
    }
}
