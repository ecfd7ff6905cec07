//! Arrow batches to Postgres `DataRow`s, column at a time, in text or binary format.
//!
//! Text output follows Postgres' own output functions (float shortest-exact with `e+NN`
//! past 15 digits, `t`/`f`, `\x` bytea, `1 year 2 mons 3 days 04:05:06` intervals, arrays
//! as `{1,2,NULL}`); binary output follows each type's `send` function.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone as _, Utc};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Decimal128Array, GenericListArray, LargeStringArray,
    OffsetSizeTrait, StringArray, StringViewArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    IntervalMonthDayNanoType, Schema, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
    UInt32Type,
};
use datafusion::arrow::record_batch::RecordBatch;
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::messages::data::DataRow;

use crate::catalog::rewrite::display_column_name;
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, field_sql_type};

/// Microseconds between 1970-01-01 and 2000-01-01 (the Postgres epoch).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

/// How one result column goes on the wire.
#[derive(Debug, Clone)]
pub struct ColumnPlan {
    pub ty: SqlType,
    pub format: FieldFormat,
}

/// Postgres type for a result field: declared type when known, else derived from Arrow.
pub fn pg_type_of(field: &Field) -> SqlType {
    field_sql_type(field).unwrap_or(SqlType::Text)
}

pub fn pg_wire_type(t: &SqlType) -> Type {
    Type::from_oid(t.oid()).unwrap_or_else(|| {
        Type::new(
            t.display_name(),
            t.oid(),
            postgres_types::Kind::Simple,
            "pg_catalog".to_owned(),
        )
    })
}

fn type_size(t: &SqlType) -> i16 {
    match t {
        SqlType::Bool | SqlType::InternalChar => 1,
        SqlType::Int2 => 2,
        SqlType::Int4 | SqlType::Float4 | SqlType::Date | SqlType::Oid => 4,
        SqlType::Int8
        | SqlType::Float8
        | SqlType::Timestamp
        | SqlType::TimestampTz
        | SqlType::Time => 8,
        SqlType::Interval => 16,
        SqlType::Name => 64,
        _ => -1,
    }
}

/// Row description fields for a schema, with the formats a client asked for.
pub fn field_infos(schema: &Schema, format_for: impl Fn(usize) -> FieldFormat) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let t = pg_type_of(f);
            let md = |k: &str| f.metadata().get(k).and_then(|v| v.parse::<i64>().ok());
            let table = md(crate::engine::TABLE_OID_KEY).map(|o| o as i32);
            let column = md(crate::engine::ATTNUM_KEY).map(|a| a as i16);
            FieldInfo::new(
                display_column_name(f.name()).to_owned(),
                table,
                column,
                pg_wire_type(&t),
                format_for(i),
            )
            .with_type_modifier(t.typmod())
            .with_type_size(type_size(&t))
        })
        .collect()
}

pub fn column_plans(schema: &Schema, fields: &[FieldInfo]) -> Vec<ColumnPlan> {
    schema
        .fields()
        .iter()
        .zip(fields)
        .map(|(f, info)| ColumnPlan {
            ty: pg_type_of(f),
            format: info.format(),
        })
        .collect()
}

/// Encode a batch into data rows.
pub fn encode_batch(batch: &RecordBatch, plans: &[ColumnPlan]) -> Result<Vec<DataRow>> {
    let n = batch.num_rows();
    let mut rows: Vec<BytesMut> = (0..n).map(|_| BytesMut::with_capacity(64)).collect();
    for (col, plan) in batch.columns().iter().zip(plans) {
        encode_column(col, plan, &mut rows)?;
    }
    let count = plans.len() as i16;
    Ok(rows
        .into_iter()
        .map(|data| DataRow::new(data, count))
        .collect())
}

/// Write one value per row: a length and the bytes, or -1 for NULL.
fn encode_column(col: &ArrayRef, plan: &ColumnPlan, rows: &mut [BytesMut]) -> Result<()> {
    let binary = plan.format == FieldFormat::Binary;
    let n = rows.len();
    let mut put = |i: usize, w: &mut dyn FnMut(&mut BytesMut)| {
        let buf = &mut rows[i];
        if col.is_null(i) {
            buf.put_i32(-1);
            return;
        }
        let at = buf.len();
        buf.put_i32(0);
        w(buf);
        let len = (buf.len() - at - 4) as i32;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    };
    match col.data_type() {
        DataType::Boolean => {
            let a = col.as_boolean();
            for i in 0..n {
                put(i, &mut |b| {
                    if binary {
                        b.put_u8(a.value(i) as u8)
                    } else {
                        b.put_u8(if a.value(i) { b't' } else { b'f' })
                    }
                });
            }
        }
        DataType::Int16 => {
            let a = col.as_primitive::<Int16Type>();
            for i in 0..n {
                put(i, &mut |b| int_out(b, a.value(i) as i64, binary, 2));
            }
        }
        DataType::Int32 => {
            let a = col.as_primitive::<Int32Type>();
            for i in 0..n {
                put(i, &mut |b| int_out(b, a.value(i) as i64, binary, 4));
            }
        }
        DataType::Int64 => {
            let a = col.as_primitive::<Int64Type>();
            let width = match plan.ty {
                SqlType::Int2 => 2,
                SqlType::Int4 => 4,
                _ => 8,
            };
            for i in 0..n {
                put(i, &mut |b| int_out(b, a.value(i), binary, width));
            }
        }
        DataType::UInt32 => {
            let a = col.as_primitive::<UInt32Type>();
            for i in 0..n {
                put(i, &mut |b| {
                    if binary {
                        b.put_u32(a.value(i))
                    } else {
                        let _ = write!(Writer(b), "{}", a.value(i));
                    }
                });
            }
        }
        DataType::Int8 | DataType::UInt8 | DataType::UInt16 => {
            let c = cast(col, &DataType::Int32)?;
            let plan2 = ColumnPlan {
                ty: SqlType::Int4,
                format: plan.format,
            };
            return encode_column(&c, &plan2, rows);
        }
        DataType::UInt64 => {
            let c = cast(col, &DataType::Decimal128(20, 0))?;
            return encode_column(&c, plan, rows);
        }
        DataType::Float32 => {
            let a = col.as_primitive::<Float32Type>();
            for i in 0..n {
                put(i, &mut |b| {
                    let v = a.value(i);
                    if binary {
                        b.put_f32(v)
                    } else {
                        float_text(b, v as f64, Some(v), 6)
                    }
                });
            }
        }
        DataType::Float64 => {
            let a = col.as_primitive::<Float64Type>();
            for i in 0..n {
                put(i, &mut |b| {
                    let v = a.value(i);
                    if binary {
                        b.put_f64(v)
                    } else {
                        float_text(b, v, None, 15)
                    }
                });
            }
        }
        DataType::Decimal128(_, scale) => {
            let a = col
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .ok_or_else(|| WeirError::internal("decimal column is not Decimal128"))?;
            let scale = *scale;
            let trim = matches!(plan.ty, SqlType::Numeric(None));
            for i in 0..n {
                put(i, &mut |b| {
                    let text = decimal_text(a.value(i), scale, trim);
                    if binary {
                        numeric_binary(b, &text)
                    } else {
                        b.put_slice(text.as_bytes())
                    }
                });
            }
        }
        DataType::Decimal32(..) | DataType::Decimal64(..) | DataType::Decimal256(..) => {
            let (p, s) = match col.data_type() {
                DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => (*p, *s),
                DataType::Decimal256(_, s) => (38, (*s).min(38)),
                _ => unreachable!(),
            };
            let c = cast(col, &DataType::Decimal128(p.min(38), s))?;
            return encode_column(&c, plan, rows);
        }
        DataType::Utf8 => {
            let a = col.as_any().downcast_ref::<StringArray>().expect("Utf8");
            let jsonb_binary = binary && plan.ty == SqlType::Jsonb;
            for i in 0..n {
                put(i, &mut |b| {
                    if jsonb_binary {
                        b.put_u8(1);
                    }
                    b.put_slice(a.value(i).as_bytes())
                });
            }
        }
        DataType::LargeUtf8 => {
            let a = col
                .as_any()
                .downcast_ref::<LargeStringArray>()
                .expect("LargeUtf8");
            for i in 0..n {
                put(i, &mut |b| b.put_slice(a.value(i).as_bytes()));
            }
        }
        DataType::Utf8View => {
            let a = col
                .as_any()
                .downcast_ref::<StringViewArray>()
                .expect("Utf8View");
            for i in 0..n {
                put(i, &mut |b| b.put_slice(a.value(i).as_bytes()));
            }
        }
        DataType::Binary => {
            let a = col.as_any().downcast_ref::<BinaryArray>().expect("Binary");
            for i in 0..n {
                put(i, &mut |b| {
                    if binary {
                        b.put_slice(a.value(i))
                    } else {
                        bytea_text(b, a.value(i))
                    }
                });
            }
        }
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            let c = cast(col, &DataType::Binary)?;
            return encode_column(&c, plan, rows);
        }
        DataType::Date32 => {
            let a = col.as_primitive::<Date32Type>();
            for i in 0..n {
                put(i, &mut |b| {
                    let d = a.value(i);
                    if binary {
                        b.put_i32(d - PG_EPOCH_OFFSET_DAYS)
                    } else {
                        date_text(b, d)
                    }
                });
            }
        }
        DataType::Date64 => {
            let c = cast(col, &DataType::Date32)?;
            return encode_column(&c, plan, rows);
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            let a = col.as_primitive::<Time64MicrosecondType>();
            for i in 0..n {
                put(i, &mut |b| {
                    let us = a.value(i);
                    if binary {
                        b.put_i64(us)
                    } else {
                        time_text(b, us)
                    }
                });
            }
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let c = cast(col, &DataType::Time64(TimeUnit::Microsecond))?;
            return encode_column(&c, plan, rows);
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let a = col.as_primitive::<TimestampMicrosecondType>();
            let with_tz = tz.is_some();
            for i in 0..n {
                put(i, &mut |b| {
                    let us = a.value(i);
                    if binary {
                        b.put_i64(us - PG_EPOCH_OFFSET_US)
                    } else {
                        timestamp_text(b, us, with_tz)
                    }
                });
            }
        }
        DataType::Timestamp(_, tz) => {
            let c = cast(col, &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))?;
            return encode_column(&c, plan, rows);
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            let c = if matches!(
                col.data_type(),
                DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano)
            ) {
                col.clone()
            } else {
                interval_of(col)?
            };
            let a = c.as_primitive::<IntervalMonthDayNanoType>();
            for i in 0..n {
                put(i, &mut |b| {
                    let v = a.value(i);
                    if binary {
                        b.put_i64(v.nanoseconds / 1000);
                        b.put_i32(v.days);
                        b.put_i32(v.months);
                    } else {
                        interval_text(b, v.months, v.days, v.nanoseconds / 1000)
                    }
                });
            }
        }
        DataType::List(_) => {
            let a = col.as_list::<i32>();
            return encode_list(a, plan, rows);
        }
        DataType::LargeList(_) => {
            let a = col.as_list::<i64>();
            return encode_list(a, plan, rows);
        }
        DataType::Dictionary(_, v) => {
            let c = cast(col, v)?;
            return encode_column(&c, plan, rows);
        }
        DataType::Null => {
            for buf in rows.iter_mut() {
                buf.put_i32(-1);
            }
        }
        _ => {
            // anything else is shown as text, which every client can read
            let c = cast(col, &DataType::Utf8).map_err(|_| {
                WeirError::not_supported(format!(
                    "cannot send values of type {} to a client",
                    col.data_type()
                ))
            })?;
            let plan2 = ColumnPlan {
                ty: SqlType::Text,
                format: plan.format,
            };
            return encode_column(&c, &plan2, rows);
        }
    }
    Ok(())
}

fn interval_of(col: &ArrayRef) -> Result<ArrayRef> {
    use datafusion::arrow::datatypes::IntervalUnit;
    Ok(cast(col, &DataType::Interval(IntervalUnit::MonthDayNano))?)
}

fn encode_list<O: OffsetSizeTrait>(
    a: &GenericListArray<O>,
    plan: &ColumnPlan,
    rows: &mut [BytesMut],
) -> Result<()> {
    let elem_ty = match &plan.ty {
        SqlType::Array(e) => (**e).clone(),
        _ => SqlType::Text,
    };
    let binary = plan.format == FieldFormat::Binary;
    // encode all element values once, in the requested format, then frame each row's slice
    let values = a.values();
    let mut cells: Vec<BytesMut> = (0..values.len()).map(|_| BytesMut::new()).collect();
    encode_column(
        values,
        &ColumnPlan {
            ty: elem_ty.clone(),
            format: plan.format,
        },
        &mut cells,
    )?;
    let offsets = a.value_offsets();
    for (i, buf) in rows.iter_mut().enumerate() {
        if a.is_null(i) {
            buf.put_i32(-1);
            continue;
        }
        let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
        let at = buf.len();
        buf.put_i32(0);
        if binary {
            let n = end - start;
            buf.put_i32(if n == 0 { 0 } else { 1 }); // ndim
            buf.put_i32((start..end).any(|j| values.is_null(j)) as i32);
            buf.put_u32(elem_ty.oid());
            if n > 0 {
                buf.put_i32(n as i32);
                buf.put_i32(1); // lower bound
                for cell in &cells[start..end] {
                    buf.put_slice(cell);
                }
            }
        } else {
            buf.put_u8(b'{');
            for (k, cell) in cells[start..end].iter().enumerate() {
                if k > 0 {
                    buf.put_u8(b',');
                }
                let len = i32::from_be_bytes([cell[0], cell[1], cell[2], cell[3]]);
                if len < 0 {
                    buf.put_slice(b"NULL");
                } else {
                    array_elem_text(buf, &cell[4..]);
                }
            }
            buf.put_u8(b'}');
        }
        let len = (buf.len() - at - 4) as i32;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// An array element in text form, quoted when Postgres would quote it.
fn array_elem_text(buf: &mut BytesMut, v: &[u8]) {
    let needs_quotes = v.is_empty()
        || v.eq_ignore_ascii_case(b"null")
        || v.iter()
            .any(|c| matches!(c, b'{' | b'}' | b',' | b'"' | b'\\' | b' ' | b'\t' | b'\n'));
    if !needs_quotes {
        buf.put_slice(v);
        return;
    }
    buf.put_u8(b'"');
    for &c in v {
        if c == b'"' || c == b'\\' {
            buf.put_u8(b'\\');
        }
        buf.put_u8(c);
    }
    buf.put_u8(b'"');
}

struct Writer<'a>(&'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

fn int_out(b: &mut BytesMut, v: i64, binary: bool, width: u8) {
    if binary {
        match width {
            2 => b.put_i16(v as i16),
            4 => b.put_i32(v as i32),
            _ => b.put_i64(v),
        }
    } else {
        let _ = write!(Writer(b), "{v}");
    }
}

/// Postgres' float output: shortest exact digits; exponent form below 1e-4 or from 1e`limit`.
fn float_text(b: &mut BytesMut, v: f64, as_f32: Option<f32>, limit: i32) {
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

/// NUMERIC binary format: base-10000 digit groups with weight, sign and display scale.
fn numeric_binary(b: &mut BytesMut, text: &str) {
    let (negative, t) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let dscale = frac.len() as i16;
    let int = int.trim_start_matches('0');
    // pad the integer part on the left and the fraction on the right to multiples of 4
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let all: String = "0".repeat(int_pad) + int + frac + &"0".repeat(frac_pad);
    let mut groups: Vec<i16> = all
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap_or("0").parse().unwrap_or(0))
        .collect();
    let mut weight = ((int.len() + int_pad) / 4) as i16 - 1;
    // strip leading and trailing zero groups
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    b.put_i16(groups.len() as i16);
    b.put_i16(weight);
    b.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    b.put_i16(dscale);
    for g in groups {
        b.put_i16(g);
    }
}

fn bytea_text(b: &mut BytesMut, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    b.put_slice(b"\\x");
    for byte in v {
        b.put_u8(HEX[(byte >> 4) as usize]);
        b.put_u8(HEX[(byte & 15) as usize]);
    }
}

fn date_text(b: &mut BytesMut, days: i32) {
    match NaiveDate::from_num_days_from_ce_opt(days + 719_163) {
        Some(d) => write_date(b, d),
        None => b.put_slice(b"infinity"),
    }
}

fn write_date(b: &mut BytesMut, d: NaiveDate) {
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

fn write_fraction(b: &mut BytesMut, micros: u32) {
    if micros > 0 {
        let s = format!("{micros:06}");
        b.put_u8(b'.');
        b.put_slice(s.trim_end_matches('0').as_bytes());
    }
}

fn time_text(b: &mut BytesMut, us: i64) {
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

fn timestamp_text(b: &mut BytesMut, us: i64, with_tz: bool) {
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
    if with_tz {
        b.put_slice(b"+00");
    }
    if bc {
        b.put_slice(b" BC");
    }
}

/// Postgres' default (`IntervalStyle = postgres`) interval output.
pub fn interval_text_string(months: i32, days: i32, micros: i64) -> String {
    let mut b = BytesMut::new();
    interval_text(&mut b, months, days, micros);
    String::from_utf8_lossy(&b).into_owned()
}

fn interval_text(b: &mut BytesMut, months: i32, days: i32, micros: i64) {
    let mut parts: Vec<String> = Vec::new();
    let years = months / 12;
    let mons = months % 12;
    let plural = |n: i64, unit: &str| {
        if n == 1 {
            format!("{n} {unit}")
        } else {
            format!("{n} {unit}s")
        }
    };
    if years != 0 {
        parts.push(plural(years as i64, "year"));
    }
    if mons != 0 {
        parts.push(if mons.abs() == 1 {
            format!("{mons} mon")
        } else {
            format!("{mons} mons")
        });
    }
    if days != 0 {
        parts.push(plural(days as i64, "day"));
    }
    if micros != 0 || parts.is_empty() {
        let neg = micros < 0;
        let m = micros.unsigned_abs();
        let secs = m / 1_000_000;
        let frac = (m % 1_000_000) as u32;
        let mut t = String::new();
        if neg {
            t.push('-');
        } else if !parts.is_empty() && (months < 0 || days < 0) {
            t.push('+');
        }
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
        parts.push(t);
    }
    b.put_slice(parts.join(" ").as_bytes());
}

/// Shared empty-row helper for command results.
pub fn no_fields() -> Arc<Vec<FieldInfo>> {
    Arc::new(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f8(v: f64) -> String {
        let mut b = BytesMut::new();
        float_text(&mut b, v, None, 15);
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn floats_print_like_postgres() {
        assert_eq!(f8(1e15), "1e+15");
        assert_eq!(f8(1e14), "100000000000000");
        assert_eq!(f8(0.0001), "0.0001");
        assert_eq!(f8(0.00001), "1e-05");
        assert_eq!(f8(100.0), "100");
        assert_eq!(f8(1.23e-7), "1.23e-07");
        assert_eq!(f8(-2.5), "-2.5");
        assert_eq!(f8(0.1 + 0.2), "0.30000000000000004");
        let mut b = BytesMut::new();
        float_text(&mut b, 1234567.0, Some(1234567.0), 6);
        assert_eq!(&b[..], b"1.234567e+06");
    }

    #[test]
    fn intervals_print_like_postgres() {
        assert_eq!(
            interval_text_string(14, 3, 14_706_789_000),
            "1 year 2 mons 3 days 04:05:06.789"
        );
        assert_eq!(interval_text_string(0, -1, 0), "-1 days");
        assert_eq!(interval_text_string(0, 0, 90_000_000_000), "25:00:00");
        assert_eq!(interval_text_string(0, 0, 0), "00:00:00");
        assert_eq!(
            interval_text_string(1, -1, -1_000_000),
            "1 mon -1 days -00:00:01"
        );
    }

    #[test]
    fn decimals_keep_scale() {
        assert_eq!(decimal_text(150, 2, false), "1.50");
        assert_eq!(decimal_text(-5, 3, false), "-0.005");
        assert_eq!(decimal_text(15_000_000_000, 10, true), "1.5");
        assert_eq!(decimal_text(20_000_000_000, 10, true), "2");
    }

    #[test]
    fn numeric_binary_groups() {
        let mut b = BytesMut::new();
        numeric_binary(&mut b, "12345.67");
        // ndigits=3, weight=1, sign=0, dscale=2, digits 1 2345 6700
        assert_eq!(
            &b[..],
            &[0, 3, 0, 1, 0, 0, 0, 2, 0, 1, 0x09, 0x29, 0x1a, 0x2c]
        );
    }
}
