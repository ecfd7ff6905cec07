//! Postgres' text output of values (its types' output functions): floats shortest-exact
//! with `e+NN` past 15 digits, numerics at their scale, `\\x` bytea, dates and timestamps
//! with ` BC`, intervals as `1 year 2 mons 3 days 04:05:06`, array elements quoted as
//! Postgres quotes them. The wire encoder and the Postgres-semantics functions both use it.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone as _, Utc};

/// One field of a record's text (Postgres' record_out): quoted when empty or holding one
/// of `"\(),` or a space; inside quotes `"` and `\` are doubled.
fn record_field_text(buf: &mut BytesMut, v: &[u8]) {
    let quote = v.is_empty()
        || v.iter()
            .any(|c| matches!(c, b'(' | b')' | b',' | b'"' | b'\\') || c.is_ascii_whitespace());
    put_maybe_quoted(buf, v, quote, true);
}

/// An array element in text form, quoted when Postgres would quote it (inside quotes `"`
/// and `\` get a backslash).
pub fn array_elem_text(buf: &mut BytesMut, v: &[u8]) {
    let quote = v.is_empty()
        || v.eq_ignore_ascii_case(b"null")
        || v.iter()
            .any(|c| matches!(c, b'{' | b'}' | b',' | b'"' | b'\\' | b' ' | b'\t' | b'\n'));
    put_maybe_quoted(buf, v, quote, false);
}

/// `v`, or `v` in double quotes with each `"` and `\` doubled (`double`) or preceded by
/// a backslash.
fn put_maybe_quoted(buf: &mut BytesMut, v: &[u8], quote: bool, double: bool) {
    if !quote {
        buf.put_slice(v);
        return;
    }
    buf.put_u8(b'"');
    for &c in v {
        if c == b'"' || c == b'\\' {
            buf.put_u8(if double { c } else { b'\\' });
        }
        buf.put_u8(c);
    }
    buf.put_u8(b'"');
}

pub struct Writer<'a>(pub &'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

/// Postgres' float output: shortest exact digits; exponent form below 1e-4 or from 1e`limit`.
pub fn float_text(b: &mut BytesMut, v: f64, as_f32: Option<f32>, limit: i32) {
    if v.is_nan() {
        b.put_slice(b"NaN");
        return;
    }
    if v.is_infinite() {
        b.put_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
        return;
    }
    if v == 0.0 {
        b.put_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    // shortest round-trip digits from Rust's formatter, as "d.ddde[-]x"
    let s = match as_f32 {
        Some(f) => format!("{f:e}"),
        None => format!("{v:e}"),
    };
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if negative {
        b.put_u8(b'-');
    }
    if exp < -4 || exp >= limit {
        b.put_slice(&digits.as_bytes()[..1]);
        if digits.len() > 1 {
            b.put_u8(b'.');
            b.put_slice(&digits.as_bytes()[1..]);
        }
        let _ = write!(
            Writer(b),
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        );
    } else if exp < 0 {
        b.put_slice(b"0.");
        for _ in 0..(-exp - 1) {
            b.put_u8(b'0');
        }
        b.put_slice(digits.as_bytes());
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            b.put_slice(digits.as_bytes());
            for _ in digits.len()..int_len {
                b.put_u8(b'0');
            }
        } else {
            b.put_slice(&digits.as_bytes()[..int_len]);
            b.put_u8(b'.');
            b.put_slice(&digits.as_bytes()[int_len..]);
        }
    }
}

pub fn decimal_text(v: i128, scale: i8, trim: bool) -> String {
    let negative = v < 0;
    let mut digits = v.unsigned_abs().to_string();
    if scale < 0 && v != 0 {
        // a negative scale counts zeros left of the point: 1 at scale -6 is 1000000
        digits.push_str(&"0".repeat(scale.unsigned_abs() as usize));
    }
    let scale = scale.max(0) as usize;
    if digits.len() <= scale {
        digits = format!("{}{}", "0".repeat(scale - digits.len() + 1), digits);
    }
    let (int, frac) = digits.split_at(digits.len() - scale);
    let frac = if trim {
        frac.trim_end_matches('0')
    } else {
        frac
    };
    let mut out = String::with_capacity(digits.len() + 2);
    if negative {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

pub fn bytea_text(b: &mut BytesMut, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    b.put_slice(b"\\x");
    for byte in v {
        b.put_u8(HEX[(byte >> 4) as usize]);
        b.put_u8(HEX[(byte & 15) as usize]);
    }
}

pub fn date_text(b: &mut BytesMut, days: i32) {
    match days
        .checked_add(719_163)
        .and_then(NaiveDate::from_num_days_from_ce_opt)
    {
        Some(d) => write_date(b, d),
        None => b.put_slice(if days > 0 { b"infinity" } else { b"-infinity" }),
    }
}

pub fn write_date(b: &mut BytesMut, d: NaiveDate) {
    use chrono::Datelike;
    let (bc, year) = if d.year() <= 0 {
        (true, 1 - d.year())
    } else {
        (false, d.year())
    };
    let _ = write!(Writer(b), "{:04}-{:02}-{:02}", year, d.month(), d.day());
    if bc {
        b.put_slice(b" BC");
    }
}

pub fn write_fraction(b: &mut BytesMut, micros: u32) {
    if micros > 0 {
        let s = format!("{micros:06}");
        b.put_u8(b'.');
        b.put_slice(s.trim_end_matches('0').as_bytes());
    }
}

pub fn time_text(b: &mut BytesMut, us: i64) {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000) as u32;
    let _ = write!(
        Writer(b),
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    );
    write_fraction(b, frac);
}

/// A timestamp's text; `zone`: a `timestamptz` shown in that zone (its wall-clock time and
/// offset, `2024-03-10 08:00:00-04`), else a `timestamp`.
pub fn timestamp_text(b: &mut BytesMut, us: i64, zone: Option<&crate::sql::time_zone::Zone>) {
    let offset = match zone {
        Some(z) if !z.is_utc() && us != i64::MAX && us != i64::MIN => Some(z.offset_at_us(us)),
        Some(_) => Some(0),
        None => None,
    };
    let us = match offset {
        Some(o) if o != 0 => us.saturating_add(o * 1_000_000),
        _ => us,
    };
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000) as u32;
    let Some(dt) = DateTime::<Utc>::from_timestamp(secs, 0) else {
        b.put_slice(if us > 0 { b"infinity" } else { b"-infinity" });
        return;
    };
    let naive: NaiveDateTime = Utc.from_utc_datetime(&dt.naive_utc()).naive_utc();
    let d = naive.date();
    let bc = {
        use chrono::Datelike;
        d.year() <= 0
    };
    {
        use chrono::{Datelike, Timelike};
        let year = if bc { 1 - d.year() } else { d.year() };
        let _ = write!(
            Writer(b),
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            year,
            d.month(),
            d.day(),
            naive.hour(),
            naive.minute(),
            naive.second()
        );
    }
    write_fraction(b, frac);
    if let Some(east) = offset {
        write_offset(b, east);
    }
    if bc {
        b.put_slice(b" BC");
    }
}

/// An offset east of UTC as Postgres writes it after a time: `+00`, `-05:30`, `+05:30:15`.
pub fn write_offset(b: &mut BytesMut, east: i64) {
    let a = east.unsigned_abs();
    let _ = write!(
        Writer(b),
        "{}{:02}",
        if east < 0 { '-' } else { '+' },
        a / 3600
    );
    if !a.is_multiple_of(3600) {
        let _ = write!(Writer(b), ":{:02}", a / 60 % 60);
        if !a.is_multiple_of(60) {
            let _ = write!(Writer(b), ":{:02}", a % 60);
        }
    }
}

/// Postgres' default (`IntervalStyle = postgres`) interval output.
pub fn interval_text_string(months: i32, days: i32, micros: i64) -> String {
    let mut b = BytesMut::new();
    interval_text(&mut b, months, days, micros);
    String::from_utf8_lossy(&b).into_owned()
}

pub fn interval_text(b: &mut BytesMut, months: i32, days: i32, micros: i64) {
    let mut t = String::new();
    // as Postgres' `EncodeInterval`: a field after a negative one shows its `+`
    let mut before_negative = false;
    for (value, unit) in [(months / 12, "year"), (months % 12, "mon"), (days, "day")] {
        if value == 0 {
            continue;
        }
        if !t.is_empty() {
            t.push(' ');
        }
        if before_negative && value > 0 {
            t.push('+');
        }
        // (`-1 mons`: Postgres' singular is for 1 only)
        let _ = write!(t, "{value} {unit}{}", if value == 1 { "" } else { "s" });
        before_negative = value < 0;
    }
    if micros != 0 || t.is_empty() {
        if !t.is_empty() {
            t.push(' ');
        }
        if micros < 0 {
            t.push('-');
        } else if before_negative {
            t.push('+');
        }
        let m = micros.unsigned_abs();
        let secs = m / 1_000_000;
        let frac = (m % 1_000_000) as u32;
        let _ = write!(
            t,
            "{:02}:{:02}:{:02}",
            secs / 3600,
            (secs / 60) % 60,
            secs % 60
        );
        if frac > 0 {
            let s = format!("{frac:06}");
            t.push('.');
            t.push_str(s.trim_end_matches('0'));
        }
    }
    b.put_slice(t.as_bytes());
}

/// One row of some columns as Postgres writes a row's values in an error's detail
/// ("Failing row contains (1, abc, null).", "Key (a, b)=(1, 2)"): each value's text, `null`
/// for NULL, joined by `, `.
pub fn row_values_text(cols: &[datafusion::arrow::array::ArrayRef], row: usize) -> String {
    use datafusion::arrow::array::Array;
    cols.iter()
        .map(|c| {
            let one = c.slice(row, 1);
            match text_values(&one) {
                Ok(t) if t.is_valid(0) => t.value(0).to_owned(),
                _ => "null".to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each value of a column in Postgres' text form (its output function), NULL for NULL:
/// what `concat`, `format`-like functions and a cast of an array to text show
/// (`timestamptz` in UTC: see [`text_values_in`]).
pub fn text_values(
    col: &datafusion::arrow::array::ArrayRef,
) -> datafusion::common::Result<datafusion::arrow::array::StringArray> {
    text_values_in(col, &crate::sql::time_zone::Zone::utc())
}

/// [`text_values`] with `timestamptz` values shown in `zone` (the session's TimeZone).
pub fn text_values_in(
    col: &datafusion::arrow::array::ArrayRef,
    zone: &crate::sql::time_zone::Zone,
) -> datafusion::common::Result<datafusion::arrow::array::StringArray> {
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{
        DataType, Date32Type, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit,
        Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
    };
    let n = col.len();
    // one buffer for the column: each value's text is appended straight to the array
    let each = |f: &mut dyn FnMut(usize, &mut BytesMut)| -> StringArray {
        let mut b = BytesMut::new();
        let mut out = datafusion::arrow::array::StringBuilder::with_capacity(n, n * 8);
        for i in 0..n {
            if col.is_null(i) {
                out.append_null();
                continue;
            }
            b.clear();
            f(i, &mut b);
            out.append_value(String::from_utf8_lossy(&b));
        }
        out.finish()
    };
    Ok(match col.data_type() {
        DataType::Null => StringArray::new_null(n),
        DataType::Boolean => {
            let a = col.as_boolean();
            each(&mut |i, b| b.put_slice(if a.value(i) { b"t" } else { b"f" }))
        }
        DataType::Float32 => {
            let a = col.as_primitive::<Float32Type>();
            each(&mut |i, b| float_text(b, a.value(i) as f64, Some(a.value(i)), 6))
        }
        DataType::Float64 => {
            let a = col.as_primitive::<Float64Type>();
            each(&mut |i, b| float_text(b, a.value(i), None, 15))
        }
        DataType::Decimal128(_, scale) => {
            let a = col.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>();
            let scale = *scale;
            // an unconstrained numeric without trailing zeros, as it is shown
            let trim = crate::sql::types::SqlType::from_arrow(col.data_type())
                == Some(crate::sql::types::SqlType::Numeric(None));
            each(&mut |i, b| b.put_slice(decimal_text(a.value(i), scale, trim).as_bytes()))
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let c = cast(col, &DataType::Binary)?;
            let a = c.as_binary::<i32>();
            each(&mut |i, b| bytea_text(b, a.value(i)))
        }
        DataType::Date32 | DataType::Date64 => {
            let c = cast(col, &DataType::Date32)?;
            let a = c.as_primitive::<Date32Type>();
            each(&mut |i, b| date_text(b, a.value(i)))
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let c = cast(col, &DataType::Time64(TimeUnit::Microsecond))?;
            let a = c.as_primitive::<Time64MicrosecondType>();
            each(&mut |i, b| time_text(b, a.value(i)))
        }
        DataType::Timestamp(_, tz) => {
            let zone = tz.is_some().then_some(zone);
            let c = cast(col, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let a = c.as_primitive::<TimestampMicrosecondType>();
            each(&mut |i, b| timestamp_text(b, a.value(i), zone))
        }
        DataType::Interval(_) => {
            let c = cast(col, &DataType::Interval(IntervalUnit::MonthDayNano))?;
            let a = c.as_primitive::<IntervalMonthDayNanoType>();
            each(&mut |i, b| {
                let v = a.value(i);
                interval_text(b, v.months, v.days, v.nanoseconds / 1000)
            })
        }
        // a record (`ROW(...)`, a whole-row reference) as Postgres' record_out: `(1,a)`,
        // a NULL field empty, a field quoted when it is empty or holds one of `"\(),` or
        // a space (`"` and `\` doubled inside)
        DataType::Struct(_) => {
            let s = col.as_struct();
            let fields: Vec<StringArray> = s
                .columns()
                .iter()
                .map(|c| text_values_in(c, zone))
                .collect::<datafusion::common::Result<_>>()?;
            each(&mut |i, b| {
                b.put_u8(b'(');
                for (k, f) in fields.iter().enumerate() {
                    if k > 0 {
                        b.put_u8(b',');
                    }
                    if f.is_valid(i) {
                        record_field_text(b, f.value(i).as_bytes());
                    }
                }
                b.put_u8(b')');
            })
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let c = cast(col, &DataType::LargeList(list_field(col.data_type())))?;
            let a = c.as_list::<i64>();
            let nested = matches!(
                a.values().data_type(),
                DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
            );
            let inner = text_values_in(a.values(), zone)?;
            let offsets = a.value_offsets();
            each(&mut |i, b| {
                b.put_u8(b'{');
                for (k, j) in (offsets[i] as usize..offsets[i + 1] as usize).enumerate() {
                    if k > 0 {
                        b.put_u8(b',');
                    }
                    if inner.is_null(j) {
                        b.put_slice(b"NULL");
                    } else if nested {
                        b.put_slice(inner.value(j).as_bytes());
                    } else {
                        array_elem_text(b, inner.value(j).as_bytes());
                    }
                }
                b.put_u8(b'}');
            })
        }
        _ => {
            let c = cast(col, &DataType::Utf8)?;
            c.as_string::<i32>().clone()
        }
    })
}

fn list_field(
    t: &datafusion::arrow::datatypes::DataType,
) -> datafusion::arrow::datatypes::FieldRef {
    use datafusion::arrow::datatypes::{DataType, Field};
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f.clone(),
        _ => std::sync::Arc::new(Field::new_list_field(DataType::Utf8, true)),
    }
}

/// Postgres' keywords that are not unreserved (`pg_get_keywords()` with `catcode <> 'U'`,
/// PostgreSQL 15), sorted: an identifier spelled as one is quoted, as Postgres' own
/// `quote_ident` quotes it.
const RESERVED_WORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

/// An identifier as Postgres' `quote_ident` writes it: bare when it is lower-case letters,
/// digits and `_` (not starting with a digit) and not a keyword Postgres reserves in any
/// way, else double-quoted.
pub fn quote_ident(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && RESERVED_WORDS.binary_search(&s).is_err();
    if plain {
        s.to_owned()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

/// A text as Postgres' `quote_literal` writes it: single-quoted, quotes doubled, and
/// backslashes doubled with an `E` before the literal when it has one.
pub fn quote_literal(t: &str) -> String {
    let mut q = String::with_capacity(t.len() + 3);
    if t.contains('\\') {
        q.push('E');
    }
    q.push('\'');
    for c in t.chars() {
        if c == '\'' || c == '\\' {
            q.push(c);
        }
        q.push(c);
    }
    q.push('\'');
    q
}

/// A text column (or a text[] column's elements) read by a type's input function (`jsonb`,
/// `uuid`: checked, canonical). `None` when every value is already in its canonical form
/// (or the column is not text), so a caller keeps its array.
pub fn map_texts(
    a: &datafusion::arrow::array::ArrayRef,
    f: impl Fn(&str) -> crate::error::Result<String>,
) -> crate::error::Result<Option<datafusion::arrow::array::ArrayRef>> {
    use datafusion::arrow::array::{Array, AsArray, ListArray, StringBuilder};
    use datafusion::arrow::datatypes::{DataType, Field};
    use std::sync::Arc;
    if let Some(list) = a.as_list_opt::<i32>() {
        let Some(values) = map_texts(list.values(), f)? else {
            return Ok(None);
        };
        let field = Arc::new(Field::new_list_field(DataType::Utf8, true));
        return Ok(Some(Arc::new(ListArray::try_new(
            field,
            list.offsets().clone(),
            values,
            list.nulls().cloned(),
        )?)));
    }
    let Some(s) = a.as_string_opt::<i32>() else {
        return Ok(None);
    };
    let mut changed = false;
    let mut out = StringBuilder::with_capacity(s.len(), s.value_data().len());
    for v in s.iter() {
        match v {
            None => out.append_null(),
            Some(v) => {
                let n = f(v)?;
                changed |= n != v;
                out.append_value(n);
            }
        }
    }
    Ok(changed.then(|| Arc::new(out.finish()) as datafusion::arrow::array::ArrayRef))
}

/// A `character(n)` value as stored: without its trailing blanks (Postgres ignores them).
pub fn bpchar_stored(v: &str) -> crate::error::Result<String> {
    Ok(v.trim_end_matches(' ').to_owned())
}

/// The elements of a one-dimensional Postgres array literal (`{a,"b c",NULL}`); `None`
/// when it is not one.
pub fn parse_array_text(s: &str) -> Option<Vec<Option<String>>> {
    parse_array_items(s)?
        .into_iter()
        .map(|i| match i {
            ArrayTextItem::Value(v) => Some(v),
            ArrayTextItem::Sub(_) => None,
        })
        .collect()
}

/// 22P02 `malformed array literal: "text"` with Postgres' DETAIL of what is wrong: no `{`
/// first, nothing after the `{` that closes it, something after it, or (otherwise) an
/// element where none may be.
pub fn malformed_array_literal(text: &str) -> crate::error::WeirError {
    let t = text.trim();
    let detail = if !t.starts_with('{') {
        "Array value must start with \"{\" or dimension information."
    } else {
        // where the first `{` closes (quotes and escapes skipped)
        let (mut depth, mut quoted, mut escaped, mut end) = (0usize, false, false, None);
        for (i, c) in t.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = !quoted,
                '{' if !quoted => depth += 1,
                '}' if !quoted => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            None => "Unexpected end of input.",
            Some(i) if !t[i + 1..].trim().is_empty() => "Junk after closing right brace.",
            Some(_) => MIXED_ELEMENTS,
        }
    };
    crate::error::WeirError::new(
        crate::error::sqlstate::INVALID_TEXT_REPRESENTATION,
        format!("malformed array literal: \"{text}\""),
    )
    .with_detail(detail)
}

/// An element of a Postgres array literal: a value (`None`: NULL) or a sub-array
/// (`{{1,2},{3,4}}`).
#[derive(Debug, PartialEq)]
pub enum ArrayTextItem {
    Value(Option<String>),
    Sub(Vec<ArrayTextItem>),
}

/// The elements of a Postgres array literal of any dimension; `None` when it is not one.
pub fn parse_array_items(s: &str) -> Option<Vec<ArrayTextItem>> {
    let mut chars = s.trim().chars().peekable();
    if chars.next()? != '{' {
        return None;
    }
    let items = array_level(&mut chars)?;
    chars.all(char::is_whitespace).then_some(items)
}

/// Why an array literal's nesting is not an array's (Postgres' DETAIL).
pub const MIXED_ELEMENTS: &str = "Unexpected array element.";
/// An empty sub-array (`{{},{}}`), which Postgres refuses.
pub const EMPTY_SUB_ARRAY: &str = "Unexpected \"}\" character.";
pub const RAGGED_DIMENSIONS: &str =
    "Multidimensional arrays must have sub-arrays with matching dimensions.";

/// The dimensions of a parsed array literal when it is rectangular, as Postgres requires:
/// one length per level, outermost first; else why not ([`MIXED_ELEMENTS`],
/// [`RAGGED_DIMENSIONS`], [`EMPTY_SUB_ARRAY`]).
pub fn array_text_dims(items: &[ArrayTextItem]) -> Result<Vec<usize>, &'static str> {
    let mut dims = vec![items.len()];
    let subs: Vec<&Vec<ArrayTextItem>> = items
        .iter()
        .filter_map(|i| match i {
            ArrayTextItem::Sub(s) => Some(s),
            ArrayTextItem::Value(_) => None,
        })
        .collect();
    if subs.is_empty() {
        return Ok(dims);
    }
    if subs.len() != items.len() {
        return Err(MIXED_ELEMENTS);
    }
    if subs.iter().any(|s| s.is_empty()) {
        return Err(EMPTY_SUB_ARRAY);
    }
    let inner = array_text_dims(subs[0])?;
    for s in &subs[1..] {
        if array_text_dims(s)? != inner {
            return Err(RAGGED_DIMENSIONS);
        }
    }
    dims.extend(inner);
    Ok(dims)
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// One `{...}` level, its opening brace already read.
fn array_level(chars: &mut Chars<'_>) -> Option<Vec<ArrayTextItem>> {
    let skip_blanks = |chars: &mut Chars<'_>| {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
    };
    let mut out = Vec::new();
    skip_blanks(chars);
    if chars.peek() == Some(&'}') {
        chars.next();
        return Some(out);
    }
    loop {
        skip_blanks(chars);
        match chars.peek()? {
            '{' => {
                chars.next();
                out.push(ArrayTextItem::Sub(array_level(chars)?));
            }
            '"' => {
                chars.next();
                let mut item = String::new();
                loop {
                    match chars.next()? {
                        '\\' => item.push(chars.next()?),
                        '"' => break,
                        c => item.push(c),
                    }
                }
                out.push(ArrayTextItem::Value(Some(item)));
            }
            _ => {
                let mut item = String::new();
                // trailing blanks are not part of an unquoted element; escaped ones are
                let mut kept = 0;
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' | '}' => break,
                        '{' | '"' => return None,
                        '\\' => {
                            chars.next();
                            item.push(chars.next()?);
                            kept = item.len();
                            continue;
                        }
                        _ => item.push(c),
                    }
                    if !c.is_whitespace() {
                        kept = item.len();
                    }
                    chars.next();
                }
                item.truncate(kept);
                if item.is_empty() {
                    return None;
                }
                let null = item.eq_ignore_ascii_case("null");
                out.push(ArrayTextItem::Value((!null).then_some(item)));
            }
        }
        skip_blanks(chars);
        match chars.next()? {
            ',' => continue,
            '}' => return Some(out),
            _ => return None,
        }
    }
}
