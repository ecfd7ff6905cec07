//! Building JSON from SQL values, as Postgres does: `to_json`/`to_jsonb`, `row_to_json`,
//! `array_to_json`,
//! `json_build_object`/`jsonb_build_object`, `json_build_array`/`jsonb_build_array`, and
//! the aggregates `json_agg`/`jsonb_agg`, `json_object_agg`/`jsonb_object_agg`.
//!
//! Values map as Postgres maps them: numbers stay numbers (NaN and infinities become
//! strings), booleans `true`/`false`, text a JSON string, dates and timestamps ISO 8601
//! strings (`2015-07-15T10:15:00`), arrays JSON arrays, records (`ROW(...)`, structs)
//! objects with their field names (`f1`, `f2`... for an anonymous ROW), `jsonb` itself.
//! `json` results keep Postgres' spacing for each function (`row_to_json` none,
//! `json_build_object` `{"a" : 1}`); `jsonb` results are in jsonb's canonical form
//! ([`crate::sql::jsonb::normalize`]) and typed `jsonb`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::error::{WeirError, sqlstate};
use crate::sql::jsonb::write_str;
use crate::sql::pg_text::text_values;
use crate::sql::types::{SqlType, field_sql_type};

/// A date or timestamp's text as Postgres writes it in JSON: ISO 8601, `T` between date
/// and time, an offset with its minutes (`2024-03-10T01:30:00-05:00`).
pub fn iso_timestamp_text(text: &str) -> String {
    let mut v = text.replacen(' ', "T", 1);
    // `...-05` / `...+00` (an offset of whole hours): Postgres adds `:00`
    let b = v.as_bytes();
    let n = b.len();
    if n > 3
        && matches!(b[n - 3], b'+' | b'-')
        && b[n - 2].is_ascii_digit()
        && b[n - 1].is_ascii_digit()
        && v.contains('T')
    {
        v.push_str(":00");
    }
    v
}

/// `timestamptz` values as JSON text in a session zone (`catalog/pg_semantics.rs` gives a
/// JSON function's timestamptz argument through this where the zone is not UTC): the same
/// string the JSON functions write, shown in that zone.
pub fn timestamptz_json_text(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    let zone = crate::sql::time_zone::zone_arg(args.get(1))?;
    let text = crate::sql::pg_text::text_values_in(&args[0], &zone)?;
    let out: datafusion::arrow::array::StringArray =
        text.iter().map(|v| v.map(iso_timestamp_text)).collect();
    Ok(Arc::new(out))
}

fn ext(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Each value of a column as JSON text (None for SQL NULL), `compact` without spaces
/// after commas (json's `to_json`), else with them (jsonb's, and `json_agg`'s elements).
pub fn json_values(
    col: &ArrayRef,
    field: Option<&Field>,
    compact: bool,
) -> DfResult<Vec<Option<String>>> {
    let n = col.len();
    // json and jsonb values are JSON already
    let is_jsonb = matches!(
        field.and_then(field_sql_type),
        Some(SqlType::Jsonb | SqlType::Json)
    );
    let sep = if compact { "," } else { ", " };
    let texts = |col: &ArrayRef| text_values(col);
    Ok(match col.data_type() {
        DataType::Null => vec![None; n],
        DataType::Boolean => {
            let a = col.as_boolean();
            (0..n)
                .map(|i| (!a.is_null(i)).then(|| a.value(i).to_string()))
                .collect()
        }
        t if t.is_integer() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
            let s = texts(col)?;
            (0..n)
                .map(|i| (!s.is_null(i)).then(|| s.value(i).to_owned()))
                .collect()
        }
        DataType::Float32 | DataType::Float64 => {
            let s = texts(col)?;
            (0..n)
                .map(|i| {
                    (!s.is_null(i)).then(|| {
                        let v = s.value(i);
                        if matches!(v, "NaN" | "Infinity" | "-Infinity") {
                            format!("\"{v}\"")
                        } else {
                            v.to_owned()
                        }
                    })
                })
                .collect()
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View if is_jsonb => {
            let s = datafusion::arrow::compute::cast(col, &DataType::Utf8)?;
            let s = s.as_string::<i32>();
            (0..n)
                .map(|i| (!s.is_null(i)).then(|| s.value(i).to_owned()))
                .collect()
        }
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Time64(_) => {
            let s = texts(col)?;
            (0..n)
                .map(|i| {
                    (!s.is_null(i)).then(|| {
                        let mut o = String::new();
                        write_str(&mut o, &iso_timestamp_text(s.value(i)));
                        o
                    })
                })
                .collect()
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let f = match col.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    f.clone()
                }
                _ => unreachable!("matched a list type"),
            };
            let l = datafusion::arrow::compute::cast(col, &DataType::LargeList(f.clone()))?;
            let l = l.as_list::<i64>();
            // the elements' Postgres type: the list field's own (`jsonb[]`: array_agg of a
            // jsonb), else the element field's
            let typed = match field.and_then(field_sql_type) {
                Some(SqlType::Array(t)) => Some(t.field(f.name(), true)),
                _ => None,
            };
            let inner = json_values(
                l.values(),
                Some(typed.as_ref().unwrap_or(f.as_ref())),
                compact,
            )?;
            let offs = l.value_offsets();
            (0..n)
                .map(|i| {
                    (!l.is_null(i)).then(|| {
                        let items: Vec<&str> = (offs[i] as usize..offs[i + 1] as usize)
                            .map(|j| inner[j].as_deref().unwrap_or("null"))
                            .collect();
                        format!("[{}]", items.join(sep))
                    })
                })
                .collect()
        }
        DataType::Struct(fields) => {
            let st = col.as_struct();
            let cols: Vec<Vec<Option<String>>> = st
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| json_values(c, Some(f.as_ref()), compact))
                .collect::<DfResult<_>>()?;
            let names: Vec<String> = fields
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    // DataFusion names an anonymous ROW's fields c0, c1...; Postgres f1, f2...
                    let anon = f
                        .name()
                        .strip_prefix('c')
                        .is_some_and(|d| d.parse::<usize>() == Ok(k));
                    if anon {
                        format!("f{}", k + 1)
                    } else {
                        f.name().clone()
                    }
                })
                .collect();
            (0..n)
                .map(|i| {
                    (!st.is_null(i)).then(|| {
                        let mut o = String::from("{");
                        for (k, name) in names.iter().enumerate() {
                            if k > 0 {
                                o.push_str(sep);
                            }
                            write_str(&mut o, name);
                            o.push_str(if compact { ":" } else { ": " });
                            o.push_str(cols[k][i].as_deref().unwrap_or("null"));
                        }
                        o.push('}');
                        o
                    })
                })
                .collect()
        }
        _ => {
            let s = texts(col)?;
            (0..n)
                .map(|i| {
                    (!s.is_null(i)).then(|| {
                        let mut o = String::new();
                        write_str(&mut o, s.value(i));
                        o
                    })
                })
                .collect()
        }
    })
}

fn json_field(name: &str) -> FieldRef {
    Arc::new(SqlType::Json.field(name, true))
}

fn jsonb_field(name: &str) -> FieldRef {
    Arc::new(SqlType::Jsonb.field(name, true))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Build {
    /// to_json / to_jsonb / row_to_json
    Value,
    /// json_build_object / jsonb_build_object
    Object,
    /// json_build_array / jsonb_build_array
    Array,
    /// json_object / jsonb_object (from text arrays)
    FromArrays,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuild {
    name: &'static str,
    build: Build,
    jsonb: bool,
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuild {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(if self.jsonb {
            jsonb_field(self.name)
        } else {
            json_field(self.name)
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<DfResult<Vec<_>>>()?;
        if self.build == Build::FromArrays {
            return object_from_arrays(self.name, self.jsonb, &arrays, n);
        }
        let compact = !self.jsonb;
        let vals: Vec<Vec<Option<String>>> = arrays
            .iter()
            .zip(args.arg_fields.iter())
            .map(|(a, f)| json_values(a, Some(f.as_ref()), compact))
            .collect::<DfResult<_>>()?;
        let mut out = StringBuilder::new();
        for i in 0..n {
            let text = match self.build {
                Build::Value => vals.first().and_then(|v| v[i].clone()),
                // (built by `object_from_arrays` before the values are read)
                Build::FromArrays => None,
                Build::Array => Some(format!(
                    "[{}]",
                    vals.iter()
                        .map(|v| v[i].clone().unwrap_or_else(|| "null".into()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Build::Object => {
                    if !vals.len().is_multiple_of(2) {
                        return Err(ext(WeirError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            "argument list must have even number of elements",
                        )
                        .with_hint(format!(
                            "The arguments of {}() must consist of alternating keys and values.",
                            self.name
                        ))));
                    }
                    let keys = arrays
                        .iter()
                        .step_by(2)
                        .map(text_values)
                        .collect::<DfResult<Vec<StringArray>>>()?;
                    let mut o = String::from("{");
                    for (k, key) in keys.iter().enumerate() {
                        if key.is_null(i) {
                            return Err(ext(WeirError::new(
                                sqlstate::INVALID_PARAMETER_VALUE,
                                "null value not allowed for object key",
                            )));
                        }
                        if k > 0 {
                            o.push_str(", ");
                        }
                        write_str(&mut o, key.value(i));
                        o.push_str(" : ");
                        o.push_str(vals[2 * k + 1][i].as_deref().unwrap_or("null"));
                    }
                    o.push('}');
                    Some(o)
                }
            };
            match text {
                Some(t) if self.jsonb => {
                    out.append_value(crate::sql::jsonb::normalize(&t).map_err(ext)?)
                }
                Some(t) => out.append_value(t),
                None => out.append_null(),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            && n == 1
        {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `json_agg`/`jsonb_agg` (an array of the rows' values) and `json_object_agg`/
/// `jsonb_object_agg` (an object of key/value pairs), in the order rows arrive.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonAgg {
    name: &'static str,
    object: bool,
    jsonb: bool,
    signature: Signature,
}

impl AggregateUDFImpl for JsonAgg {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field(&self, _: &[FieldRef]) -> DfResult<FieldRef> {
        Ok(if self.jsonb {
            jsonb_field(self.name)
        } else {
            json_field(self.name)
        })
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        // `json_agg(x ORDER BY ...)`: the ordering columns follow the arguments
        let order = if args.order_bys.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                args.order_bys
                    .iter()
                    .map(|o| {
                        Ok(SortField::new_with_options(
                            o.expr.data_type(args.schema)?,
                            o.options,
                        ))
                    })
                    .collect::<DfResult<Vec<_>>>()?,
            )?)
        };
        Ok(Box::new(JsonAggAcc {
            object: self.object,
            jsonb: self.jsonb,
            fields: args
                .exprs
                .iter()
                .map(|e| e.return_field(args.schema))
                .collect::<DfResult<Vec<_>>>()?,
            nargs: if self.object { 2 } else { 1 },
            distinct: args.is_distinct,
            order,
            items: Vec::new(),
            keys: Vec::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format!("{}_items", args.name),
                DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
                true,
            )),
            Arc::new(Field::new(
                format!("{}_keys", args.name),
                DataType::List(Arc::new(Field::new_list_field(DataType::Binary, true))),
                true,
            )),
        ])
    }
}

#[derive(Debug)]
struct JsonAggAcc {
    object: bool,
    jsonb: bool,
    fields: Vec<FieldRef>,
    nargs: usize,
    /// `json_agg(DISTINCT x ORDER BY x)`: each piece once (DataFusion leaves DISTINCT to an
    /// aggregate with an ORDER BY).
    distinct: bool,
    /// ORDER BY of the aggregate: its sort keys' encoding
    order: Option<RowConverter>,
    /// each row's piece: an element, or `"key" : value`
    items: Vec<String>,
    /// each piece's sort key (with ORDER BY)
    keys: Vec<Vec<u8>>,
}

impl Accumulator for JsonAggAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let n = values.first().map(|v| v.len()).unwrap_or(0);
        if let Some(conv) = &self.order {
            let rows = conv.convert_columns(&values[self.nargs.min(values.len())..])?;
            self.keys.extend(rows.iter().map(|r| r.as_ref().to_vec()));
        }
        let field = |k: usize| self.fields.get(k).map(|f| f.as_ref().clone());
        if self.object {
            let keys = text_values(&values[0])?;
            let vals = json_values(&values[1], field(1).as_ref(), !self.jsonb)?;
            for (i, v) in vals.iter().enumerate().take(n) {
                if keys.is_null(i) {
                    return Err(ext(WeirError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        "field name must not be null",
                    )));
                }
                let mut o = String::new();
                write_str(&mut o, keys.value(i));
                o.push_str(" : ");
                o.push_str(v.as_deref().unwrap_or("null"));
                self.items.push(o);
            }
        } else {
            let vals = json_values(&values[0], field(0).as_ref(), !self.jsonb)?;
            for v in vals {
                self.items.push(v.unwrap_or_else(|| "null".into()));
            }
        }
        Ok(())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.items.is_empty() {
            return Ok(ScalarValue::Utf8(None));
        }
        if self.order.is_some() && self.keys.len() == self.items.len() {
            let mut idx: Vec<usize> = (0..self.items.len()).collect();
            idx.sort_by(|a, b| self.keys[*a].cmp(&self.keys[*b]));
            self.items = idx.iter().map(|i| self.items[*i].clone()).collect();
            self.keys = idx.iter().map(|i| self.keys[*i].clone()).collect();
        }
        if self.distinct {
            let mut seen = std::collections::HashSet::new();
            let mut kept = Vec::with_capacity(self.items.len());
            for item in std::mem::take(&mut self.items) {
                if seen.insert(item.clone()) {
                    kept.push(item);
                }
            }
            self.items = kept;
            self.keys.clear();
        }
        let text = if self.object {
            format!("{{ {} }}", self.items.join(", "))
        } else {
            // json_agg of records or arrays puts each element after the first on a line
            // of its own, as Postgres' json_agg does (jsonb's normal form has no newlines)
            let structured = self.fields.first().is_some_and(|f| {
                matches!(
                    f.data_type(),
                    DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_)
                )
            });
            let mut out = String::from("[");
            for (i, item) in self.items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                    if structured && item != "null" {
                        out.push_str("\n ");
                    }
                }
                out.push_str(item);
            }
            out.push(']');
            out
        };
        Ok(ScalarValue::Utf8(Some(if self.jsonb {
            crate::sql::jsonb::normalize(&text).map_err(ext)?
        } else {
            text
        })))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.items.iter().map(|s| s.capacity() + 24).sum::<usize>()
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let items: Vec<ScalarValue> = self
            .items
            .iter()
            .map(|s| ScalarValue::Utf8(Some(s.clone())))
            .collect();
        let keys: Vec<ScalarValue> = self
            .keys
            .iter()
            .map(|k| ScalarValue::Binary(Some(k.clone())))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&keys, &DataType::Binary)),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let l = states[0].as_list::<i32>();
        let k = states.get(1).map(|k| k.as_list::<i32>());
        for i in 0..l.len() {
            if l.is_null(i) {
                continue;
            }
            let v = l.value(i);
            let s = v.as_string::<i32>();
            for j in 0..s.len() {
                self.items.push(s.value(j).to_owned());
            }
            if let Some(k) = k
                && !k.is_null(i)
            {
                let kv = k.value(i);
                let b = kv.as_binary::<i32>();
                for j in 0..b.len() {
                    self.keys.push(b.value(j).to_vec());
                }
            }
        }
        Ok(())
    }
}

/// `weir_record('f1', v1, ...)`: a record of named fields, what a whole-row reference
/// (`row_to_json(t)`, `json_agg(t)`) becomes. DataFusion's `named_struct` is the same
/// record but drops its fields' declared types (metadata), so a `jsonb` column inside
/// would be written as a JSON string; here each field keeps its argument's.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Record {
    signature: Signature,
}

pub const RECORD: &str = "weir_record";

impl ScalarUDFImpl for Record {
    fn name(&self) -> &str {
        RECORD
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(
            "weir_record's type follows from its arguments' fields".into(),
        ))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        if args.arg_fields.is_empty() || !args.arg_fields.len().is_multiple_of(2) {
            return Err(DataFusionError::Plan(format!(
                "{RECORD} takes pairs of a field name and a value"
            )));
        }
        let fields = args
            .scalar_arguments
            .iter()
            .step_by(2)
            .zip(args.arg_fields.iter().skip(1).step_by(2))
            .map(|(name, f)| {
                let name = name
                    .and_then(|v| v.try_as_str().flatten())
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        DataFusionError::Plan(format!("{RECORD}'s field names are constant text"))
                    })?;
                Ok(Field::new(name, f.data_type().clone(), true)
                    .with_metadata(f.metadata().clone()))
            })
            .collect::<DfResult<Vec<Field>>>()?;
        Ok(Arc::new(Field::new(
            RECORD,
            DataType::Struct(fields.into()),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type() else {
            return Err(DataFusionError::Internal(format!(
                "{RECORD} returns a struct"
            )));
        };
        let n = args.number_rows;
        let columns = args
            .args
            .iter()
            .skip(1)
            .step_by(2)
            .map(|a| a.to_array(n))
            .collect::<DfResult<Vec<_>>>()?;
        let st = datafusion::arrow::array::StructArray::try_new(fields.clone(), columns, None)?;
        Ok(ColumnarValue::Array(Arc::new(st)))
    }
}

/// The text elements of a `text[]` argument at row `i` (NULL elements kept), from a list
/// or from an array literal's text (`'{a,1,b,2}'`); None for a NULL array.
fn text_elements(a: &ArrayRef, i: usize) -> DfResult<Option<Vec<Option<String>>>> {
    if a.is_null(i) {
        return Ok(None);
    }
    if let DataType::List(_) = a.data_type() {
        let items = text_values(&a.as_list::<i32>().value(i))?;
        return Ok(Some(items.iter().map(|v| v.map(str::to_owned)).collect()));
    }
    let t = text_values(a)?;
    crate::sql::pg_text::parse_array_text(t.value(i))
        .map(Some)
        .ok_or_else(|| ext(crate::sql::pg_text::malformed_array_literal(t.value(i))))
}

/// `json_object(text[])` / `jsonb_object(text[])` (keys and values alternating) and
/// `json_object(keys text[], values text[])`: an object of text values (a NULL value is
/// JSON null), keys in the order written (`json`) or jsonb's.
fn object_from_arrays(
    name: &str,
    jsonb: bool,
    arrays: &[ArrayRef],
    n: usize,
) -> DfResult<ColumnarValue> {
    let mut out = StringBuilder::new();
    for i in 0..n {
        let pairs: Vec<(Option<String>, Option<String>)> = match arrays {
            [one] => {
                let Some(items) = text_elements(one, i)? else {
                    out.append_null();
                    continue;
                };
                if !items.len().is_multiple_of(2) {
                    return Err(ext(WeirError::new(
                        "2202E",
                        "array must have even number of elements",
                    )));
                }
                items
                    .chunks(2)
                    .map(|c| (c[0].clone(), c[1].clone()))
                    .collect()
            }
            [keys, values] => {
                let (Some(k), Some(v)) = (text_elements(keys, i)?, text_elements(values, i)?)
                else {
                    out.append_null();
                    continue;
                };
                if k.len() != v.len() {
                    return Err(ext(WeirError::new("2202E", "mismatched array dimensions")));
                }
                k.into_iter().zip(v).collect()
            }
            _ => {
                return Err(ext(WeirError::new(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("function {}() takes one or two text arrays", name),
                )));
            }
        };
        let mut o = String::from("{");
        for (k, (key, value)) in pairs.iter().enumerate() {
            let Some(key) = key else {
                return Err(ext(WeirError::new(
                    "22004",
                    "null value not allowed for object key",
                )));
            };
            if k > 0 {
                o.push_str(", ");
            }
            write_str(&mut o, key);
            o.push_str(" : ");
            match value {
                Some(v) => write_str(&mut o, v),
                None => o.push_str("null"),
            }
        }
        o.push('}');
        if jsonb {
            out.append_value(crate::sql::jsonb::normalize(&o).map_err(ext)?);
        } else {
            out.append_value(o);
        }
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(Record {
        signature: Signature::variadic_any(Volatility::Immutable),
    }));
    let any = |n: usize| Signature::new(TypeSignature::Any(n), Volatility::Immutable);
    let one_or_two = || {
        Signature::one_of(
            vec![TypeSignature::Any(1), TypeSignature::Any(2)],
            Volatility::Immutable,
        )
    };
    let variadic = || {
        Signature::one_of(
            vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
            Volatility::Immutable,
        )
    };
    for (name, build, jsonb, sig) in [
        ("to_json", Build::Value, false, any(1)),
        ("to_jsonb", Build::Value, true, any(1)),
        ("row_to_json", Build::Value, false, any(1)),
        ("array_to_json", Build::Value, false, any(1)),
        ("json_build_object", Build::Object, false, variadic()),
        ("jsonb_build_object", Build::Object, true, variadic()),
        ("json_build_array", Build::Array, false, variadic()),
        ("jsonb_build_array", Build::Array, true, variadic()),
        ("json_object", Build::FromArrays, false, one_or_two()),
        ("jsonb_object", Build::FromArrays, true, one_or_two()),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(JsonBuild {
            name,
            build,
            jsonb,
            signature: sig,
        }));
    }
    for (name, object, jsonb) in [
        ("json_agg", false, false),
        ("jsonb_agg", false, true),
        ("json_object_agg", true, false),
        ("jsonb_object_agg", true, true),
    ] {
        ctx.register_udaf(AggregateUDF::new_from_impl(JsonAgg {
            name,
            object,
            jsonb,
            signature: any(if object { 2 } else { 1 }),
        }));
    }
}
