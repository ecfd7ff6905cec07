//! Postgres' own semantics for scalar functions whose DataFusion namesakes answer
//! differently, registered over them (same name) on every session context, so ad-hoc
//! queries and views both use them:
//!
//! - `make_date(-2024, 1, 26)` is 2024 BC (Postgres has no year 0);
//! - `regexp_match` gives NULL for a group that did not take part (`{be,be,NULL,que}`)
//!   and NULL for NULL flags; `regexp_replace` reads `\1`..`\9`, `\&` and `\\` in the
//!   replacement and `g`/`i` flags; patterns match `.` across newlines, as Postgres' AREs;
//! - `concat`/`concat_ws` show each argument by its output function (`t`, `{1,2}`);
//! - `parse_ident('a."B"')` = `{a,B}`;
//! - `to_char` with Postgres' template patterns for timestamps, dates, intervals and numbers
//!   ([`crate::sql::to_char`]);
//! - `array_length` of an empty array (or past its dimensions) is NULL;
//! - `weir_text_out(x)` is a cast to text by the value's output function (`{a,b}`,
//!   `Infinity`, `2015-07-15 10:15:00`), `weir_round_for_int(x)` rounds a numeric (half away
//!   from zero) or float (half to even) before a cast to an integer, as Postgres does: both
//!   put in by the analyzer rule (`catalog/pg_semantics.rs`).
//!
//! [`PgFunction`] (a closure over whole argument arrays) is the one way functions are
//! defined here and in `catalog/functions.rs`.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chrono::{Datelike, NaiveDate};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Int64Array, ListBuilder, StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use crate::error::{WeirError, sqlstate};
use crate::sql::pg_text::text_values;

pub type Imp = dyn Fn(&[ArrayRef], usize) -> DfResult<ArrayRef> + Send + Sync;
pub type Ret = dyn Fn(&[DataType]) -> DataType + Send + Sync;

/// The rows a call answers for: an array argument's length, one when every argument is a
/// constant.
pub fn rows_of(args: &[ColumnarValue]) -> usize {
    args.iter()
        .find_map(|a| match a {
            ColumnarValue::Array(a) => Some(a.len()),
            ColumnarValue::Scalar(_) => None,
        })
        .unwrap_or(1)
}

/// A scalar function defined by a closure over whole argument arrays (`rows` long, or one
/// row when every argument is a constant and the function is not volatile).
pub struct PgFunction {
    pub name: &'static str,
    pub signature: Signature,
    pub ret: Box<Ret>,
    pub imp: Box<Imp>,
}

impl fmt::Debug for PgFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgFunction({})", self.name)
    }
}
impl PartialEq for PgFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for PgFunction {}
impl Hash for PgFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for PgFunction {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok((self.ret)(arg_types))
    }
    /// The result's field: a `jsonb` or `uuid` result carries the type (Arrow's is text),
    /// so an operator over it (`jsonb_set(..) || '{..}'`) is jsonb's.
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        // the declared type named by the second argument, where its Arrow type is the
        // first's
        if self.name == DECLARED
            && let Some(f) = args.arg_fields.first()
            && let Some(Some(ScalarValue::Utf8(Some(name)))) = args.scalar_arguments.get(1)
            && let Some(t) = crate::sql::types::SqlType::from_display_name(name)
            && t.arrow_type() == *f.data_type()
        {
            return Ok(Arc::new(t.field(self.name, true)));
        }
        // the identities keep their argument's field (its SQL type), made nullable
        if (self.name == NULLABLE || self.name == TYPED || self.name == DECLARED)
            && let Some(f) = args.arg_fields.first()
        {
            return Ok(Arc::new(
                f.as_ref().clone().with_name(self.name).with_nullable(true),
            ));
        }
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let field = Field::new(self.name, (self.ret)(&types), true);
        Ok(Arc::new(match declared_result(self.name) {
            Some(t) if t.arrow_type() == *field.data_type() => t.field(self.name, true),
            _ => field,
        }))
    }
    /// A volatile function (`nextval`) gets one row per input row even for constant
    /// arguments; the others one row when every argument is a constant.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let volatile = self.signature.volatility == Volatility::Volatile;
        let scalar_only = !volatile
            && args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar_only { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<DfResult<Vec<_>>>()?;
        // text read as timestamptz where the plan named no zone (a constant folded while
        // planning: a table function's argument) is read in the configuration's zone
        let mut arrays = arrays;
        if self.name == TIMESTAMPTZ_IN && arrays.len() == 2 {
            let zone = crate::sql::time_zone::plan_zone(&args.config_options);
            if !zone.is_utc() {
                arrays.push(Arc::new(StringArray::from(vec![zone.arg_text(); rows])));
            }
        }
        let out = (self.imp)(&arrays, rows)?;
        if scalar_only {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// Whether row `i` is NULL, a NULL literal's column (of type `Null`, which has no null
/// bitmap) included.
fn is_null_at(a: &ArrayRef, i: usize) -> bool {
    a.data_type() == &DataType::Null || a.is_null(i)
}

pub(crate) fn pg_error(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

fn strings(a: &ArrayRef) -> DfResult<StringArray> {
    Ok(cast(a, &DataType::Utf8)?.as_string::<i32>().clone())
}

/// A text result per text (NULL for NULL).
fn map_text(a: &ArrayRef, f: impl Fn(&str) -> Result<String, WeirError>) -> DfResult<ArrayRef> {
    let a = strings(a)?;
    let mut out = StringBuilder::with_capacity(a.len(), a.len() * 8);
    for v in a.iter() {
        match v {
            Some(t) => out.append_value(f(t).map_err(|e| DataFusionError::External(Box::new(e)))?),
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `upper`/`lower` as Postgres has them in a UTF-8 locale (glibc's `towupper`/`towlower`):
/// character by character, a character whose upper case is several characters kept as it
/// is (`upper('straße')` is `STRAßE`; DataFusion's full Unicode mapping made it `STRASSE`).
/// One buffer for all rows.
fn change_case(a: &ArrayRef, upper: bool) -> DfResult<ArrayRef> {
    let a = strings(a)?;
    let mut out = StringBuilder::with_capacity(a.len(), a.value_data().len());
    let mut buf = String::new();
    for v in a.iter() {
        let Some(t) = v else {
            out.append_null();
            continue;
        };
        buf.clear();
        if t.is_ascii() {
            buf.push_str(t);
            if upper {
                buf.make_ascii_uppercase();
            } else {
                buf.make_ascii_lowercase();
            }
        } else {
            for c in t.chars() {
                // (the one character with a longer lower case, `İ`, is `i` to glibc)
                buf.push(if upper {
                    single(c.to_uppercase(), c)
                } else {
                    c.to_lowercase().next().unwrap_or(c)
                });
            }
        }
        out.append_value(&buf);
    }
    Ok(Arc::new(out.finish()))
}

/// The one character a case mapping gives, or `c` where it gives several.
fn single(mut mapped: impl Iterator<Item = char>, c: char) -> char {
    match (mapped.next(), mapped.next()) {
        (Some(m), None) => m,
        _ => c,
    }
}

fn json_length(a: &ArrayRef) -> DfResult<ArrayRef> {
    let a = strings(a)?;
    let mut out = datafusion::arrow::array::Int32Builder::with_capacity(a.len());
    for v in a.iter() {
        match v {
            Some(t) => out.append_value(
                crate::sql::jsonb::array_length(t)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?,
            ),
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// A list of texts per JSON text (what a set-returning JSON function unnests; NULL in,
/// NULL out, which unnests to no rows).
fn json_list(
    a: &ArrayRef,
    f: impl Fn(&str) -> Result<Vec<Option<String>>, WeirError>,
) -> DfResult<ArrayRef> {
    let a = strings(a)?;
    let mut out = ListBuilder::new(StringBuilder::new());
    for v in a.iter() {
        match v {
            Some(t) => {
                for item in f(t).map_err(|e| DataFusionError::External(Box::new(e)))? {
                    out.values().append_option(item);
                }
                out.append(true);
            }
            None => out.append(false),
        }
    }
    Ok(Arc::new(out.finish()))
}

fn text_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

/// A list of texts per row of `a`, each text read by `items` (None: a NULL list); a NULL
/// text is a NULL list.
fn text_lists(
    a: &ArrayRef,
    items: impl Fn(&str) -> DfResult<Option<Vec<Option<String>>>>,
) -> DfResult<ArrayRef> {
    let a = strings(a)?;
    let mut b = ListBuilder::new(StringBuilder::new());
    for v in a.iter() {
        match v.map(&items).transpose()?.flatten() {
            Some(list) => {
                for item in list {
                    b.values().append_option(item);
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    Ok(Arc::new(b.finish()))
}

pub(crate) fn immutable(
    name: &'static str,
    signature: TypeSignature,
    ret: impl Fn(&[DataType]) -> DataType + Send + Sync + 'static,
    imp: impl Fn(&[ArrayRef], usize) -> DfResult<ArrayRef> + Send + Sync + 'static,
) -> PgFunction {
    PgFunction {
        name,
        signature: Signature::new(signature, Volatility::Immutable),
        ret: Box::new(ret),
        imp: Box::new(imp),
    }
}

pub const TEXT_OUT: &str = "weir_text_out";
/// A jsonb value as the text elements of an array column (`jsonb_to_record`'s arrays).
pub const JSONB_ARRAY_TEXT: &str = "weir_jsonb_array_text";
pub const ROUND_FOR_INT: &str = "weir_round_for_int";
pub const INTERVAL_KEY: &str = "weir_interval_key";
pub const CANONICAL_NAN: &str = "weir_canonical_nan";
/// Text as `timestamp` / `date` input (a zone ignored), and as `timestamptz` input:
/// `weir_timestamp_in(text, NULL::target)` is the text read as the second argument's type
/// (`infinity` included).
pub const TIMESTAMP_IN: &str = "weir_timestamp_in";
/// `weir_datetime_cast(x, NULL::target)`: a date ↔ timestamp cast that keeps `infinity`
/// and `-infinity` (`sql::datetime_in::keeping_infinities`).
pub const DATETIME_CAST: &str = "weir_datetime_cast";
/// `date | timestamp ± interval` with `infinity` and `-infinity` kept, as Postgres answers
/// (arrow's kernel overflows on them); `catalog/pg_semantics.rs` puts these in place of the
/// operators, `plan/view.rs` reads them as the operators for interval joins.
pub const DATETIME_PLUS: &str = "weir_datetime_plus";
pub const DATETIME_MINUS: &str = "weir_datetime_minus";
/// Text as `jsonb` input: checked and in its canonical form (`sql::jsonb::normalize`).
pub const JSONB_IN: &str = "weir_jsonb_in";
/// Text as `json` input: checked, kept as written (`sql::jsonb::json_checked`).
pub const JSON_IN: &str = "weir_json_in";
/// Postgres array text (`'{1,2,NULL,"a b"}'`) as a `text[]`: what a cast of text to an
/// array reads first (its elements are then cast to the element type), and array
/// parameters (`server::params::type_array_placeholders`).
pub const PARSE_ARRAY: &str = "weir_parse_array";
/// `weir_array_elements(a)`: the elements of a multi-dimensional array as one dimension,
/// what `unnest` gives one row each in Postgres (DataFusion's `unnest` of a nested list gives
/// its sub-lists); `catalog/rewrite.rs` puts it around `unnest`'s arguments.
pub const ARRAY_ELEMENTS: &str = "weir_array_elements";
/// `weir_concat_null(x)`: `x || NULL` with an untyped NULL, as Postgres resolves it: an
/// array is itself (the NULL is an array: `array_cat`), anything else NULL (`catalog/
/// rewrite.rs`).
pub const CONCAT_NULL: &str = "weir_concat_null";
/// Text as `bytea` input (`sql::bytea_codec::bytea_in`).
pub const BYTEA_IN: &str = "weir_bytea_in";
/// Text as `interval` input, by Postgres' rules (`sql::interval_in`).
pub const INTERVAL_IN: &str = "weir_interval_in";
/// `~ x`: an integer's bits flipped, of the integer's type.
pub const BITWISE_NOT: &str = "weir_bitwise_not";
/// Text as `uuid` input: checked and canonical (`sql::uuid::canonical`).
pub const UUID_IN: &str = "weir_uuid_in";
/// Text as `time`, as Postgres reads it (`sql::datetime_in::time_in`: `allballs`, `24:00`).
pub const TIME_IN: &str = "weir_time_in";
/// Text as `numeric` input: `weir_numeric_in(text)` is the text arrow's cast reads for it
/// (an exponent written out: `sql::numeric::numeric_text`).
pub const NUMERIC_IN: &str = "weir_numeric_in";
/// `weir_enum_in(text, type)`: text as a value of an enum type (`type` is the type's
/// JSON, `sql::types::ENUM_KEY`): each value checked to be one of its labels (22P02).
pub const ENUM_IN: &str = "weir_enum_in";
/// `weir_domain_check(value, domain)`: the value (of the domain's base type) checked
/// against the domain's NOT NULL and CHECKs (`domain` is its JSON,
/// `sql::types::DOMAIN_KEY`): what a cast to a domain is.
pub const DOMAIN_CHECK: &str = "weir_domain_check";
/// `weir_enum_sort_key(value, type)`: the label's position in its type's order.
pub const ENUM_SORT_KEY: &str = "weir_enum_sort_key";
/// A `jsonb` value's sort key (`sql::jsonb::sort_key`).
pub const JSONB_SORT_KEY: &str = "weir_jsonb_sort_key";
pub const TIMESTAMPTZ_IN: &str = "weir_timestamptz_in";
/// A `timestamptz` as the JSON functions write it, in a session zone
/// (`sql::json_build::timestamptz_json_text`).
pub const TIMESTAMPTZ_JSON: &str = "weir_timestamptz_json";
pub const ANY_OP: &str = "weir_any_op";
/// `interval * number` (either order) and `interval / number`, as Postgres computes them
/// (`interval_mul`, `interval_div`): `weir_interval_mul(interval, factor)`,
/// `weir_interval_div(interval, divisor)`.
pub const INTERVAL_MUL: &str = "weir_interval_mul";
/// `justify_hours(interval)`: whole 24 hours of the time as days; also what `timestamp -
/// timestamp` gives (Postgres' `timestamp_mi`).
pub const JUSTIFY_HOURS: &str = "justify_hours";
/// `timestamp - timestamp` (either with a zone), as Postgres' `timestamp_mi`: the
/// microseconds between them with whole days as days, `cannot subtract infinite
/// timestamps` (22008) for an infinity.
pub const TIMESTAMP_MI: &str = "weir_timestamp_mi";
/// `regexp_matches(text, pattern [, flags])`'s rows as one list per input row (the
/// rewrite unnests it in the select list): each match's groups as a `text[]`.
pub const REGEXP_MATCHES: &str = "weir_regexp_matches";
/// `substring(text FROM pattern)`: the first match's first group, or the whole match.
pub const SUBSTRING_REGEX: &str = "weir_substring_regex";
/// The alias the rewrite gives the right operand of `INTERSECT ALL` / `EXCEPT ALL`, which
/// `catalog::pg_semantics` plans with copies counted.
pub const BAG_SET_OPERAND: &str = "weir_bag_set_operand";
/// `array_remove(array, NULL)`: the array without its NULL elements.
pub const ARRAY_REMOVE_NULLS: &str = "weir_array_remove_nulls";
/// An array's key in Postgres' order of arrays: element by element, a NULL element after
/// every value, a shorter array before its extensions (`{1,NULL}` > `{1,2}`; arrow's order
/// puts a NULL element first). NULL for a NULL array.
pub const ARRAY_SORT_KEY: &str = "weir_array_sort_key";
/// `regexp_split_to_table`'s rows as one list per input row (unnested by the rewrite).
pub const REGEXP_SPLIT_TO_TABLE: &str = "weir_regexp_split_to_table";
/// A `time` as the interval since midnight (`date + time`, `timestamp - time`: Postgres
/// reads a time beside a date or timestamp as an interval).
pub const TIME_AS_INTERVAL: &str = "weir_time_as_interval";
pub const INTERVAL_DIV: &str = "weir_interval_div";
/// `x / y` with a float operand: `double precision` (`real` when both are), and
/// `division by zero` (22012) for a zero divisor, as Postgres (IEEE gives infinity).
pub const FLOAT_DIV: &str = "weir_float_div";
/// A marker the rewrite adds to `SELECT *` over a join with USING; the analyzer rule
/// removes it (it never runs).
pub const STAR_OVER_USING: &str = "weir_star_over_using";
/// `weir_nullable(x)`: `x`, typed nullable. What a scalar subquery's value is wrapped in
/// when its column is declared NOT NULL: a subquery of no rows is NULL, which DataFusion
/// 55's nullability forgets (apache/datafusion#24513, fixed after 55.2):
/// `SELECT (SELECT 1 WHERE false)` failed, `... IS NULL` was folded to false.
pub const NULLABLE: &str = "weir_nullable";
/// The list of channels behind `pg_listening_channels()` (a session's function:
/// `server/notifications.rs`).
pub const LISTENING_CHANNELS: &str = "weir_listening_channels";
/// `weir_declared(x, 'type name')`: `x`, its field typed as the named SQL type (what
/// `CASE`, `coalesce`, `nullif`, `greatest` and `least` are wrapped in when their values
/// all have that declared type: `uuid`, `jsonb`, `json`, `varchar(n)`... which Arrow's
/// text does not say): `catalog/pg_semantics.rs::keep_declared_types`.
pub const DECLARED: &str = "weir_declared";
/// `weir_typed(x, 'x as written')`: `x`. What an aggregate's argument with a cast is
/// wrapped in where another call differs from it only in casts
/// (`catalog::rewrite::distinct_cast_aggregates`): the text keeps their names apart.
pub const TYPED: &str = "weir_typed";
/// `weir_time_round(x, p)`: a `timestamp`, `timestamptz` or `time` rounded to `p`
/// fractional digits of a second, half away from zero, as Postgres' `timestamp(p)` /
/// `time(p)` do (`'23:59:59.5'::time(0)` is `24:00:00`); infinities stay. What a cast to a
/// type with a precision becomes (`now()::timestamp(0)`).
pub const TIME_ROUND: &str = "weir_time_round";

/// Every function of this module.
fn definitions() -> Vec<PgFunction> {
    vec![
        immutable(
            "make_date",
            TypeSignature::Any(3),
            |_| DataType::Date32,
            make_date,
        ),
        immutable(
            "regexp_match",
            TypeSignature::VariadicAny,
            |_| text_list(),
            regexp_match,
        ),
        immutable(
            REGEXP_MATCHES,
            TypeSignature::VariadicAny,
            |_| DataType::List(Arc::new(Field::new_list_field(text_list(), true))),
            regexp_matches,
        ),
        immutable(
            "format",
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            format,
        ),
        immutable(
            "quote_literal",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| quote_literal(&args[0], false),
        ),
        immutable(
            "quote_nullable",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| quote_literal(&args[0], true),
        ),
        immutable(
            TIME_AS_INTERVAL,
            TypeSignature::Any(1),
            |_| interval_type(),
            |args, _| {
                use datafusion::arrow::datatypes::{IntervalMonthDayNano, Time64NanosecondType};
                let t = cast(&args[0], &DataType::Time64(TimeUnit::Nanosecond))?;
                let out: datafusion::arrow::array::IntervalMonthDayNanoArray = t
                    .as_primitive::<Time64NanosecondType>()
                    .iter()
                    .map(|v| v.map(|ns| IntervalMonthDayNano::new(0, 0, ns)))
                    .collect();
                Ok(Arc::new(out) as ArrayRef)
            },
        ),
        immutable(
            "regexp_split_to_array",
            TypeSignature::VariadicAny,
            |_| text_list(),
            regexp_split,
        ),
        immutable(
            REGEXP_SPLIT_TO_TABLE,
            TypeSignature::VariadicAny,
            |_| text_list(),
            regexp_split,
        ),
        immutable(
            ARRAY_REMOVE_NULLS,
            TypeSignature::Any(1),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            |args, _| array_without_nulls(&args[0]),
        ),
        immutable(
            TIME_ROUND,
            TypeSignature::Any(2),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            |args, _| time_round(&args[0], &args[1]),
        ),
        immutable(
            TYPED,
            TypeSignature::Any(2),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            |args, _| Ok(args[0].clone()),
        ),
        immutable(
            JSONB_TYPED,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| Ok(cast(&args[0], &DataType::Utf8)?),
        ),
        immutable(
            NULLABLE,
            TypeSignature::Any(1),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            |args, _| Ok(args[0].clone()),
        ),
        immutable(
            DECLARED,
            TypeSignature::Any(2),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            |args, _| Ok(args[0].clone()),
        ),
        immutable(
            ARRAY_SORT_KEY,
            TypeSignature::Any(1),
            |_| DataType::Binary,
            |args, _| array_sort_key(&args[0]),
        ),
        immutable(
            SUBSTRING_REGEX,
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            substring_regex,
        ),
        immutable(
            "regexp_count",
            TypeSignature::VariadicAny,
            |_| DataType::Int32,
            |args, rows| regexp_position(RegexpPosition::Count, args, rows),
        ),
        immutable(
            "regexp_instr",
            TypeSignature::VariadicAny,
            |_| DataType::Int32,
            |args, rows| regexp_position(RegexpPosition::Instr, args, rows),
        ),
        immutable(
            "regexp_substr",
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            |args, rows| regexp_position(RegexpPosition::Substr, args, rows),
        ),
        immutable(
            "regexp_replace",
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            regexp_replace,
        ),
        immutable(
            "concat",
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            |args, rows| concat(None, args, rows),
        ),
        immutable(
            "concat_ws",
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            |args, rows| match args.split_first() {
                Some((sep, rest)) => concat(Some(&strings(sep)?), rest, rows),
                None => Err(pg_error(
                    sqlstate::UNDEFINED_FUNCTION,
                    "function concat_ws() does not exist",
                )),
            },
        ),
        immutable(
            "parse_ident",
            TypeSignature::VariadicAny,
            |_| text_list(),
            parse_ident,
        ),
        immutable(
            TEXT_OUT,
            // the value [, the session zone a timestamptz is shown in]
            TypeSignature::OneOf(vec![TypeSignature::Any(1), TypeSignature::Any(2)]),
            |_| DataType::Utf8,
            |args, _| {
                let zone = crate::sql::time_zone::zone_arg(args.get(1))?;
                Ok(Arc::new(crate::sql::pg_text::text_values_in(
                    &args[0], &zone,
                )?))
            },
        ),
        immutable(
            JUSTIFY_HOURS,
            TypeSignature::Exact(vec![interval_type()]),
            |_| interval_type(),
            |args, _| justify(&args[0], Justify::Hours),
        ),
        immutable(
            "justify_days",
            TypeSignature::Exact(vec![interval_type()]),
            |_| interval_type(),
            |args, _| justify(&args[0], Justify::Days),
        ),
        immutable(
            "justify_interval",
            TypeSignature::Exact(vec![interval_type()]),
            |_| interval_type(),
            |args, _| justify(&args[0], Justify::Both),
        ),
        immutable(
            "make_interval",
            TypeSignature::Any(7),
            |_| interval_type(),
            make_interval,
        ),
        immutable("age", TypeSignature::Any(2), |_| interval_type(), age),
        immutable(
            "make_timestamp",
            TypeSignature::Any(6),
            |_| DataType::Timestamp(TimeUnit::Microsecond, None),
            make_timestamp,
        ),
        immutable(
            "make_timestamptz",
            TypeSignature::OneOf(vec![TypeSignature::Any(6), TypeSignature::Any(7)]),
            |_| crate::sql::to_timestamp::timestamptz_type(),
            |args, rows| {
                let local = make_timestamp(&args[..6], rows)?;
                match args.get(6) {
                    // the wall-clock time read in the zone given
                    Some(zone) => crate::sql::time_zone::timezone(&[zone.clone(), local], rows),
                    // in the session's zone (UTC)
                    None => Ok(cast(&local, &crate::sql::to_timestamp::timestamptz_type())?),
                }
            },
        ),
        immutable(
            "make_time",
            TypeSignature::Any(3),
            |_| DataType::Time64(TimeUnit::Microsecond),
            make_time,
        ),
        immutable(
            "num_nulls",
            TypeSignature::VariadicAny,
            |_| DataType::Int32,
            |args, rows| count_nulls(args, rows, true),
        ),
        immutable(
            "num_nonnulls",
            TypeSignature::VariadicAny,
            |_| DataType::Int32,
            |args, rows| count_nulls(args, rows, false),
        ),
        immutable(
            "timezone",
            TypeSignature::Any(2),
            |t| crate::sql::time_zone::result_type(t.get(1).unwrap_or(&DataType::Null)),
            crate::sql::time_zone::timezone,
        ),
        immutable(
            "to_timestamp",
            TypeSignature::OneOf(vec![
                TypeSignature::Any(1),
                TypeSignature::Any(2),
                TypeSignature::Any(3),
            ]),
            |_| crate::sql::to_timestamp::timestamptz_type(),
            crate::sql::to_timestamp::to_timestamp,
        ),
        immutable(
            "to_date",
            TypeSignature::Any(2),
            |_| DataType::Date32,
            crate::sql::to_timestamp::to_date,
        ),
        immutable(
            TIMESTAMP_MI,
            TypeSignature::Any(2),
            |_| interval_type(),
            timestamp_mi,
        ),
        immutable(
            INTERVAL_MUL,
            TypeSignature::Any(2),
            |_| interval_type(),
            |args, _| interval_scaled(args, false),
        ),
        immutable(
            INTERVAL_DIV,
            TypeSignature::Any(2),
            |_| interval_type(),
            |args, _| interval_scaled(args, true),
        ),
        immutable(
            FLOAT_DIV,
            TypeSignature::Any(2),
            |t| match t {
                [DataType::Float32, DataType::Float32] => DataType::Float32,
                _ => DataType::Float64,
            },
            float_div,
        ),
        immutable(
            ROUND_FOR_INT,
            TypeSignature::Any(1),
            |t| t.first().cloned().unwrap_or(DataType::Float64),
            |args, _| round_for_int(&args[0]),
        ),
        immutable(
            "abs",
            TypeSignature::Any(1),
            |t| match t.first() {
                Some(t) if t.is_numeric() => t.clone(),
                _ => DataType::Float64,
            },
            |args, _| abs(&args[0]),
        ),
        immutable(
            DATETIME_PLUS,
            // a date or timestamp, an interval [, the session zone a timestamptz's days and
            // months are counted in]
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
            |t| t.first().cloned().unwrap_or(DataType::Date32),
            |args, _| datetime_interval(args, false),
        ),
        immutable(
            DATETIME_MINUS,
            // a date or timestamp, an interval [, the session zone a timestamptz's days and
            // months are counted in]
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
            |t| t.first().cloned().unwrap_or(DataType::Date32),
            |args, _| datetime_interval(args, true),
        ),
        immutable(
            DATETIME_CAST,
            TypeSignature::Any(2),
            |t| t.get(1).cloned().unwrap_or(DataType::Date32),
            |args, _| {
                let target = args[1].data_type().clone();
                crate::sql::datetime_in::keeping_infinities(&args[0], |a| {
                    let strict = datafusion::arrow::compute::CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    Ok(datafusion::arrow::compute::cast_with_options(
                        a, &target, &strict,
                    )?)
                })
            },
        ),
        immutable(
            "isfinite",
            TypeSignature::Any(1),
            |_| DataType::Boolean,
            |args, _| match crate::sql::datetime_in::isfinite(&args[0]) {
                Some(finite) => Ok(Arc::new(finite) as ArrayRef),
                None => Err(pg_error(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("function isfinite({}) does not exist", args[0].data_type()),
                )),
            },
        ),
        immutable(
            "array_length",
            TypeSignature::Any(2),
            |_| DataType::Int32,
            array_length,
        ),
        immutable(
            "array_dims",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            array_dims,
        ),
        immutable("chr", TypeSignature::Any(1), |_| DataType::Utf8, chr),
        immutable(
            ARRAY_ELEMENTS,
            TypeSignature::Any(1),
            |t| t.first().map(elements_type).unwrap_or(DataType::Null),
            |args, _| array_elements(&args[0]),
        ),
        immutable(
            "overlaps",
            TypeSignature::Any(4),
            |_| DataType::Boolean,
            overlaps,
        ),
        // `ROW(a, b)`: a record whose fields are f1, f2, ... as Postgres names them
        // (DataFusion's `row` names them c0, c1, ...), so `(ROW(1, 2)).f2` reads one
        immutable(
            "row",
            TypeSignature::VariadicAny,
            |t| DataType::Struct(row_fields(t)),
            |args, _| {
                let types: Vec<DataType> = args.iter().map(|a| a.data_type().clone()).collect();
                Ok(Arc::new(datafusion::arrow::array::StructArray::try_new(
                    row_fields(&types),
                    args.to_vec(),
                    None,
                )?))
            },
        ),
        immutable(
            CONCAT_NULL,
            TypeSignature::Any(1),
            |t| match t.first() {
                Some(DataType::Null) | None => DataType::Utf8,
                Some(t) => t.clone(),
            },
            |args, rows| match args[0].data_type() {
                DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                    Ok(args[0].clone())
                }
                DataType::Null => Ok(datafusion::arrow::array::new_null_array(
                    &DataType::Utf8,
                    rows,
                )),
                other => Ok(datafusion::arrow::array::new_null_array(other, rows)),
            },
        ),
        immutable(
            "trim_array",
            TypeSignature::Any(2),
            |t| t.first().cloned().unwrap_or(DataType::Null),
            trim_array,
        ),
        immutable(
            "array_fill",
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
            |t| {
                DataType::List(Arc::new(Field::new_list_field(
                    t.first().cloned().unwrap_or(DataType::Null),
                    true,
                )))
            },
            array_fill,
        ),
        immutable(
            INTERVAL_KEY,
            TypeSignature::Any(1),
            |_| DataType::Decimal128(38, 0),
            interval_key,
        ),
        immutable(
            CANONICAL_NAN,
            TypeSignature::Any(1),
            |t| t.first().cloned().unwrap_or(DataType::Float64),
            |args, _| Ok(canonical_nan_array(&args[0])),
        ),
        immutable(ANY_OP, TypeSignature::Any(4), |_| DataType::Boolean, any_op),
        immutable(
            JSONB_IN,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| map_text(&args[0], crate::sql::jsonb::normalize),
        ),
        immutable(
            JSON_IN,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| map_text(&args[0], crate::sql::jsonb::json_checked),
        ),
        // a jsonb value read as an array column reads it (`jsonb_to_record`, populate):
        // a JSON array's elements as text (strings unquoted, null as NULL), a JSON string
        // as an array literal (`"{1,2}"`), JSON null as NULL
        immutable(
            JSONB_ARRAY_TEXT,
            TypeSignature::Any(1),
            |_| DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            |args, _| {
                text_lists(&args[0], |v| {
                    let bad = |m: String| pg_error(sqlstate::INVALID_TEXT_REPRESENTATION, m);
                    let kind = crate::sql::jsonb::type_of(v).map_err(|e| bad(e.to_string()))?;
                    Ok(match kind {
                        "array" => Some(
                            crate::sql::jsonb::array_elements(v, true)
                                .map_err(|e| bad(e.to_string()))?,
                        ),
                        "string" => {
                            let t = crate::sql::jsonb::get(v, &[], true)
                                .map_err(|e| bad(e.to_string()))?
                                .unwrap_or_default();
                            Some(crate::sql::pg_text::parse_array_text(&t).ok_or_else(|| {
                                DataFusionError::External(Box::new(
                                    crate::sql::pg_text::malformed_array_literal(&t),
                                ))
                            })?)
                        }
                        "null" => None,
                        _ => return Err(bad(format!("expected JSON array, got {v}"))),
                    })
                })
            },
        ),
        immutable(
            PARSE_ARRAY,
            TypeSignature::Any(1),
            |_| DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            |args, _| {
                text_lists(&args[0], |v| {
                    crate::sql::pg_text::parse_array_text(v)
                        .map(Some)
                        .ok_or_else(|| {
                            DataFusionError::External(Box::new(
                                crate::sql::pg_text::malformed_array_literal(v),
                            ))
                        })
                })
            },
        ),
        immutable(
            INTERVAL_IN,
            TypeSignature::Any(1),
            |_| DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
            |args, _| {
                let texts = strings(&args[0])?;
                match crate::sql::interval_in::to_array(&texts) {
                    Ok(a) => Ok(Arc::new(a)),
                    Err(row) => Err(pg_error(
                        sqlstate::INVALID_DATETIME_FORMAT,
                        format!(
                            "invalid input syntax for type interval: \"{}\"",
                            texts.value(row)
                        ),
                    )),
                }
            },
        ),
        immutable(
            BITWISE_NOT,
            TypeSignature::Any(1),
            |t| t.first().cloned().unwrap_or(DataType::Int32),
            |args, _| {
                use datafusion::arrow::compute::kernels::bitwise::bitwise_not;
                use datafusion::arrow::datatypes::{Int8Type, Int16Type, Int32Type, Int64Type};
                let a = &args[0];
                Ok(match a.data_type() {
                    DataType::Int8 => Arc::new(bitwise_not(a.as_primitive::<Int8Type>())?),
                    DataType::Int16 => Arc::new(bitwise_not(a.as_primitive::<Int16Type>())?),
                    DataType::Int32 => Arc::new(bitwise_not(a.as_primitive::<Int32Type>())?),
                    DataType::Int64 => Arc::new(bitwise_not(a.as_primitive::<Int64Type>())?),
                    DataType::Null => a.clone(),
                    other => {
                        let t = crate::sql::types::SqlType::from_arrow(other)
                            .map(|t| t.display_name())
                            .unwrap_or_else(|| other.to_string());
                        return Err(pg_error(
                            sqlstate::UNDEFINED_FUNCTION,
                            format!("operator does not exist: ~ {t}"),
                        ));
                    }
                })
            },
        ),
        // over text, or over a text[]'s elements (`CAST($1 AS uuid[])`)
        immutable(
            UUID_IN,
            TypeSignature::Any(1),
            |t| match t.first() {
                Some(list @ DataType::List(_)) => list.clone(),
                _ => DataType::Utf8,
            },
            |args, _| {
                let a = match args[0].data_type() {
                    DataType::List(_) => args[0].clone(),
                    _ => Arc::new(strings(&args[0])?) as ArrayRef,
                };
                Ok(
                    crate::sql::pg_text::map_texts(&a, crate::sql::uuid::canonical)
                        .map_err(json_err)?
                        .unwrap_or(a),
                )
            },
        ),
        // the time now, not the statement's start (now()): read once per batch of rows
        PgFunction {
            name: "clock_timestamp",
            signature: Signature::nullary(Volatility::Volatile),
            ret: Box::new(|_| crate::sql::types::SqlType::TimestampTz(None).arrow_type()),
            imp: Box::new(|_, rows| {
                let now = chrono::Utc::now().timestamp_micros();
                let a = datafusion::arrow::array::TimestampMicrosecondArray::from(vec![now; rows]);
                let DataType::Timestamp(_, tz) =
                    crate::sql::types::SqlType::TimestampTz(None).arrow_type()
                else {
                    return Ok(Arc::new(a) as ArrayRef);
                };
                Ok(Arc::new(a.with_timezone_opt(tz)) as ArrayRef)
            }),
        },
        // the wall clock as text, as Postgres' timeofday() writes it (in UTC, the server's zone)
        PgFunction {
            name: "timeofday",
            signature: Signature::nullary(Volatility::Volatile),
            ret: Box::new(|_| DataType::Utf8),
            imp: Box::new(|_, rows| {
                let now = chrono::Utc::now()
                    .format("%a %b %d %H:%M:%S%.6f %Y UTC")
                    .to_string();
                Ok(Arc::new(StringArray::from(vec![now; rows])) as ArrayRef)
            }),
        },
        PgFunction {
            name: "gen_random_uuid",
            signature: Signature::nullary(Volatility::Volatile),
            ret: Box::new(|_| DataType::Utf8),
            imp: Box::new(|_, rows| Ok(crate::sql::uuid::random_column(rows))),
        },
        immutable(
            NUMERIC_IN,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| crate::sql::numeric::numeric_text_array(&args[0]),
        ),
        immutable(
            TIME_IN,
            TypeSignature::Any(1),
            |_| DataType::Time64(datafusion::arrow::datatypes::TimeUnit::Microsecond),
            |args, _| {
                let text: ArrayRef = Arc::new(strings(&args[0])?);
                crate::sql::datetime_in::time_in(&text).map_err(|row| {
                    let s = text.as_string::<i32>();
                    DataFusionError::External(Box::new(crate::error::invalid_input(
                        "time",
                        if s.is_valid(row) { s.value(row) } else { "" },
                    )))
                })
            },
        ),
        immutable(
            ENUM_IN,
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            |args, _| {
                let t = enum_type_arg(&args[1])?;
                let s = strings(&args[0])?;
                t.check(s.iter())
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                Ok(Arc::new(s) as ArrayRef)
            },
        ),
        immutable(
            DOMAIN_CHECK,
            TypeSignature::Any(2),
            |t| t[0].clone(),
            |args, _| {
                let json = strings(&args[1])?
                    .iter()
                    .flatten()
                    .next()
                    .map(str::to_owned);
                let d: crate::catalog::domains::DomainDesc =
                    serde_json::from_str(json.as_deref().unwrap_or_default()).map_err(|e| {
                        DataFusionError::Internal(format!("a domain does not decode: {e}"))
                    })?;
                crate::catalog::domains::check_values(&d, &args[0])
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                Ok(args[0].clone())
            },
        ),
        immutable(
            ENUM_SORT_KEY,
            TypeSignature::Any(2),
            |_| DataType::Int32,
            |args, _| {
                let t = enum_type_arg(&args[1])?;
                let s = strings(&args[0])?;
                let positions: std::collections::HashMap<&str, i32> = t
                    .labels
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (l.as_str(), i as i32))
                    .collect();
                // (a label added since the plan was made sorts after the ones it knew)
                let unknown = t.labels.len() as i32;
                let keys: datafusion::arrow::array::Int32Array = s
                    .iter()
                    .map(|v| v.map(|v| positions.get(v).copied().unwrap_or(unknown)))
                    .collect();
                Ok(Arc::new(keys) as ArrayRef)
            },
        ),
        immutable(
            JSONB_SORT_KEY,
            TypeSignature::Any(1),
            |_| DataType::Binary,
            |args, _| {
                let s = strings(&args[0])?;
                let mut b = datafusion::arrow::array::BinaryBuilder::new();
                for v in s.iter() {
                    match v {
                        None => b.append_null(),
                        Some(t) => b.append_value(
                            crate::sql::jsonb::sort_key(t)
                                .map_err(|e| DataFusionError::External(Box::new(e)))?,
                        ),
                    }
                }
                Ok(Arc::new(b.finish()) as ArrayRef)
            },
        ),
        // (in place of DataFusion's, which pads no base64 and knows no `escape`)
        immutable(
            "encode",
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            crate::sql::bytea_codec::encode,
        ),
        immutable(
            "decode",
            TypeSignature::Any(2),
            |_| DataType::Binary,
            crate::sql::bytea_codec::decode,
        ),
        immutable(
            "upper",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| change_case(&args[0], true),
        ),
        immutable(
            "lower",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| change_case(&args[0], false),
        ),
        immutable(
            "get_byte",
            TypeSignature::Any(2),
            |_| DataType::Int32,
            crate::sql::bytea_codec::get_byte,
        ),
        immutable(
            "bit_count",
            TypeSignature::Any(1),
            |_| DataType::Int64,
            crate::sql::bytea_codec::bit_count,
        ),
        immutable(
            "convert_from",
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            crate::sql::bytea_codec::convert_from,
        ),
        immutable(
            "convert_to",
            TypeSignature::Any(2),
            |_| DataType::Binary,
            crate::sql::bytea_codec::convert_to,
        ),
        immutable(
            BYTEA_IN,
            TypeSignature::Any(1),
            |_| DataType::Binary,
            crate::sql::bytea_codec::bytea_in_array,
        ),
        immutable(
            TIMESTAMP_IN,
            TypeSignature::Any(2),
            |t| t.get(1).cloned().unwrap_or(DataType::Utf8),
            |args, _| timestamp_in(&args[0], args[1].data_type(), false),
        ),
        immutable(
            TIMESTAMPTZ_IN,
            // text, the target type [, the session zone a wall-clock time is read in]
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
            |t| t.get(1).cloned().unwrap_or(DataType::Utf8),
            |args, _| {
                let parsed = timestamp_in(&args[0], args[1].data_type(), true)?;
                let zone = crate::sql::time_zone::zone_arg(args.get(2))?;
                crate::sql::time_zone::read_in_zone(args[0].as_ref(), parsed, &zone)
            },
        ),
        immutable(
            STAR_OVER_USING,
            TypeSignature::Nullary,
            |_| DataType::Boolean,
            |_, rows| {
                Ok(Arc::new(datafusion::arrow::array::BooleanArray::new_null(
                    rows,
                )))
            },
        ),
        immutable(
            TIMESTAMPTZ_JSON,
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            crate::sql::json_build::timestamptz_json_text,
        ),
        immutable(
            "to_char",
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
            |_| DataType::Utf8,
            crate::sql::to_char::to_char,
        ),
    ]
    .into_iter()
    .chain(json_definitions())
    .chain(crate::sql::pg_math::definitions())
    .chain(crate::sql::text_hash::definitions())
    .chain(bit_definitions())
    .collect()
}

/// `get_bit`, `set_bit`, `set_byte` of a bytea (`sql/bytea_codec.rs`).
fn bit_definitions() -> Vec<PgFunction> {
    [("get_bit", 2), ("set_bit", 3), ("set_byte", 3)]
        .into_iter()
        .map(|(name, arity)| {
            immutable(
                name,
                TypeSignature::Any(arity),
                move |_| match arity {
                    2 => DataType::Int32,
                    _ => DataType::Binary,
                },
                move |args, rows| crate::sql::bytea_codec::bit_or_byte(name, args, rows),
            )
        })
        .collect()
}

/// The enum type an `ENUM_IN` / `ENUM_SORT_KEY` call names (its JSON, a constant).
fn enum_type_arg(a: &ArrayRef) -> DfResult<crate::sql::types::EnumType> {
    let s = strings(a)?;
    let json = s
        .iter()
        .flatten()
        .next()
        .ok_or_else(|| DataFusionError::Internal("an enum function without its type".into()))?;
    serde_json::from_str(json)
        .map_err(|e| DataFusionError::Internal(format!("an enum type does not decode: {e}")))
}

/// The declared type of a function's result where Arrow's (text) does not say it.
fn declared_result(name: &str) -> Option<crate::sql::types::SqlType> {
    use crate::sql::types::SqlType;
    if JSONB_RESULTS.contains(&name) {
        Some(SqlType::Jsonb)
    } else if name == UUID_IN
        || name == "gen_random_uuid"
        || crate::sql::extension_functions::UUID_RESULTS.contains(&name)
    {
        Some(SqlType::Uuid)
    } else if name == "inet_client_addr" || name == "inet_server_addr" {
        Some(SqlType::Inet)
    } else {
        None
    }
}

/// The functions here whose result is a `jsonb` (typed as text in Arrow).
const JSONB_RESULTS: &[&str] = &[
    "jsonb_set",
    "jsonb_insert",
    "jsonb_extract_path",
    "json_extract_path",
    "jsonb_strip_nulls",
    "json_strip_nulls",
    JSONB_CONCAT,
    JSONB_DELETE,
    JSONB_DELETE_PATH,
    "jsonb_path_query_array",
    "jsonb_path_query_first",
    JSONB_TYPED,
];

/// `weir_jsonb_typed(text)`: the text itself, typed `jsonb` (what the rows of a jsonb
/// set-returning function are wrapped in: already canonical jsonb text, not read again).
pub const JSONB_TYPED: &str = "weir_jsonb_typed";

/// `jsonb ? text`, `?|`, `?&`, `@>` (and `<@`, its operands swapped), `||` and `-`, as the
/// expression planner plans them for `jsonb` operands (`catalog/functions.rs`).
pub const JSONB_EXISTS: &str = "weir_jsonb_exists";
pub const JSONB_EXISTS_ANY: &str = "weir_jsonb_exists_any";
pub const JSONB_EXISTS_ALL: &str = "weir_jsonb_exists_all";
pub const JSONB_CONTAINS: &str = "weir_jsonb_contains";
pub const JSONB_CONCAT: &str = "weir_jsonb_concat";
pub const JSONB_DELETE: &str = "weir_jsonb_delete";
/// `jsonb #- text[]`.
pub const JSONB_DELETE_PATH: &str = "weir_jsonb_delete_path";

/// `jsonb_set(doc, path, value [, create])`, `jsonb_insert(doc, path, value [, after])` and
/// `doc #- path` per row (the edit made of the row's value and flag); strict: NULL where an
/// argument is NULL.
fn edit_path(
    args: &[ArrayRef],
    rows: usize,
    edit: impl for<'a> Fn(&'a str, Option<bool>) -> crate::sql::jsonb::PathEdit<'a>,
) -> DfResult<ArrayRef> {
    let docs = strings(&args[0])?;
    let values = args.get(2).map(strings).transpose()?;
    let flags = args
        .get(3)
        .map(|f| Ok::<_, DataFusionError>(cast(f, &DataType::Boolean)?.as_boolean().clone()))
        .transpose()?;
    let mut out = StringBuilder::with_capacity(rows, rows * 16);
    for i in 0..rows {
        if docs.is_null(i)
            || is_null_at(&args[1], i)
            || values.as_ref().is_some_and(|v| v.is_null(i))
            || flags.as_ref().is_some_and(|f| f.is_null(i))
        {
            out.append_null();
            continue;
        }
        let path = text_list_at(&args[1], i)?;
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let e = edit(
            values.as_ref().map_or("", |v| v.value(i)),
            flags.as_ref().map(|f| f.value(i)),
        );
        out.append_value(crate::sql::jsonb::edit_path(docs.value(i), &path, &e).map_err(json_err)?);
    }
    Ok(Arc::new(out.finish()))
}

fn json_err(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// A boolean per row of `(document, right operand)`: NULL where either is NULL.
fn jsonb_test(
    args: &[ArrayRef],
    rows: usize,
    f: impl Fn(&str, &ArrayRef, usize) -> DfResult<bool>,
) -> DfResult<ArrayRef> {
    let docs = strings(&args[0])?;
    let mut out = datafusion::arrow::array::BooleanBuilder::with_capacity(rows);
    for i in 0..rows {
        if docs.is_null(i) || is_null_at(&args[1], i) {
            out.append_null();
        } else {
            out.append_value(f(docs.value(i), &args[1], i)?);
        }
    }
    Ok(Arc::new(out.finish()))
}

/// Row `i` of a `text[]` (or of an array literal's text, `'{a,0,b}'`) as its non-NULL
/// strings.
pub(crate) fn text_list_at(a: &ArrayRef, i: usize) -> DfResult<Vec<String>> {
    if matches!(
        a.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        // an array literal's text (`'{a,0,b}'`)
        let t = strings(a)?;
        let items = crate::sql::pg_text::parse_array_text(t.value(i)).ok_or_else(|| {
            DataFusionError::External(Box::new(crate::sql::pg_text::malformed_array_literal(
                t.value(i),
            )))
        })?;
        return Ok(items.into_iter().flatten().collect());
    }
    let DataType::List(_) = a.data_type() else {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            format!("a text[] was expected, not {}", a.data_type()),
        ));
    };
    let items = strings(&a.as_list::<i32>().value(i))?;
    Ok(items.iter().flatten().map(str::to_owned).collect())
}

/// `jsonb_extract_path(doc, VARIADIC keys)` (`#>` with the path as arguments), or with
/// `as_text` `jsonb_extract_path_text` (`#>>`).
fn extract_path(args: &[ArrayRef], rows: usize, as_text: bool) -> DfResult<ArrayRef> {
    let Some((doc, path)) = args.split_first() else {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            "function jsonb_extract_path() does not exist",
        ));
    };
    let docs = strings(doc)?;
    let path = path.iter().map(strings).collect::<DfResult<Vec<_>>>()?;
    let mut out = StringBuilder::with_capacity(rows, rows * 8);
    for i in 0..rows {
        if docs.is_null(i) || path.iter().any(|p| p.is_null(i)) {
            out.append_null();
            continue;
        }
        let steps: Vec<_> = path
            .iter()
            .map(|p| crate::sql::jsonb::Step::of(p.value(i)))
            .collect();
        out.append_option(
            crate::sql::jsonb::get(docs.value(i), &steps, as_text).map_err(json_err)?,
        );
    }
    Ok(Arc::new(out.finish()))
}

fn jsonb_operators() -> Vec<PgFunction> {
    use crate::sql::jsonb;
    let mut out = Vec::new();
    for (name, as_text) in [
        ("jsonb_extract_path", false),
        ("json_extract_path", false),
        ("jsonb_extract_path_text", true),
        ("json_extract_path_text", true),
    ] {
        out.push(immutable(
            name,
            TypeSignature::VariadicAny,
            |_| DataType::Utf8,
            move |args, rows| extract_path(args, rows, as_text),
        ));
    }
    out.push(immutable(
        "jsonb_pretty",
        TypeSignature::Any(1),
        |_| DataType::Utf8,
        |args, _| map_text(&args[0], jsonb::pretty),
    ));
    out.push(immutable(
        "jsonb_set",
        TypeSignature::OneOf(vec![TypeSignature::Any(3), TypeSignature::Any(4)]),
        |_| DataType::Utf8,
        |args, rows| {
            edit_path(args, rows, |value, flag| jsonb::PathEdit::Set {
                value,
                create: flag.unwrap_or(true),
            })
        },
    ));
    out.push(immutable(
        "jsonb_insert",
        TypeSignature::OneOf(vec![TypeSignature::Any(3), TypeSignature::Any(4)]),
        |_| DataType::Utf8,
        |args, rows| {
            edit_path(args, rows, |value, flag| jsonb::PathEdit::Insert {
                value,
                after: flag.unwrap_or(false),
            })
        },
    ));
    out.push(immutable(
        JSONB_DELETE_PATH,
        TypeSignature::Any(2),
        |_| DataType::Utf8,
        |args, rows| edit_path(args, rows, |_, _| jsonb::PathEdit::Delete),
    ));
    for name in ["jsonb_strip_nulls", "json_strip_nulls"] {
        out.push(immutable(
            name,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| map_text(&args[0], jsonb::strip_nulls),
        ));
    }
    out.extend(vec![
        immutable(
            JSONB_EXISTS,
            TypeSignature::Any(2),
            |_| DataType::Boolean,
            |args, rows| {
                let keys = strings(&args[1])?;
                jsonb_test(args, rows, |d, _, i| {
                    jsonb::has_keys(d, &[keys.value(i)], true).map_err(json_err)
                })
            },
        ),
        immutable(
            JSONB_EXISTS_ANY,
            TypeSignature::Any(2),
            |_| DataType::Boolean,
            |args, rows| {
                jsonb_test(args, rows, |d, keys, i| {
                    jsonb::has_keys(d, &text_list_at(keys, i)?, false).map_err(json_err)
                })
            },
        ),
        immutable(
            JSONB_EXISTS_ALL,
            TypeSignature::Any(2),
            |_| DataType::Boolean,
            |args, rows| {
                jsonb_test(args, rows, |d, keys, i| {
                    jsonb::has_keys(d, &text_list_at(keys, i)?, true).map_err(json_err)
                })
            },
        ),
        immutable(
            JSONB_CONTAINS,
            TypeSignature::Any(2),
            |_| DataType::Boolean,
            |args, rows| {
                let right = strings(&args[1])?;
                jsonb_test(args, rows, |d, _, i| {
                    jsonb::contains(d, right.value(i)).map_err(json_err)
                })
            },
        ),
        immutable(
            JSONB_CONCAT,
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            |args, rows| {
                let (l, r) = (strings(&args[0])?, strings(&args[1])?);
                let mut out = StringBuilder::with_capacity(rows, rows * 16);
                for i in 0..rows {
                    if l.is_null(i) || r.is_null(i) {
                        out.append_null();
                    } else {
                        out.append_value(jsonb::concat(l.value(i), r.value(i)).map_err(json_err)?);
                    }
                }
                Ok(Arc::new(out.finish()) as ArrayRef)
            },
        ),
        immutable(
            JSONB_DELETE,
            TypeSignature::Any(2),
            |_| DataType::Utf8,
            |args, rows| {
                let docs = strings(&args[0])?;
                let what = &args[1];
                let (keys, index) = match what.data_type() {
                    t if t.is_integer() => (None, Some(cast(what, &DataType::Int64)?)),
                    DataType::List(_) => (None, None),
                    _ => (Some(strings(what)?), None),
                };
                let mut out = StringBuilder::with_capacity(rows, rows * 16);
                for i in 0..rows {
                    if docs.is_null(i) || is_null_at(what, i) {
                        out.append_null();
                        continue;
                    }
                    let listed;
                    let removal = match (&keys, &index) {
                        (Some(k), _) => jsonb::Removal::Key(k.value(i)),
                        (_, Some(ix)) => jsonb::Removal::Index(
                            ix.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                                .value(i),
                        ),
                        _ => {
                            listed = text_list_at(what, i)?;
                            jsonb::Removal::Keys(listed.iter().map(String::as_str).collect())
                        }
                    };
                    out.append_value(jsonb::remove(docs.value(i), &removal).map_err(json_err)?);
                }
                Ok(Arc::new(out.finish()) as ArrayRef)
            },
        ),
    ]);
    out
}

/// The JSON functions (each under its `json_` name too), and the lists the set-returning
/// ones are unnested from (`rewrite.rs` calls those).
fn json_definitions() -> Vec<PgFunction> {
    use crate::sql::jsonb;
    let mut out = jsonb_operators();
    for n in ["jsonb_typeof", "json_typeof"] {
        out.push(immutable(
            n,
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| map_text(&args[0], |t| jsonb::type_of(t).map(str::to_owned)),
        ));
    }
    for n in ["jsonb_array_length", "json_array_length"] {
        out.push(immutable(
            n,
            TypeSignature::Any(1),
            |_| DataType::Int32,
            |args, _| json_length(&args[0]),
        ));
    }
    type ListOf = fn(&str) -> Result<Vec<Option<String>>, WeirError>;
    // (`weir_json_...`: a `json` document's keys as written, repeated ones kept)
    let lists: [(&'static str, ListOf); 10] = [
        ("weir_jsonb_array_elements", |t| {
            jsonb::array_elements(t, false)
        }),
        ("weir_jsonb_array_elements_text", |t| {
            jsonb::array_elements(t, true)
        }),
        ("weir_jsonb_object_keys", |t| {
            jsonb::object_keys(t, false).map(|k| k.into_iter().map(Some).collect())
        }),
        ("weir_json_object_keys", |t| {
            jsonb::object_keys(t, true).map(|k| k.into_iter().map(Some).collect())
        }),
        ("weir_jsonb_each_keys", |t| {
            jsonb::object_entries(t, false, false)
                .map(|e| e.into_iter().map(|(k, _)| Some(k)).collect())
        }),
        ("weir_json_each_keys", |t| {
            jsonb::object_entries(t, false, true)
                .map(|e| e.into_iter().map(|(k, _)| Some(k)).collect())
        }),
        ("weir_jsonb_each_values", |t| {
            jsonb::object_entries(t, false, false).map(|e| e.into_iter().map(|(_, v)| v).collect())
        }),
        ("weir_json_each_values", |t| {
            jsonb::object_entries(t, false, true).map(|e| e.into_iter().map(|(_, v)| v).collect())
        }),
        ("weir_jsonb_each_text_values", |t| {
            jsonb::object_entries(t, true, false).map(|e| e.into_iter().map(|(_, v)| v).collect())
        }),
        ("weir_json_each_text_values", |t| {
            jsonb::object_entries(t, true, true).map(|e| e.into_iter().map(|(_, v)| v).collect())
        }),
    ];
    for (n, f) in lists {
        out.push(immutable(
            n,
            TypeSignature::Any(1),
            |_| text_list(),
            move |args, _| json_list(&args[0], f),
        ));
    }
    out.extend(crate::sql::jsonpath::definitions());
    out
}

/// One function of this module by name (the analyzer rule puts some into plans).
/// `args[0] ± args[1]` (a date or timestamp and an interval) by arrow's kernel, the ends
/// kept.
fn datetime_interval(args: &[ArrayRef], minus: bool) -> DfResult<ArrayRef> {
    use datafusion::arrow::compute::kernels::numeric;
    let iv = &args[1];
    // a timestamptz in a session zone other than UTC: months and days are added to its
    // wall-clock time there (a day across a daylight-saving change is 23 or 25 hours),
    // the rest to the instant, as Postgres' timestamptz_pl_interval; arrow's arithmetic
    // on a timestamp typed with the zone does exactly that
    let zone = crate::sql::time_zone::zone_arg(args.get(2))?;
    let in_zone = match args[0].data_type() {
        DataType::Timestamp(unit, Some(tz)) if !zone.is_utc() => Some((
            DataType::Timestamp(*unit, Some(zone.arrow_tz().into())),
            tz.clone(),
        )),
        _ => None,
    };
    crate::sql::datetime_in::keeping_infinities(&args[0], |a| {
        let a = match &in_zone {
            Some((zoned, _)) => cast(a, zoned)?,
            None => a.clone(),
        };
        let out = if minus {
            numeric::sub(&a, iv)?
        } else {
            numeric::add(&a, iv)?
        };
        Ok(match &in_zone {
            Some((_, tz)) => {
                let DataType::Timestamp(unit, _) = out.data_type() else {
                    return Ok(out);
                };
                cast(&out, &DataType::Timestamp(*unit, Some(tz.clone())))?
            }
            None => out,
        })
    })
}

/// DataFusion's `coalesce`, except that its arguments type as Postgres types them when
/// DataFusion finds no common type: a text among others of one kind is read as that kind
/// (`coalesce(end_date, '9999-12-31')` is a date). Only a quoted literal gets that far:
/// `catalog/matched_types.rs` reads it as its neighbours' type before the coercion, and
/// refuses a text column beside a date (42804), as Postgres does; without this, planning
/// refused the literal first ("function coalesce(date, text) does not exist").
#[derive(Debug)]
struct PgCoalesce {
    inner: Arc<dyn datafusion::logical_expr::ScalarUDFImpl>,
}

impl PartialEq for PgCoalesce {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for PgCoalesce {}
impl Hash for PgCoalesce {
    fn hash<H: Hasher>(&self, state: &mut H) {
        "weir_coalesce".hash(state);
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for PgCoalesce {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(args)
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn simplify(
        &self,
        args: Vec<datafusion::logical_expr::Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> DfResult<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }
    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> DfResult<datafusion::logical_expr::ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
    fn conditional_arguments<'a>(
        &self,
        args: &'a [datafusion::logical_expr::Expr],
    ) -> Option<(
        Vec<&'a datafusion::logical_expr::Expr>,
        Vec<&'a datafusion::logical_expr::Expr>,
    )> {
        self.inner.conditional_arguments(args)
    }
    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        let theirs = self.inner.coerce_types(args);
        if theirs.is_ok() {
            return theirs;
        }
        let textual = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            )
        };
        let others: Vec<DataType> = args.iter().filter(|t| !textual(t)).cloned().collect();
        match others.is_empty() {
            true => theirs,
            false => match self.inner.coerce_types(&others) {
                Ok(common) => Ok(vec![common[0].clone(); args.len()]),
                Err(_) => theirs,
            },
        }
    }
}

pub fn udf(name: &str) -> PgFunction {
    definitions()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no Postgres-semantics function {name}"))
}

pub fn register(ctx: &SessionContext) {
    for f in definitions() {
        ctx.register_udf(ScalarUDF::new_from_impl(f));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(PgCoalesce {
        inner: datafusion::functions::core::coalesce().inner().clone(),
    }));
    // the functions behind jsonb's `?`, `?|`, `?&` operators, under their Postgres names
    for (name, alias) in [
        (JSONB_EXISTS, "jsonb_exists"),
        (JSONB_EXISTS_ANY, "jsonb_exists_any"),
        (JSONB_EXISTS_ALL, "jsonb_exists_all"),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(udf(name)).with_aliases([alias]));
    }
    // Postgres' names of functions DataFusion has under others
    for (f, alias) in [
        (datafusion::functions::math::signum(), "sign"),
        (datafusion::functions::math::ceil(), "ceiling"),
    ] {
        ctx.register_udf(f.as_ref().clone().with_aliases([alias]));
    }
    // the statement's start: DataFusion's now() (with the session's zone); now() itself is
    // the transaction's start (`sql::transaction_time`, registered per session)
    crate::sql::transaction_time::register_statement_timestamp(ctx);
    ctx.register_udaf(
        datafusion::functions_aggregate::bool_and_or::bool_and_udaf()
            .as_ref()
            .clone()
            .with_aliases(["every"]),
    );
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::sql::extract::Extract::numeric(),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::sql::extract::Extract::date_part(),
    ));
    ctx.register_udf(crate::sql::date_trunc::date_trunc());
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::sql::to_number::ToNumber::default(),
    ));
    for f in datafusion::functions_table::all_default_table_functions() {
        ctx.register_udtf(f.name(), Arc::new(SeriesArgs(f.function().clone())));
    }
}

/// DataFusion's `generate_series` and `range` in FROM read their arguments in its own
/// types: bigint only, while Postgres' `generate_series(1 + 1, 5)` has int4 arguments
/// (`1 + 1` is int4 here, as in Postgres); timestamps in nanoseconds, while ours are
/// microseconds; no dates, while Postgres reads a date series as timestamptz. The
/// arguments are given to it so.
#[derive(Debug)]
struct SeriesArgs(Arc<dyn datafusion::catalog::TableFunctionImpl>);

impl datafusion::catalog::TableFunctionImpl for SeriesArgs {
    fn call_with_args(
        &self,
        args: datafusion::catalog::TableFunctionArgs,
    ) -> DfResult<Arc<dyn datafusion::catalog::TableProvider>> {
        use datafusion::logical_expr::Expr;
        // in a session zone other than UTC a timestamptz series counts its days and months
        // on the wall clock there (DataFusion steps in its arguments' zone), and a date is
        // its midnight there
        let zone = crate::sql::time_zone::plan_zone(args.session().config_options());
        let zoned = (!zone.is_utc())
            .then(|| DataType::Timestamp(TimeUnit::Nanosecond, Some(zone.arrow_tz().into())));
        let exprs = args
            .exprs()
            .iter()
            .map(|e| {
                let Expr::Literal(v, meta) = e else {
                    return Ok(e.clone());
                };
                if let Some(zoned) = &zoned {
                    match v {
                        ScalarValue::Date32(Some(days)) => {
                            let utc = zone
                                .utc_of_local_us(*days as i64 * 86_400_000_000)
                                .unwrap_or(i64::MAX);
                            let v = ScalarValue::TimestampMicrosecond(Some(utc), None);
                            let DataType::Timestamp(_, tz) = zoned else {
                                return Ok(e.clone());
                            };
                            let v = v.cast_to(&DataType::Timestamp(TimeUnit::Nanosecond, None))?;
                            let ScalarValue::TimestampNanosecond(ns, _) = v else {
                                return Ok(e.clone());
                            };
                            return Ok(Expr::Literal(
                                ScalarValue::TimestampNanosecond(ns, tz.clone()),
                                meta.clone(),
                            ));
                        }
                        v if matches!(v.data_type(), DataType::Timestamp(_, Some(_))) => {
                            return Ok(Expr::Literal(v.cast_to(zoned)?, meta.clone()));
                        }
                        _ => {}
                    }
                }
                let to = match v.data_type() {
                    DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32 => DataType::Int64,
                    DataType::Date32 => DataType::Timestamp(
                        TimeUnit::Nanosecond,
                        Some(crate::sql::types::SESSION_ZONE.into()),
                    ),
                    DataType::Timestamp(unit, tz) if unit != TimeUnit::Nanosecond => {
                        DataType::Timestamp(TimeUnit::Nanosecond, tz)
                    }
                    _ => return Ok(e.clone()),
                };
                Ok(Expr::Literal(v.cast_to(&to)?, meta.clone()))
            })
            .collect::<DfResult<Vec<_>>>()?;
        self.0
            .call_with_args(datafusion::catalog::TableFunctionArgs::new(
                &exprs,
                args.session(),
            ))
    }
}

/// Floats with every NaN made the positive quiet NaN: Postgres has one NaN (equal to
/// itself, greater than every number), where IEEE and arrow's total order have `-NaN` too.
pub fn canonical_nan_array(a: &ArrayRef) -> ArrayRef {
    use datafusion::arrow::datatypes::{Float32Type, Float64Type};
    match a.data_type() {
        DataType::Float64 => {
            let p = a.as_primitive::<Float64Type>();
            if !p
                .values()
                .iter()
                .any(|v| v.is_nan() && v.is_sign_negative())
            {
                return a.clone();
            }
            Arc::new(p.unary::<_, Float64Type>(|v| if v.is_nan() { f64::NAN } else { v }))
        }
        DataType::Float32 => {
            let p = a.as_primitive::<Float32Type>();
            if !p
                .values()
                .iter()
                .any(|v| v.is_nan() && v.is_sign_negative())
            {
                return a.clone();
            }
            Arc::new(p.unary::<_, Float32Type>(|v| if v.is_nan() { f32::NAN } else { v }))
        }
        _ => a.clone(),
    }
}

/// A batch with its float columns' NaNs made canonical ([`canonical_nan_array`]).
pub fn canonical_nans(
    batch: datafusion::arrow::record_batch::RecordBatch,
) -> datafusion::arrow::error::Result<datafusion::arrow::record_batch::RecordBatch> {
    let mut cols = batch.columns().to_vec();
    let mut changed = false;
    for c in cols.iter_mut() {
        let n = canonical_nan_array(c);
        if !Arc::ptr_eq(&n, c) {
            *c = n;
            changed = true;
        }
    }
    if !changed {
        return Ok(batch);
    }
    datafusion::arrow::record_batch::RecordBatch::try_new(batch.schema(), cols)
}

/// An interval as one comparable number, as Postgres compares intervals: nanoseconds with
/// a month of 30 days and a day of 24 hours (`interval '24 h' = interval '1 day'`).
fn interval_key(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::Decimal128Array;
    use datafusion::arrow::datatypes::{IntervalMonthDayNanoType, IntervalUnit};
    let c = cast(&args[0], &DataType::Interval(IntervalUnit::MonthDayNano))?;
    let a = c.as_primitive::<IntervalMonthDayNanoType>();
    const DAY: i128 = 86_400_000_000_000;
    let out: Decimal128Array = a
        .iter()
        .map(|v| {
            v.map(|v| v.months as i128 * 30 * DAY + v.days as i128 * DAY + v.nanoseconds as i128)
        })
        .collect();
    Ok(Arc::new(out.with_precision_and_scale(38, 0)?))
}

/// `x op ANY(array)` / `x op ALL(array)` with Postgres' three-valued logic: ANY is true if
/// some comparison is true, else NULL if some is NULL, else false (an empty array: false);
/// ALL is false if some comparison is false, else NULL if some is NULL, else true.
fn any_op(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::{BooleanArray, UInt32Array};
    use datafusion::arrow::compute::kernels::{cmp, comparison};
    use datafusion::arrow::compute::take;
    if rows == 0 {
        return Ok(Arc::new(BooleanArray::new_null(0)));
    }
    let op = strings(&args[2])?;
    let all = cast(&args[3], &DataType::Boolean)?.as_boolean().value(0);
    let op = if op.is_empty() { "=" } else { op.value(0) };
    let list = match args[1].data_type() {
        DataType::List(_) => args[1].clone(),
        DataType::Null => return Ok(Arc::new(BooleanArray::new_null(rows))),
        DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            cast(&args[1], &DataType::List(f.clone()))?
        }
        other => {
            return Err(pg_error(
                sqlstate::DATATYPE_MISMATCH,
                format!("op ANY/ALL (array) requires array on right side, not {other}"),
            ));
        }
    };
    let list = list.as_list::<i32>();
    let offsets = list.value_offsets();
    let (base, end) = (offsets[0] as usize, offsets[rows] as usize);
    let values = list.values().slice(base, end - base);
    let mut idx = Vec::with_capacity(end - base);
    for i in 0..rows {
        idx.extend(std::iter::repeat_n(
            i as u32,
            (offsets[i + 1] - offsets[i]) as usize,
        ));
    }
    let numeric = |t: &DataType| t.is_numeric();
    let textual =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    let (nt, vt) = (args[0].data_type(), values.data_type());
    if (numeric(nt) && textual(vt)) || (textual(nt) && numeric(vt)) {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            format!(
                "operator does not exist: {} {op} {}",
                if numeric(nt) { "integer" } else { "text" },
                if numeric(vt) { "integer" } else { "text" }
            ),
        ));
    }
    let like = matches!(op, "~~" | "!~~" | "~~*" | "!~~*");
    // compare in the type both sides coerce to (a bigint with an integer[]: as bigints);
    // LIKE patterns as text
    let common = if like {
        DataType::Utf8
    } else {
        datafusion::logical_expr::type_coercion::binary::comparison_coercion(nt, vt)
            .unwrap_or_else(|| vt.clone())
    };
    let values = cast(&values, &common)?;
    let needle = cast(&args[0], &common)?;
    let needle = take(&needle, &UInt32Array::from(idx), None)?;
    let r = match op {
        "=" => cmp::eq(&needle, &values)?,
        "<>" | "!=" => cmp::neq(&needle, &values)?,
        "<" => cmp::lt(&needle, &values)?,
        "<=" => cmp::lt_eq(&needle, &values)?,
        ">" => cmp::gt(&needle, &values)?,
        ">=" => cmp::gt_eq(&needle, &values)?,
        // x [NOT] [I]LIKE ANY (patterns)
        "~~" => comparison::like(&needle, &values)?,
        "!~~" => comparison::nlike(&needle, &values)?,
        "~~*" => comparison::ilike(&needle, &values)?,
        "!~~*" => comparison::nilike(&needle, &values)?,
        other => {
            return Err(pg_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("operator {other} is not supported with ANY/ALL"),
            ));
        }
    };
    let out: BooleanArray = (0..rows)
        .map(|i| {
            if list.is_null(i) {
                return None;
            }
            let (s, e) = (offsets[i] as usize - base, offsets[i + 1] as usize - base);
            let mut unknown = false;
            for j in s..e {
                match (r.is_null(j), r.value(j)) {
                    (true, _) => unknown = true,
                    (false, v) if v != all => return Some(!all),
                    _ => {}
                }
            }
            if unknown { None } else { Some(all) }
        })
        .collect();
    Ok(Arc::new(out))
}

/// Numeric half away from zero, floats half to even: what Postgres does casting to an integer.
fn round_for_int(a: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{Decimal128Type, Float32Type, Float64Type};
    Ok(match a.data_type() {
        DataType::Float64 => Arc::new(
            a.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64::round_ties_even),
        ),
        DataType::Float32 => Arc::new(
            a.as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(f32::round_ties_even),
        ),
        DataType::Decimal128(p, s) if *s > 0 => {
            let d = 10i128.pow(*s as u32);
            Arc::new(
                a.as_primitive::<Decimal128Type>()
                    .unary::<_, Decimal128Type>(|v| {
                        // (saturating: a NULL slot may hold any bits)
                        let r = v.saturating_abs().saturating_add(d / 2) / d * d;
                        if v < 0 { -r } else { r }
                    })
                    .with_precision_and_scale(*p, *s)?,
            )
        }
        _ => a.clone(),
    })
}

fn interval_type() -> DataType {
    DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Justify {
    Hours,
    Days,
    Both,
}

/// `justify_hours` (24 hours of the time are a day), `justify_days` (30 days are a month)
/// and `justify_interval` (both), each field then of one sign, as Postgres'
/// `interval_justify_*`.
fn justify(a: &ArrayRef, how: Justify) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::{IntervalMonthDayNano, IntervalMonthDayNanoType};
    const NANOS_PER_DAY: i64 = 86_400_000_000_000;
    let overflow = || pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range");
    let a = a.as_primitive::<IntervalMonthDayNanoType>();
    let mut out = Vec::with_capacity(a.len());
    for v in a.iter() {
        let Some(v) = v else {
            out.push(None);
            continue;
        };
        let (mut m, mut d, mut t) = (v.months, v.days, v.nanoseconds);
        let whole_months = |m: &mut i32, d: &mut i32| -> DfResult<()> {
            let w = *d / 30;
            *d -= w * 30;
            *m = m.checked_add(w).ok_or_else(overflow)?;
            Ok(())
        };
        if how == Justify::Both && ((d > 0 && t > 0) || (d < 0 && t < 0)) {
            whole_months(&mut m, &mut d)?;
        }
        if how != Justify::Days {
            let w = t / NANOS_PER_DAY;
            t -= w * NANOS_PER_DAY;
            d = i32::try_from(w)
                .ok()
                .and_then(|w| d.checked_add(w))
                .ok_or_else(overflow)?;
        }
        if how != Justify::Hours {
            whole_months(&mut m, &mut d)?;
            let t_sign = if how == Justify::Both { t } else { 0 };
            if m > 0 && (d < 0 || (d == 0 && t_sign < 0)) {
                d += 30;
                m -= 1;
            } else if m < 0 && (d > 0 || (d == 0 && t_sign > 0)) {
                d -= 30;
                m += 1;
            }
        }
        if how != Justify::Days {
            if d > 0 && t < 0 {
                t += NANOS_PER_DAY;
                d -= 1;
            } else if d < 0 && t > 0 {
                t -= NANOS_PER_DAY;
                d += 1;
            }
        }
        out.push(Some(IntervalMonthDayNano::new(m, d, t)));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// `make_interval(years, months, weeks, days, hours, mins, secs)` (the rewrite gives all
/// seven, by name or position, 0 where not given), as Postgres': seconds rounded to the
/// microsecond, half to even; 22008 past what an interval holds.
fn make_interval(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::{Float64Type, Int32Type, IntervalMonthDayNano};
    let overflow = || pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range");
    let ints = args[..6]
        .iter()
        .map(|a| {
            let t = a.data_type();
            if !(t.is_integer() || t.is_null()) {
                return Err(pg_error(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("function make_interval with an argument of type {t} does not exist"),
                ));
            }
            Ok(cast(a, &DataType::Int32)?)
        })
        .collect::<DfResult<Vec<_>>>()?;
    let ints: Vec<_> = ints.iter().map(|a| a.as_primitive::<Int32Type>()).collect();
    let secs = cast(&args[6], &DataType::Float64)?;
    let secs = secs.as_primitive::<Float64Type>();
    let mut out = Vec::with_capacity(secs.len());
    for i in 0..secs.len() {
        if secs.is_null(i) || ints.iter().any(|a| a.is_null(i)) {
            out.push(None);
            continue;
        }
        let [y, mo, w, d, h, mi] = [0, 1, 2, 3, 4, 5].map(|k| ints[k].value(i));
        let s = secs.value(i);
        if !s.is_finite() {
            return Err(overflow());
        }
        let months = y.checked_mul(12).and_then(|m| m.checked_add(mo));
        let days = w.checked_mul(7).and_then(|x| x.checked_add(d));
        let micros = (s * 1e6).round_ties_even();
        let time = (h as i64)
            .checked_mul(3_600_000_000)
            .and_then(|t| t.checked_add(mi as i64 * 60_000_000))
            .and_then(|t| {
                (micros.abs() < 9.2e18)
                    .then(|| t.checked_add(micros as i64))
                    .flatten()
            })
            .and_then(|t| t.checked_mul(1000));
        match (months, days, time) {
            (Some(m), Some(d), Some(t)) => out.push(Some(IntervalMonthDayNano::new(m, d, t))),
            _ => return Err(overflow()),
        }
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// [`TIMESTAMP_MI`]: `a - b` in microseconds, whole days as days (`justify_hours`: both
/// parts of one sign), so spans past the 292 years an interval's nanoseconds hold are days.
fn timestamp_mi(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::{IntervalMonthDayNano, TimestampMicrosecondType};
    const MICROS_PER_DAY: i64 = 86_400_000_000;
    let micros = |a: &ArrayRef| -> DfResult<ArrayRef> {
        Ok(cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?)
    };
    let (l, r) = (micros(&args[0])?, micros(&args[1])?);
    let (l, r) = (
        l.as_primitive::<TimestampMicrosecondType>(),
        r.as_primitive::<TimestampMicrosecondType>(),
    );
    let mut out = Vec::with_capacity(l.len());
    for i in 0..l.len() {
        if l.is_null(i) || r.is_null(i) {
            out.push(None);
            continue;
        }
        let (a, b) = (l.value(i), r.value(i));
        let infinite = |v: i64| v == i64::MAX || v == i64::MIN;
        if infinite(a) || infinite(b) {
            return Err(pg_error(
                sqlstate::DATETIME_FIELD_OVERFLOW,
                "cannot subtract infinite timestamps",
            ));
        }
        let diff = a
            .checked_sub(b)
            .ok_or_else(|| pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range"))?;
        // (truncating division: the day count and the rest have the difference's sign)
        let days = i32::try_from(diff / MICROS_PER_DAY)
            .map_err(|_| pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range"))?;
        let rest = diff % MICROS_PER_DAY;
        out.push(Some(IntervalMonthDayNano::new(0, days, rest * 1000)));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// `age(a, b)`: `a - b` as years, months and days counted on the calendar (a month
/// borrowed when the days go negative is the month `b` is in, or `a` when `a < b`), the
/// rest as time, as Postgres' `timestamp_age`. (`age(x)` is rewritten to
/// `age(current_date, x)`.) A timestamptz is read in the session zone (UTC).
fn age(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    use chrono::Timelike;
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::{IntervalMonthDayNano, TimestampMicrosecondType};
    let out_of_range = || pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range");
    let as_ts = |a: &ArrayRef| -> DfResult<ArrayRef> {
        match a.data_type() {
            DataType::Timestamp(..) | DataType::Date32 | DataType::Null => {
                Ok(cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?)
            }
            t => Err(pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function age with an argument of type {t} does not exist"),
            )),
        }
    };
    let (l, r) = (as_ts(&args[0])?, as_ts(&args[1])?);
    let (l, r) = (
        l.as_primitive::<TimestampMicrosecondType>(),
        r.as_primitive::<TimestampMicrosecondType>(),
    );
    let days_in = |year: i32, month: u32| -> i64 {
        let first = NaiveDate::from_ymd_opt(year, month, 1);
        let next = if month == 12 {
            NaiveDate::from_ymd_opt(year + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(year, month + 1, 1)
        };
        match (first, next) {
            (Some(a), Some(b)) => (b - a).num_days(),
            _ => 31,
        }
    };
    let mut out = Vec::with_capacity(l.len());
    for i in 0..l.len() {
        if l.is_null(i) || r.is_null(i) {
            out.push(None);
            continue;
        }
        let (a, b) = (l.value(i), r.value(i));
        let parts = |v: i64| {
            chrono::DateTime::from_timestamp_micros(v)
                .map(|t| t.naive_utc())
                .ok_or_else(out_of_range)
        };
        let (ta, tb) = (parts(a)?, parts(b)?);
        let field = |t: &chrono::NaiveDateTime| {
            [
                t.year() as i64,
                t.month() as i64,
                t.day() as i64,
                t.hour() as i64,
                t.minute() as i64,
                t.second() as i64,
                (t.nanosecond() / 1000) as i64,
            ]
        };
        let (fa, fb) = (field(&ta), field(&tb));
        let mut d: [i64; 7] = std::array::from_fn(|k| fa[k] - fb[k]);
        let flip = a < b;
        if flip {
            d.iter_mut().for_each(|x| *x = -*x);
        }
        let [year, mon, mday, hour, min, sec, usec] = &mut d;
        while *usec < 0 {
            *usec += 1_000_000;
            *sec -= 1;
        }
        while *sec < 0 {
            *sec += 60;
            *min -= 1;
        }
        while *min < 0 {
            *min += 60;
            *hour -= 1;
        }
        while *hour < 0 {
            *hour += 24;
            *mday -= 1;
        }
        while *mday < 0 {
            let t = if flip { &ta } else { &tb };
            *mday += days_in(t.year(), t.month());
            *mon -= 1;
        }
        while *mon < 0 {
            *mon += 12;
            *year -= 1;
        }
        let sign = if flip { -1 } else { 1 };
        let months = i32::try_from(sign * (*year * 12 + *mon)).map_err(|_| out_of_range())?;
        let days = i32::try_from(sign * *mday).map_err(|_| out_of_range())?;
        let micros = sign * (((*hour * 60 + *min) * 60 + *sec) * 1_000_000 + *usec);
        out.push(Some(IntervalMonthDayNano::new(months, days, micros * 1000)));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// [`INTERVAL_MUL`] / [`INTERVAL_DIV`]: each interval times (or divided by) its factor as
/// Postgres' `interval_mul`/`interval_div` do: months and days scaled and truncated, the
/// fractions of a month carried into days (30 a month) and of a day into the time (24 h a
/// day), rounded to the microsecond. 22008 when a field leaves its range, 22012 for a
/// zero divisor.
fn interval_scaled(args: &[ArrayRef], divide: bool) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::IntervalMonthDayNanoArray;
    use datafusion::arrow::datatypes::{
        Float64Type, IntervalMonthDayNano, IntervalMonthDayNanoType,
    };
    const DAYS_PER_MONTH: f64 = 30.0;
    const SECS_PER_DAY: f64 = 86_400.0;
    let ts_round = |x: f64| (x * 1e6).round_ties_even() / 1e6;
    let out_of_range = || pg_error(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range");
    let iv = args[0].as_primitive::<IntervalMonthDayNanoType>();
    let f = cast(&args[1], &DataType::Float64)?;
    let f = f.as_primitive::<Float64Type>();
    let mut out = Vec::with_capacity(iv.len());
    for i in 0..iv.len() {
        if iv.is_null(i) || f.is_null(i) {
            out.push(None);
            continue;
        }
        let v = iv.value(i);
        let factor = f.value(i);
        if divide && factor == 0.0 {
            return Err(pg_error(sqlstate::DIVISION_BY_ZERO, "division by zero"));
        }
        let scale = |x: f64| if divide { x / factor } else { x * factor };
        let in_i32 = |x: f64| !x.is_nan() && x <= i32::MAX as f64 && x >= i32::MIN as f64;
        let months = scale(v.months as f64);
        let days = scale(v.days as f64);
        if !in_i32(months) || !in_i32(days) {
            return Err(out_of_range());
        }
        let (months_i, mut days_i) = (months as i32, days as i32);
        let month_remainder_days = ts_round((months - months_i as f64) * DAYS_PER_MONTH);
        let mut sec_remainder = ts_round(
            (days - days_i as f64 + month_remainder_days - month_remainder_days.trunc())
                * SECS_PER_DAY,
        );
        if sec_remainder.abs() >= SECS_PER_DAY {
            let whole = (sec_remainder / SECS_PER_DAY).trunc();
            days_i = days_i.saturating_add(whole as i32);
            sec_remainder -= whole * SECS_PER_DAY;
        }
        days_i = days_i.saturating_add(month_remainder_days.trunc() as i32);
        let micros = (scale(v.nanoseconds as f64 / 1000.0) + sec_remainder * 1e6).round_ties_even();
        if micros.is_nan() || micros.abs() >= 9.2e18 / 1000.0 {
            return Err(out_of_range());
        }
        out.push(Some(IntervalMonthDayNano::new(
            months_i,
            days_i,
            micros as i64 * 1000,
        )));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// [`FLOAT_DIV`]: both operands in the result's float type, divided; a zero divisor of a
/// row whose dividend is not NULL fails the whole call.
fn float_div(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{Float32Type, Float64Type};
    let t = match (args[0].data_type(), args[1].data_type()) {
        (DataType::Float32, DataType::Float32) => DataType::Float32,
        _ => DataType::Float64,
    };
    let (l, r) = (cast(&args[0], &t)?, cast(&args[1], &t)?);
    // (a row with a NULL operand is NULL, the divisor not looked at)
    let zero = match &t {
        DataType::Float32 => r
            .as_primitive::<Float32Type>()
            .iter()
            .enumerate()
            .any(|(i, v)| v == Some(0.0) && l.is_valid(i)),
        _ => r
            .as_primitive::<Float64Type>()
            .iter()
            .enumerate()
            .any(|(i, v)| v == Some(0.0) && l.is_valid(i)),
    };
    if zero {
        return Err(pg_error(sqlstate::DIVISION_BY_ZERO, "division by zero"));
    }
    Ok(datafusion::arrow::compute::kernels::numeric::div(&l, &r)?)
}

/// `abs(x)`, of an integer type raising 22003 for its minimum as Postgres does.
fn abs(a: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{
        Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    };
    let range = |name: &str| {
        pg_error(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("{name} out of range"),
        )
    };
    Ok(match a.data_type() {
        DataType::Int8 => Arc::new(
            a.as_primitive::<Int8Type>()
                .try_unary::<_, Int8Type, _>(|v| {
                    v.checked_abs().ok_or_else(|| range("smallint"))
                })?,
        ),
        DataType::Int16 => Arc::new(
            a.as_primitive::<Int16Type>()
                .try_unary::<_, Int16Type, _>(|v| {
                    v.checked_abs().ok_or_else(|| range("smallint"))
                })?,
        ),
        DataType::Int32 => Arc::new(
            a.as_primitive::<Int32Type>()
                .try_unary::<_, Int32Type, _>(|v| {
                    v.checked_abs().ok_or_else(|| range("integer"))
                })?,
        ),
        DataType::Int64 => Arc::new(
            a.as_primitive::<Int64Type>()
                .try_unary::<_, Int64Type, _>(|v| v.checked_abs().ok_or_else(|| range("bigint")))?,
        ),
        DataType::Float32 => Arc::new(
            a.as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(f32::abs),
        ),
        DataType::Float64 => Arc::new(
            a.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64::abs),
        ),
        DataType::Decimal128(p, s) => Arc::new(
            a.as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(i128::wrapping_abs)
                .with_precision_and_scale(*p, *s)?,
        ),
        t if t.is_unsigned_integer() => a.clone(),
        DataType::Null => a.clone(),
        _ => abs(&cast(a, &DataType::Float64)?)?,
    })
}

/// `array_length(a, dim)`: NULL for an empty array or a dimension it does not have.
fn array_length(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::Int32Array;
    let dims = cast(&args[1], &DataType::Int64)?;
    let dims = dims.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let list = match args[0].data_type() {
        DataType::Null => return Ok(Arc::new(Int32Array::new_null(rows))),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            cast(&args[0], &DataType::LargeList(f.clone()))?
        }
        other => {
            return Err(pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function array_length({other}, integer) does not exist"),
            ));
        }
    };
    let out: Int32Array = (0..rows)
        .map(|i| {
            if dims.is_null(i) || dims.value(i) < 1 {
                return None;
            }
            dim_length(list.as_ref(), i, dims.value(i))
        })
        .collect();
    Ok(Arc::new(out))
}

/// The length of row `i`'s dimension `dim` (1-based; a nested list is a dimension), NULL
/// for an empty or NULL array or a dimension it does not have.
fn dim_length(a: &dyn Array, i: usize, dim: i64) -> Option<i32> {
    let l = a.as_list_opt::<i64>()?;
    if l.is_null(i) {
        return None;
    }
    let (s, e) = (
        l.value_offsets()[i] as usize,
        l.value_offsets()[i + 1] as usize,
    );
    if s == e {
        return None;
    }
    if dim == 1 {
        return Some((e - s) as i32);
    }
    let inner = cast(
        l.values(),
        &DataType::LargeList(match l.values().data_type() {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f.clone(),
            _ => return None,
        }),
    )
    .ok()?;
    dim_length(inner.as_ref(), s, dim - 1)
}

/// `chr(code)`: the character of a Unicode code point, with Postgres' errors: 54000 for 0,
/// a surrogate and a code beyond Unicode, 22023 for a negative one.
fn chr(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let codes = cast(&args[0], &DataType::Int64)?;
    let codes = codes.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let mut out = StringBuilder::with_capacity(rows, rows);
    for v in codes.iter() {
        let Some(v) = v else {
            out.append_null();
            continue;
        };
        if v > i32::MAX as i64 || v < i32::MIN as i64 {
            return Err(pg_error(
                sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                "integer out of range",
            ));
        }
        if v < 0 {
            return Err(pg_error(
                sqlstate::INVALID_PARAMETER_VALUE,
                "character number must be positive",
            ));
        }
        let code = v as u32;
        let c = match code {
            0 => {
                return Err(pg_error(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    "null character not permitted",
                ));
            }
            0xD800..=0xDFFF => {
                return Err(pg_error(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    format!("requested character not valid for encoding: {code}"),
                ));
            }
            _ => char::from_u32(code).ok_or_else(|| {
                pg_error(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    format!("requested character too large for encoding: {code}"),
                )
            })?,
        };
        out.append_value(c.encode_utf8(&mut [0u8; 4]));
    }
    Ok(Arc::new(out.finish()))
}

/// `array_fill(value, dims [, lower_bounds])`: a one-dimensional array of `dims[1]` copies
/// (lower bound 1; Weir's arrays have no other bounds, nor a second dimension whose depth
/// would depend on the value of `dims`: both refused with 0A000).
fn array_fill(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let value = &args[0];
    if value.data_type() == &DataType::Null {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            "could not determine polymorphic type because input has type unknown",
        ));
    }
    let ints = |a: &ArrayRef, i: usize| -> DfResult<Option<Vec<i64>>> {
        if is_null_at(a, i) {
            return Ok(None);
        }
        text_list_at(a, i)?
            .iter()
            .map(|t| {
                t.trim().parse::<i64>().map_err(|_| {
                    pg_error(
                        sqlstate::INVALID_TEXT_REPRESENTATION,
                        format!("invalid input syntax for type integer: \"{t}\""),
                    )
                })
            })
            .collect::<DfResult<Vec<i64>>>()
            .map(Some)
    };
    let mut take: Vec<u32> = Vec::new();
    let mut offsets: Vec<i32> = Vec::with_capacity(rows + 1);
    offsets.push(0);
    for i in 0..rows {
        let cannot_be_null =
            || pg_error("22004", "dimension array or low bound array cannot be null");
        let dims = ints(&args[1], i)?.ok_or_else(cannot_be_null)?;
        if let Some(lb) = args.get(2) {
            let lb = ints(lb, i)?.ok_or_else(cannot_be_null)?;
            if lb.len() != dims.len() {
                return Err(pg_error("2202E", "wrong number of array subscripts"));
            }
            if lb.iter().any(|&b| b != 1) {
                return Err(pg_error(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "array_fill with lower bounds other than 1 is not supported",
                ));
            }
        }
        let n = match dims.as_slice() {
            [] => 0,
            [n] => (*n).max(0),
            _ => {
                return Err(pg_error(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "array_fill with more than one dimension is not supported",
                ));
            }
        };
        if n > 100_000_000 || take.len() as i64 + n > i32::MAX as i64 {
            return Err(pg_error(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!("array size exceeds the maximum allowed ({})", i32::MAX),
            ));
        }
        take.extend(std::iter::repeat_n(i as u32, n as usize));
        offsets.push(take.len() as i32);
    }
    let values = datafusion::arrow::compute::take(
        value.as_ref(),
        &datafusion::arrow::array::UInt32Array::from(take),
        None,
    )?;
    Ok(Arc::new(datafusion::arrow::array::ListArray::try_new(
        Arc::new(Field::new_list_field(value.data_type().clone(), true)),
        datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
        values,
        None,
    )?))
}

/// `(s1, e1) OVERLAPS (s2, e2)` and `overlaps(s1, e1, s2, e2)`: whether two periods of
/// dates, timestamps or times overlap, each the half-open `[start, end)` (an instant when
/// start = end; ends given as intervals are added to their starts), by Postgres'
/// `overlaps_timestamp` with its NULL rules (an end before its start swaps them).
fn overlaps(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{Int64Type, TimeUnit};
    let micros = |a: &ArrayRef| -> DfResult<Int64Array> {
        let a = match a.data_type() {
            DataType::Time32(_) | DataType::Time64(_) => cast(
                &cast(a, &DataType::Time64(TimeUnit::Microsecond))?,
                &DataType::Int64,
            )?,
            DataType::Null => cast(a, &DataType::Int64)?,
            DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => cast(
                &cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
                &DataType::Int64,
            )?,
            other => {
                return Err(pg_error(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("function overlaps({other}) does not exist"),
                ));
            }
        };
        Ok(a.as_primitive::<Int64Type>().clone())
    };
    // an end written as an interval: its start plus it
    let end = |start: &ArrayRef, e: &ArrayRef| -> DfResult<Int64Array> {
        if matches!(e.data_type(), DataType::Interval(_)) {
            let s = match start.data_type() {
                DataType::Date32 | DataType::Date64 => {
                    cast(start, &DataType::Timestamp(TimeUnit::Microsecond, None))?
                }
                _ => start.clone(),
            };
            let sum = datafusion::arrow::compute::kernels::numeric::add(&s, e)?;
            micros(&sum)
        } else {
            micros(e)
        }
    };
    let (s1, e1) = (micros(&args[0])?, end(&args[0], &args[1])?);
    let (s2, e2) = (micros(&args[2])?, end(&args[2], &args[3])?);
    let at = |a: &Int64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
    let mut out = datafusion::arrow::array::BooleanBuilder::with_capacity(rows);
    for i in 0..rows {
        // a period: (start, end) with start <= end; a NULL start takes the end's place
        let period = |s: Option<i64>, e: Option<i64>| match (s, e) {
            (None, None) => None,
            (None, Some(e)) => Some((e, None)),
            (Some(s), None) => Some((s, None)),
            (Some(s), Some(e)) => Some(if s > e { (e, Some(s)) } else { (s, Some(e)) }),
        };
        let (Some((ts1, te1)), Some((ts2, te2))) = (
            period(at(&s1, i), at(&e1, i)),
            period(at(&s2, i), at(&e2, i)),
        ) else {
            out.append_null();
            continue;
        };
        let answer = if ts1 > ts2 {
            match (te2, te1) {
                (None, _) => None,
                (Some(te2), _) if ts1 < te2 => Some(true),
                (_, None) => None,
                _ => Some(false),
            }
        } else if ts1 < ts2 {
            match (te1, te2) {
                (None, _) => None,
                (Some(te1), _) if ts2 < te1 => Some(true),
                (_, None) => None,
                _ => Some(false),
            }
        } else if te1.is_none() || te2.is_none() {
            None
        } else {
            Some(true)
        };
        out.append_option(answer);
    }
    Ok(Arc::new(out.finish()))
}

/// The fields of `ROW(...)` of these types: f1, f2, ...
fn row_fields(types: &[DataType]) -> datafusion::arrow::datatypes::Fields {
    types
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("f{}", i + 1), t.clone(), true))
        .collect()
}

/// The type of [`ARRAY_ELEMENTS`]' result: a list of the innermost element type.
fn elements_type(t: &DataType) -> DataType {
    match t {
        DataType::List(f) if matches!(f.data_type(), DataType::List(_)) => {
            elements_type(f.data_type())
        }
        other => other.clone(),
    }
}

/// [`ARRAY_ELEMENTS`]: each row's elements in storage order, whatever the array's
/// dimensions; a one-dimensional array (or anything else) as it is.
fn array_elements(a: &ArrayRef) -> DfResult<ArrayRef> {
    let DataType::List(f) = a.data_type() else {
        return Ok(a.clone());
    };
    let DataType::List(inner_field) = f.data_type() else {
        return Ok(a.clone());
    };
    let outer = a.as_list::<i32>();
    let inner = outer.values().as_list::<i32>();
    // row i's sub-arrays are inner[o[i]..o[i + 1]], their elements inner.values()[p[o[i]]..]
    let (o, p) = (outer.value_offsets(), inner.value_offsets());
    let offsets: Vec<i32> = o.iter().map(|&k| p[k as usize]).collect();
    let flat = datafusion::arrow::array::ListArray::try_new(
        inner_field.clone(),
        datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
        inner.values().clone(),
        outer.nulls().cloned(),
    )?;
    array_elements(&(Arc::new(flat) as ArrayRef))
}

/// `trim_array(a, n)`: `a` without its last `n` elements (of the first dimension: a
/// two-dimensional array loses rows), NULL when either is; 2202E when `n` is negative or
/// more than the array holds, as in Postgres.
fn trim_array(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let DataType::List(field) = args[0].data_type() else {
        return match args[0].data_type() {
            DataType::Null => Ok(args[0].clone()),
            other => Err(pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function trim_array({other}, integer) does not exist"),
            )),
        };
    };
    let list = args[0].as_list::<i32>();
    let n = cast(&args[1], &DataType::Int64)?;
    let n = n.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let mut take: Vec<u32> = Vec::new();
    let mut offsets: Vec<i32> = Vec::with_capacity(rows + 1);
    let mut valid: Vec<bool> = Vec::with_capacity(rows);
    offsets.push(0);
    for i in 0..rows {
        if list.is_null(i) || n.is_null(i) {
            valid.push(false);
            offsets.push(take.len() as i32);
            continue;
        }
        let (start, end) = (list.value_offsets()[i], list.value_offsets()[i + 1]);
        let len = i64::from(end - start);
        let cut = n.value(i);
        if !(0..=len).contains(&cut) {
            return Err(pg_error(
                "2202E",
                format!("number of elements to trim must be between 0 and {len}"),
            ));
        }
        take.extend((start..end - cut as i32).map(|k| k as u32));
        valid.push(true);
        offsets.push(take.len() as i32);
    }
    let values = datafusion::arrow::compute::take(
        list.values().as_ref(),
        &datafusion::arrow::array::UInt32Array::from(take),
        None,
    )?;
    Ok(Arc::new(datafusion::arrow::array::ListArray::try_new(
        field.clone(),
        datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
        values,
        Some(valid.into()),
    )?))
}

/// `array_dims(a)`: `[1:2][1:3]`, each dimension's bounds (NULL for an empty array).
fn array_dims(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let list = match args[0].data_type() {
        DataType::Null => return Ok(Arc::new(StringArray::new_null(rows))),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            cast(&args[0], &DataType::LargeList(f.clone()))?
        }
        other => {
            return Err(pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function array_dims({other}) does not exist"),
            ));
        }
    };
    let mut out = StringBuilder::with_capacity(rows, rows * 6);
    for i in 0..rows {
        let mut text = String::new();
        let mut dim = 1;
        while let Some(n) = dim_length(list.as_ref(), i, dim) {
            text.push_str(&format!("[1:{n}]"));
            dim += 1;
        }
        if text.is_empty() {
            out.append_null();
        } else {
            out.append_value(text);
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `make_date(year, month, day)`: a negative year is BC (-1 = 1 BC), year 0 is refused.
fn make_date(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let int = |a: &ArrayRef| -> DfResult<Int64Array> {
        Ok(cast(a, &DataType::Int64)?
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .clone())
    };
    let (y, m, d) = (int(&args[0])?, int(&args[1])?, int(&args[2])?);
    let mut out = Vec::with_capacity(rows);
    for i in 0..rows {
        if y.is_null(i) || m.is_null(i) || d.is_null(i) {
            out.push(None);
            continue;
        }
        let (yv, mv, dv) = (y.value(i), m.value(i), d.value(i));
        let year = if yv < 0 { yv + 1 } else { yv };
        let date = (yv != 0)
            .then(|| {
                NaiveDate::from_ymd_opt(
                    i32::try_from(year).ok()?,
                    u32::try_from(mv).ok()?,
                    u32::try_from(dv).ok()?,
                )
            })
            .flatten()
            .ok_or_else(|| {
                pg_error(
                    sqlstate::DATETIME_FIELD_OVERFLOW,
                    format!("date field value out of range: {yv}-{mv:02}-{dv:02}"),
                )
            })?;
        out.push(Some(date.num_days_from_ce() - 719_163));
    }
    Ok(Arc::new(Date32Array::from(out)))
}

/// Microseconds of `hour:min:sec` (seconds rounded to the microsecond, half to even), as
/// Postgres' `make_time` checks them: 22008 past 24:00:00.
fn time_of_day(h: i64, mi: i64, sec: f64) -> DfResult<i64> {
    let us = (sec * 1e6).round_ties_even();
    let total = (h * 60 + mi) as f64 * 60e6 + us;
    // (a second of 60, and 24:00:00 itself, are allowed, as Postgres allows them)
    if !(0..=24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0.0..=60e6).contains(&us)
        || (h == 24 && (mi > 0 || us > 0.0))
        || total > 86_400e6
    {
        return Err(pg_error(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!("time field value out of range: {h}:{mi:02}:{sec:02}"),
        ));
    }
    Ok(total as i64)
}

/// `make_timestamp(year, month, day, hour, min, sec)`: [`make_date`]'s day (BC for a
/// negative year) at that time.
fn make_timestamp(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    let days = make_date(&args[..3], rows)?;
    let days = days.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
    let int = |a: &ArrayRef| -> DfResult<Int64Array> {
        Ok(cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone())
    };
    let (h, mi) = (int(&args[3])?, int(&args[4])?);
    let sec = cast(&args[5], &DataType::Float64)?;
    let sec = sec.as_primitive::<Float64Type>();
    let mut out = datafusion::arrow::array::TimestampMicrosecondBuilder::with_capacity(rows);
    for i in 0..rows {
        if days.is_null(i) || h.is_null(i) || mi.is_null(i) || sec.is_null(i) {
            out.append_null();
            continue;
        }
        let t = time_of_day(h.value(i), mi.value(i), sec.value(i))?;
        out.append_value(days.value(i) as i64 * 86_400_000_000 + t);
    }
    Ok(Arc::new(out.finish()))
}

/// `make_time(hour, min, sec)`.
fn make_time(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    let int = |a: &ArrayRef| -> DfResult<Int64Array> {
        Ok(cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone())
    };
    let (h, mi) = (int(&args[0])?, int(&args[1])?);
    let sec = cast(&args[2], &DataType::Float64)?;
    let sec = sec.as_primitive::<Float64Type>();
    let mut out = Vec::with_capacity(rows);
    for i in 0..rows {
        if h.is_null(i) || mi.is_null(i) || sec.is_null(i) {
            out.push(None);
            continue;
        }
        out.push(Some(time_of_day(h.value(i), mi.value(i), sec.value(i))?));
    }
    Ok(Arc::new(
        datafusion::arrow::array::Time64MicrosecondArray::from(out),
    ))
}

/// `num_nulls(...)` / `num_nonnulls(...)`: per row, how many arguments are (not) NULL.
fn count_nulls(args: &[ArrayRef], rows: usize, nulls: bool) -> DfResult<ArrayRef> {
    let out: Vec<i32> = (0..rows)
        .map(|i| args.iter().filter(|a| is_null_at(a, i) == nulls).count() as i32)
        .collect();
    Ok(Arc::new(datafusion::arrow::array::Int32Array::from(out)))
}

/// Compiled patterns of one call, by flags and pattern (a column of patterns compiles
/// each distinct one once; finding one allocates nothing).
#[derive(Default)]
struct Patterns(HashMap<String, HashMap<String, regex::Regex>>);

impl Patterns {
    fn get(&mut self, pattern: &str, flags: &str, func: &str) -> DfResult<&regex::Regex> {
        let known = self.0.get(flags).is_some_and(|m| m.contains_key(pattern));
        if !known {
            // `q`: the pattern is a literal string
            let quoted;
            let source = if flags.contains('q') {
                quoted = regex::escape(pattern);
                quoted.as_str()
            } else {
                pattern
            };
            let mut b = regex::RegexBuilder::new(source);
            // Postgres' AREs: `.` and bracket expressions match newlines unless `n`
            b.dot_matches_new_line(true);
            for f in flags.chars() {
                match f {
                    'i' => b.case_insensitive(true),
                    'c' => b.case_insensitive(false),
                    'n' | 'm' => b.dot_matches_new_line(false).multi_line(true),
                    's' => b.dot_matches_new_line(true).multi_line(false),
                    'x' => b.ignore_whitespace(true),
                    'q' => &mut b,
                    'g' if func == "regexp_replace" || func == "regexp_matches" => &mut b,
                    'g' => {
                        return Err(pg_error(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("{func}() does not support the \"global\" option"),
                        ));
                    }
                    other => {
                        return Err(pg_error(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("invalid regular expression option: \"{other}\""),
                        ));
                    }
                };
            }
            let re = b.build().map_err(|e| {
                let text = e.to_string();
                let pg = crate::error::regex_error(&text).unwrap_or_else(|| {
                    crate::error::WeirError::new(
                        sqlstate::INVALID_REGULAR_EXPRESSION,
                        format!("invalid regular expression: {text}"),
                    )
                });
                DataFusionError::External(Box::new(pg))
            })?;
            self.0
                .entry(flags.to_owned())
                .or_default()
                .insert(pattern.to_owned(), re);
        }
        Ok(&self.0[flags][pattern])
    }
}

/// The matches of `re` in `text` from byte `from` on, as Postgres finds them: each search
/// starts where the last match ended, one character later after an empty match, so an
/// empty match right after a match counts (`regexp_replace('aaa', 'a*', 'X', 'g')` is `XX`;
/// the regex crate's own iterators skip such a match).
fn pg_matches<'t>(
    re: &regex::Regex,
    text: &'t str,
    from: usize,
) -> impl Iterator<Item = regex::Captures<'t>> {
    let mut at = from;
    std::iter::from_fn(move || {
        if at > text.len() {
            return None;
        }
        let c = re.captures_at(text, at)?;
        let m = c.get(0)?;
        at = match m.is_empty() {
            true => m.end() + text[m.end()..].chars().next().map_or(1, char::len_utf8),
            false => m.end(),
        };
        Some(c)
    })
}

/// Which of Postgres 15's positional regular expression functions [`regexp_position`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RegexpPosition {
    /// `regexp_count(text, pattern [, start [, flags]])`: how many matches.
    Count,
    /// `regexp_instr(text, pattern [, start [, n [, endoption [, flags [, subexpr]]]]])`:
    /// where the n-th match (or its group `subexpr`) begins, or with `endoption` 1 the
    /// character after it ends; 0 without one.
    Instr,
    /// `regexp_substr(text, pattern [, start [, n [, flags [, subexpr]]]])`: the n-th
    /// match (or its group `subexpr`); NULL without one.
    Substr,
}

/// [`RegexpPosition`]'s functions: `start` counts characters from 1; matches are found as
/// [`pg_matches`] finds them; a NULL argument gives NULL; an out-of-range `start`, `n`,
/// `endoption` or `subexpr` is 22023 naming it, as Postgres.
fn regexp_position(kind: RegexpPosition, args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::{Int32Builder, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;
    let (name, max, flags_pos, n_pos, end_pos, sub_pos) = match kind {
        RegexpPosition::Count => ("regexp_count", 4, 3, None, None, None),
        RegexpPosition::Instr => ("regexp_instr", 7, 5, Some(3), Some(4), Some(6)),
        RegexpPosition::Substr => ("regexp_substr", 6, 4, Some(3), None, Some(5)),
    };
    if !(2..=max).contains(&args.len()) {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function {name} does not take {} arguments", args.len()),
        ));
    }
    let (s, p) = (strings(&args[0])?, strings(&args[1])?);
    let int = |at: Option<usize>| -> DfResult<Option<Int64Array>> {
        match at.and_then(|k| args.get(k)) {
            Some(a) => Ok(Some(
                cast(a, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            )),
            None => Ok(None),
        }
    };
    let (start, n, end, sub) = (int(Some(2))?, int(n_pos)?, int(end_pos)?, int(sub_pos)?);
    let flags = flags_at(args, flags_pos)?;
    let mut pats = Patterns::default();
    let mut ints = Int32Builder::with_capacity(rows);
    let mut texts = StringBuilder::new();
    for i in 0..rows {
        let arg = |a: &Option<Int64Array>, default: i64| match a {
            Some(a) if a.is_null(i) => None,
            Some(a) => Some(a.value(i)),
            None => Some(default),
        };
        let f = match &flags {
            Some(f) if f.is_null(i) => None,
            Some(f) => Some(f.value(i)),
            None => Some(""),
        };
        let vals = (arg(&start, 1), arg(&n, 1), arg(&end, 0), arg(&sub, 0));
        let (Some(start), Some(n), Some(end), Some(sub), Some(f), false, false) = (
            vals.0,
            vals.1,
            vals.2,
            vals.3,
            f,
            s.is_null(i),
            p.is_null(i),
        ) else {
            match kind {
                RegexpPosition::Substr => texts.append_null(),
                _ => ints.append_null(),
            }
            continue;
        };
        for (what, v, ok) in [
            ("start", start, start >= 1),
            ("n", n, n >= 1),
            ("endoption", end, end == 0 || end == 1),
            ("subexpr", sub, sub >= 0),
        ] {
            if !ok {
                return Err(pg_error(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"{what}\": {v}"),
                ));
            }
        }
        let re = pats.get(p.value(i), f, name)?;
        let text = s.value(i);
        // the byte where character `start` begins (past the end: no match)
        let from = usize::try_from(start - 1)
            .ok()
            .and_then(|k| {
                text.char_indices()
                    .map(|(b, _)| b)
                    .chain([text.len()])
                    .nth(k)
            })
            .unwrap_or(text.len() + 1);
        let mut found = pg_matches(re, text, from);
        if kind == RegexpPosition::Count {
            ints.append_value(i32::try_from(found.count()).unwrap_or(i32::MAX));
            continue;
        }
        let group = usize::try_from(n - 1)
            .ok()
            .and_then(|k| found.nth(k))
            .and_then(|c| c.get(usize::try_from(sub).ok()?));
        match kind {
            RegexpPosition::Substr => texts.append_option(group.map(|m| m.as_str())),
            _ => {
                let at = group.map_or(0, |m| {
                    let b = if end == 1 { m.end() } else { m.start() };
                    text[..b].chars().count() + 1
                });
                ints.append_value(i32::try_from(at).unwrap_or(i32::MAX));
            }
        }
    }
    Ok(match kind {
        RegexpPosition::Substr => Arc::new(texts.finish()),
        _ => Arc::new(ints.finish()),
    })
}

/// Optional trailing flags argument: `Some(None)` = NULL flags (the result is NULL).
fn flags_at(args: &[ArrayRef], at: usize) -> DfResult<Option<StringArray>> {
    args.get(at).map(strings).transpose()
}

/// Each row of a `(text, pattern [, flags])` call: `row(Some((regex, text, flags)))`, or
/// `row(None)` where the text, pattern or flags are NULL (the result is NULL there).
fn each_regex_row(
    func: &str,
    args: &[ArrayRef],
    rows: usize,
    mut row: impl FnMut(Option<(&regex::Regex, &str, &str)>) -> DfResult<()>,
) -> DfResult<()> {
    if !(2..=3).contains(&args.len()) {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function {func} takes (text, pattern [, flags])"),
        ));
    }
    let (s, p) = (strings(&args[0])?, strings(&args[1])?);
    let flags = flags_at(args, 2)?;
    let mut pats = Patterns::default();
    for i in 0..rows {
        let f = match &flags {
            Some(f) if f.is_null(i) => None,
            Some(f) => Some(f.value(i)),
            None => Some(""),
        };
        let (Some(f), false, false) = (f, s.is_null(i), p.is_null(i)) else {
            row(None)?;
            continue;
        };
        row(Some((pats.get(p.value(i), f, func)?, s.value(i), f)))?;
    }
    Ok(())
}

fn regexp_match(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let mut out = ListBuilder::new(StringBuilder::new());
    each_regex_row("regexp_match", args, rows, |r| {
        let Some((re, text, _)) = r else {
            out.append_null();
            return Ok(());
        };
        match re.captures(text) {
            None => out.append_null(),
            Some(c) if c.len() == 1 => {
                out.values().append_option(c.get(0).map(|m| m.as_str()));
                out.append(true);
            }
            Some(c) => {
                for g in c.iter().skip(1) {
                    out.values().append_option(g.map(|m| m.as_str()));
                }
                out.append(true);
            }
        }
        Ok(())
    })?;
    Ok(Arc::new(out.finish()))
}

/// [`REGEXP_MATCHES`]: per row, its matches (all with `g`, else the first), each the
/// list of its groups (or of the whole match when the pattern has none).
fn regexp_matches(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let mut out = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    each_regex_row("regexp_matches", args, rows, |r| {
        let Some((re, text, flags)) = r else {
            out.append_null();
            return Ok(());
        };
        let global = flags.contains('g');
        for c in pg_matches(re, text, 0) {
            let groups = out.values();
            if c.len() == 1 {
                groups.values().append_option(c.get(0).map(|m| m.as_str()));
            } else {
                for g in c.iter().skip(1) {
                    groups.values().append_option(g.map(|m| m.as_str()));
                }
            }
            groups.append(true);
            if !global {
                break;
            }
        }
        out.append(true);
        Ok(())
    })?;
    Ok(Arc::new(out.finish()))
}

/// `format(template, args...)` as Postgres': `%s` an argument's text (NULL as nothing),
/// `%I` an identifier (`quote_ident`; NULL is 22004), `%L` a literal (`quote_literal`;
/// NULL as `NULL`), `%%`; an argument position `%2$s`, `-` and a width (`%-10s`, `%*s`).
fn format(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    use crate::sql::pg_text::{quote_ident, quote_literal};
    let Some((template, rest)) = args.split_first() else {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            "function format() does not exist",
        ));
    };
    let template = strings(template)?;
    let values = rest
        .iter()
        .map(text_values)
        .collect::<DfResult<Vec<StringArray>>>()?;
    let bad = |msg: String| pg_error(sqlstate::INVALID_PARAMETER_VALUE, msg);
    let bad_specifier = |msg: String| {
        DataFusionError::External(Box::new(
            WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, msg)
                .with_hint("For a single \"%\" use \"%%\"."),
        ))
    };
    let mut out = StringBuilder::new();
    for row in 0..rows {
        if template.is_null(row) {
            out.append_null();
            continue;
        }
        let t = template.value(row);
        let mut s = String::with_capacity(t.len() + 16);
        let mut chars = t.chars().peekable();
        let mut next_arg = 0usize;
        while let Some(c) = chars.next() {
            if c != '%' {
                s.push(c);
                continue;
            }
            if chars.peek() == Some(&'%') {
                chars.next();
                s.push('%');
                continue;
            }
            // [position$][-][width | *][type]
            let digits = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
                let mut n: Option<usize> = None;
                while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                    chars.next();
                    n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                }
                n
            };
            let mut position = None;
            let mut left = false;
            let mut width = digits(&mut chars);
            if width.is_some() && chars.peek() == Some(&'$') {
                chars.next();
                position = width.take();
            }
            if chars.peek() == Some(&'-') {
                chars.next();
                left = true;
            }
            let arg = |i: usize| -> DfResult<Option<&str>> {
                let a = values
                    .get(i)
                    .ok_or_else(|| bad("too few arguments for format()".into()))?;
                Ok((!a.is_null(row)).then(|| a.value(row)))
            };
            if width.is_none() {
                if chars.peek() == Some(&'*') {
                    chars.next();
                    let w: i64 = arg(next_arg)?.unwrap_or("0").trim().parse().map_err(|_| {
                        bad("the width argument of format() must be an integer".into())
                    })?;
                    next_arg += 1;
                    left |= w < 0;
                    width = Some(w.unsigned_abs() as usize);
                } else {
                    width = digits(&mut chars);
                }
            }
            let Some(kind) = chars.next() else {
                return Err(bad_specifier("unterminated format() type specifier".into()));
            };
            let index = match position {
                Some(0) => {
                    return Err(bad(
                        "format specifies argument 0, but arguments are numbered from 1".into(),
                    ));
                }
                Some(p) => p - 1,
                None => next_arg,
            };
            next_arg = index + 1;
            let v = arg(index)?;
            let text = match kind {
                's' => v.unwrap_or("").to_owned(),
                'I' => quote_ident(v.ok_or_else(|| {
                    pg_error(
                        "22004",
                        "null values cannot be formatted as an SQL identifier",
                    )
                })?),
                'L' => v.map_or_else(|| "NULL".to_owned(), quote_literal),
                other => {
                    return Err(bad_specifier(format!(
                        "unrecognized format() type specifier \"{other}\""
                    )));
                }
            };
            let pad = width.unwrap_or(0).saturating_sub(text.chars().count());
            if left {
                s.push_str(&text);
                s.extend(std::iter::repeat_n(' ', pad));
            } else {
                s.extend(std::iter::repeat_n(' ', pad));
                s.push_str(&text);
            }
        }
        out.append_value(s);
    }
    Ok(Arc::new(out.finish()))
}

/// `quote_literal(x)`: `x` by its output function as a string literal (quotes doubled, and
/// backslashes, with an `E` prefix, when it has one); NULL is NULL, or the text `NULL` for
/// `quote_nullable`.
fn quote_literal(a: &ArrayRef, nullable: bool) -> DfResult<ArrayRef> {
    // (a boolean's text is `true`, its cast to text, not its output `t`)
    let texts = match a.data_type() {
        DataType::Boolean => cast(a, &DataType::Utf8)?.as_string::<i32>().clone(),
        _ => text_values(a)?,
    };
    let mut out = StringBuilder::new();
    for v in texts.iter() {
        match v {
            None if nullable => out.append_value("NULL"),
            None => out.append_null(),
            Some(t) => out.append_value(crate::sql::pg_text::quote_literal(t)),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// [`TIME_ROUND`]: each value's microseconds rounded to a multiple of 10^(6 - p).
fn time_round(x: &ArrayRef, p: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::datatypes::Int64Type;
    let p = cast(p, &DataType::Int64)?;
    let p = p.as_primitive::<Int64Type>();
    let digits = match p.iter().flatten().next() {
        None => return Ok(x.clone()),
        Some(d) if d < 0 => {
            return Err(pg_error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("TIMESTAMP({d}) precision must not be negative"),
            ));
        }
        Some(d) => d.min(6) as u8,
    };
    Ok(round_fractional_seconds(x, digits).unwrap_or_else(|| x.clone()))
}

/// Times and timestamps rounded to `digits` fractional digits of a second, half away from
/// zero, keeping the array's type and zone; the infinities (the extremes) stay. What a
/// cast to `timestamp(p)` / `time(p)` does ([`TIME_ROUND`]) and what a column of such a
/// type stores (`state::table`). `None`: not a time or timestamp, or all six digits kept.
pub fn round_fractional_seconds(x: &ArrayRef, digits: u8) -> Option<ArrayRef> {
    use datafusion::arrow::datatypes::{
        Time64MicrosecondType, Time64NanosecondType, TimestampMicrosecondType,
        TimestampNanosecondType,
    };
    if digits >= 6 {
        return None;
    }
    // (in the values' own unit: microseconds, or nanoseconds)
    let ns = matches!(
        x.data_type(),
        DataType::Time64(TimeUnit::Nanosecond) | DataType::Timestamp(TimeUnit::Nanosecond, _)
    );
    let unit = 10i64.pow(6 - digits as u32) * if ns { 1000 } else { 1 };
    let round = |v: i64| {
        if v == i64::MAX || v == i64::MIN {
            v
        } else if v >= 0 {
            v.saturating_add(unit / 2) / unit * unit
        } else {
            -((-v).saturating_add(unit / 2) / unit * unit)
        }
    };
    Some(match x.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, tz) => Arc::new(
            x.as_primitive::<TimestampMicrosecondType>()
                .unary::<_, TimestampMicrosecondType>(round)
                .with_timezone_opt(tz.clone()),
        ),
        DataType::Timestamp(TimeUnit::Nanosecond, tz) => Arc::new(
            x.as_primitive::<TimestampNanosecondType>()
                .unary::<_, TimestampNanosecondType>(round)
                .with_timezone_opt(tz.clone()),
        ),
        DataType::Time64(TimeUnit::Microsecond) => Arc::new(
            x.as_primitive::<Time64MicrosecondType>()
                .unary::<_, Time64MicrosecondType>(round),
        ),
        DataType::Time64(TimeUnit::Nanosecond) => Arc::new(
            x.as_primitive::<Time64NanosecondType>()
                .unary::<_, Time64NanosecondType>(round),
        ),
        // an array's elements (`timestamp(0)[]`)
        DataType::List(field) => {
            let list = x.as_list::<i32>();
            let values = round_fractional_seconds(list.values(), digits)?;
            Arc::new(datafusion::arrow::array::ListArray::new(
                field.clone(),
                list.offsets().clone(),
                values,
                list.nulls().cloned(),
            ))
        }
        _ => return None,
    })
}

/// [`ARRAY_SORT_KEY`]: the arrays' rows in arrow's row format with NULL elements last.
fn array_sort_key(a: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::row::{RowConverter, SortField};
    let conv = RowConverter::new(vec![SortField::new_with_options(
        a.data_type().clone(),
        SortOptions {
            descending: false,
            nulls_first: false,
        },
    )])?;
    let rows = conv.convert_columns(std::slice::from_ref(a))?;
    let mut out = datafusion::arrow::array::BinaryBuilder::with_capacity(a.len(), a.len() * 16);
    for i in 0..a.len() {
        match a.is_valid(i) {
            true => out.append_value(rows.row(i).as_ref()),
            false => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// [`ARRAY_REMOVE_NULLS`]: every list without its NULL elements, in one pass over the
/// values (one filter, new offsets).
fn array_without_nulls(a: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::{BooleanArray, ListArray};
    use datafusion::arrow::buffer::OffsetBuffer;
    let DataType::List(field) = a.data_type() else {
        return Ok(a.clone());
    };
    let list = a.as_list::<i32>();
    let values = list.values();
    let keep: BooleanArray = (0..values.len())
        .map(|i| Some(values.is_valid(i)))
        .collect();
    let kept = datafusion::arrow::compute::filter(values, &keep)?;
    let mut offsets = Vec::with_capacity(list.len() + 1);
    offsets.push(0i32);
    let mut total = 0i32;
    for w in list.value_offsets().windows(2) {
        let (from, to) = (w[0] as usize, w[1] as usize);
        total += (from..to).filter(|&j| values.is_valid(j)).count() as i32;
        offsets.push(total);
    }
    // (values outside every list, before the first offset, are not kept by any row)
    let first = list.value_offsets().first().copied().unwrap_or(0) as usize;
    let skipped = (0..first).filter(|&j| values.is_valid(j)).count();
    let kept = kept.slice(skipped, total as usize);
    Ok(Arc::new(ListArray::try_new(
        field.clone(),
        OffsetBuffer::new(offsets.into()),
        kept,
        list.nulls().cloned(),
    )?))
}

/// `regexp_split_to_array(text, pattern [, flags])`: the text between the pattern's
/// matches; a match of nothing splits between characters, as Postgres (an empty match at
/// the start or end, or right after a match, splits nothing).
fn regexp_split(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let mut out = ListBuilder::new(StringBuilder::new());
    each_regex_row("regexp_split_to_array", args, rows, |r| {
        let Some((re, text, _)) = r else {
            out.append_null();
            return Ok(());
        };
        let mut start = 0;
        for m in re.find_iter(text) {
            // an empty match splits only between two characters it is not right after
            if m.start() == m.end()
                && (m.start() == 0 || m.start() >= text.len() || m.start() == start)
            {
                continue;
            }
            out.values().append_value(&text[start..m.start()]);
            start = m.end();
        }
        out.values().append_value(&text[start..]);
        out.append(true);
        Ok(())
    })?;
    Ok(Arc::new(out.finish()))
}

/// [`SUBSTRING_REGEX`]: the part of the text the pattern matches first, or its first
/// parenthesized group when it has one; NULL without a match.
fn substring_regex(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let (s, p) = (strings(&args[0])?, strings(&args[1])?);
    let mut pats = Patterns::default();
    let mut out = StringBuilder::new();
    for i in 0..rows {
        if s.is_null(i) || p.is_null(i) {
            out.append_null();
            continue;
        }
        let re = pats.get(p.value(i), "", "substring")?;
        let found = re
            .captures(s.value(i))
            .and_then(|c| if c.len() > 1 { c.get(1) } else { c.get(0) });
        out.append_option(found.map(|m| m.as_str()));
    }
    Ok(Arc::new(out.finish()))
}

/// Postgres' replacement text: `\1`..`\9` a group, `\&` the whole match, `\\` a backslash.
fn expand_replacement(rep: &str, c: &regex::Captures<'_>, out: &mut String) {
    let mut chars = rep.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match chars.peek().copied() {
            Some(d @ '1'..='9') => {
                chars.next();
                let g = d as usize - '0' as usize;
                if let Some(m) = c.get(g) {
                    out.push_str(m.as_str());
                }
            }
            Some('&') => {
                chars.next();
                if let Some(m) = c.get(0) {
                    out.push_str(m.as_str());
                }
            }
            Some('\\') => {
                chars.next();
                out.push('\\');
            }
            _ => out.push('\\'),
        }
    }
}

fn regexp_replace(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    if !(3..=4).contains(&args.len()) {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            "function regexp_replace takes (text, pattern, replacement [, flags])",
        ));
    }
    let (s, p, r) = (strings(&args[0])?, strings(&args[1])?, strings(&args[2])?);
    let flags = flags_at(args, 3)?;
    let mut pats = Patterns::default();
    let mut out = StringBuilder::new();
    let mut buf = String::new();
    for i in 0..rows {
        let f = match &flags {
            Some(f) if f.is_null(i) => None,
            Some(f) => Some(f.value(i)),
            None => Some(""),
        };
        let (Some(f), false, false, false) = (f, s.is_null(i), p.is_null(i), r.is_null(i)) else {
            out.append_null();
            continue;
        };
        let global = f.contains('g');
        let re = pats.get(p.value(i), f, "regexp_replace")?;
        let text = s.value(i);
        buf.clear();
        let mut last = 0;
        for c in pg_matches(re, text, 0) {
            let Some(m) = c.get(0) else { break };
            buf.push_str(&text[last..m.start()]);
            expand_replacement(r.value(i), &c, &mut buf);
            last = m.end();
            if !global {
                break;
            }
        }
        buf.push_str(&text[last..]);
        out.append_value(&buf);
    }
    Ok(Arc::new(out.finish()))
}

/// `concat(...)` (no separator) or `concat_ws(sep, ...)`: NULL arguments are skipped;
/// `concat_ws` with a NULL separator is NULL.
fn concat(sep: Option<&StringArray>, args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let texts = args.iter().map(text_values).collect::<DfResult<Vec<_>>>()?;
    let mut out = StringBuilder::new();
    let mut buf = String::new();
    for i in 0..rows {
        if sep.is_some_and(|s| s.is_null(i)) {
            out.append_null();
            continue;
        }
        buf.clear();
        let mut first = true;
        for t in &texts {
            if t.is_null(i) {
                continue;
            }
            if !first && let Some(s) = sep {
                buf.push_str(s.value(i));
            }
            first = false;
            buf.push_str(t.value(i));
        }
        out.append_value(&buf);
    }
    Ok(Arc::new(out.finish()))
}

/// `parse_ident(text [, strict])`: a qualified identifier split into its names; quoted names
/// keep their case (`""` is a quote), unquoted ones are lower-cased.
fn parse_ident(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let Some(first) = args.first() else {
        return Err(pg_error(
            sqlstate::UNDEFINED_FUNCTION,
            "function parse_ident() does not exist",
        ));
    };
    let s = strings(first)?;
    let strict = match args.get(1) {
        Some(a) => Some(cast(a, &DataType::Boolean)?.as_boolean().clone()),
        None => None,
    };
    let mut out = ListBuilder::new(StringBuilder::new());
    for i in 0..rows {
        if s.is_null(i) || strict.as_ref().is_some_and(|b| b.is_null(i)) {
            out.append_null();
            continue;
        }
        let strict = strict.as_ref().is_none_or(|b| b.value(i));
        for name in split_ident(s.value(i), strict)? {
            out.values().append_value(name);
        }
        out.append(true);
    }
    Ok(Arc::new(out.finish()))
}

fn split_ident(text: &str, strict: bool) -> DfResult<Vec<String>> {
    let bad = |detail: &str| {
        pg_error(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("string is not a valid identifier: \"{text}\"{detail}"),
        )
    };
    let mut names = Vec::new();
    let mut chars = text.trim_start().chars().peekable();
    loop {
        let mut name = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    Some('"') => break,
                    Some(c) => name.push(c),
                    None => return Err(bad("")),
                }
            }
            if name.is_empty() {
                return Err(bad(""));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_alphanumeric() || c == '_' || c == '$' {
                    name.push(c.to_ascii_lowercase());
                    chars.next();
                } else {
                    break;
                }
            }
            if name.is_empty() {
                return Err(bad(""));
            }
        }
        names.push(name);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            Some('.') => {
                chars.next();
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            None => break,
            Some(_) if strict => return Err(bad("")),
            Some(_) => break,
        }
    }
    Ok(names)
}

/// Text read as a date or timestamp of type `target` as a cast reads it (Postgres' forms:
/// `sql::datetime_in`); `keep_zone`: a `timestamptz` (a zone in the text shifts it). Each
/// wall-clock time without a zone is taken as UTC (`time_zone::read_in_zone` moves it).
pub(crate) fn timestamp_in(
    text: &ArrayRef,
    target: &DataType,
    keep_zone: bool,
) -> DfResult<ArrayRef> {
    let normalized = crate::sql::datetime_in::normalize_array(
        text,
        keep_zone,
        matches!(target, DataType::Date32),
    );
    // text that is no date is an error, not NULL (as the cast this function stands for)
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let parsed = match datafusion::arrow::compute::cast_with_options(&normalized, target, &strict) {
        Ok(p) => p,
        // the text as written names the value (the normalized text is ours)
        Err(e) => {
            let lenient = cast(&normalized, target)?;
            let Some(row) = (0..text.len()).find(|&i| normalized.is_valid(i) && lenient.is_null(i))
            else {
                return Err(e.into());
            };
            let name = crate::sql::types::SqlType::from_arrow(target)
                .map(|t| t.input_name())
                .unwrap_or_else(|| "timestamp".into());
            let written = text.as_string::<i32>();
            return Err(DataFusionError::External(Box::new(
                crate::error::invalid_input(&name, written.value(row)),
            )));
        }
    };
    Ok(crate::sql::datetime_in::with_infinities(
        text.as_ref(),
        parsed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_as_postgres() {
        assert_eq!(
            split_ident("a.b", true).ok(),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            split_ident("\"SomeSchema\".someTable", true).ok(),
            Some(vec!["SomeSchema".into(), "sometable".into()])
        );
        assert!(split_ident("a.b c", true).is_err());
        assert_eq!(
            split_ident("a.b c", false).ok(),
            Some(vec!["a".into(), "b".into()])
        );
        assert!(split_ident("a.", true).is_err());
    }
}
