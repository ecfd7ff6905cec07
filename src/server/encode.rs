//! Arrow batches to Postgres `DataRow`s, column at a time, in text or binary format.
//!
//! Text output follows Postgres' own output functions (float shortest-exact with `e+NN`
//! past 15 digits, `t`/`f`, `\x` bytea, `1 year 2 mons 3 days 04:05:06` intervals, arrays
//! as `{1,2,NULL}`); binary output follows each type's `send` function.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
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
use crate::sql::pg_text::{
    Writer, array_elem_text, bytea_text, date_text, decimal_text, float_text, interval_text,
    time_text, timestamp_text,
};
use crate::sql::time_zone::Zone;
use crate::sql::types::{SqlType, field_sql_type};

/// Microseconds between 1970-01-01 and 2000-01-01 (the Postgres epoch).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

/// How one result column goes on the wire.
#[derive(Debug, Clone)]
pub struct ColumnPlan {
    pub ty: SqlType,
    pub format: FieldFormat,
    /// The session's TimeZone: a `timestamptz`'s text is its time there.
    pub zone: Zone,
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
            // a numeric computed by the query (`amount * 2`, `sum(amount)`, `1.5`) has no
            // declared precision and scale in Postgres (-1); a column or cast declared
            // `numeric(p, s)` has them
            let declared = f.metadata().contains_key(crate::sql::types::PG_TYPE_KEY);
            let typmod = match t {
                SqlType::Numeric(_) if !declared => -1,
                _ => t.typmod(),
            };
            FieldInfo::new(
                display_column_name(f.name()).to_owned(),
                table,
                column,
                pg_wire_type(&t),
                format_for(i),
            )
            .with_type_modifier(typmod)
            .with_type_size(t.typlen())
        })
        .collect()
}

pub fn column_plans(schema: &Schema, fields: &[FieldInfo], zone: Zone) -> Vec<ColumnPlan> {
    schema
        .fields()
        .iter()
        .zip(fields)
        .map(|(f, info)| ColumnPlan {
            ty: pg_type_of(f),
            format: info.format(),
            zone,
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
                zone: plan.zone,
            };
            return encode_column(&c, &plan2, rows);
        }
        DataType::UInt64 => {
            // bigint on the wire (a count past 2^63 fails the cast rather than wrap)
            let c = datafusion::arrow::compute::cast_with_options(
                col,
                &DataType::Int64,
                &datafusion::arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                },
            )?;
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
            let uuid_binary = binary && plan.ty == SqlType::Uuid;
            let inet_binary = binary && matches!(plan.ty, SqlType::Inet | SqlType::Cidr);
            // character(n) is stored without trailing blanks and sent padded to n
            if let SqlType::Bpchar(Some(width)) = plan.ty {
                for i in 0..n {
                    put(i, &mut |b| {
                        let v = a.value(i);
                        b.put_slice(v.as_bytes());
                        b.put_bytes(b' ', (width as usize).saturating_sub(v.chars().count()));
                    });
                }
                return Ok(());
            }
            for i in 0..n {
                put(i, &mut |b| {
                    if jsonb_binary {
                        b.put_u8(1);
                    }
                    match uuid_binary
                        .then(|| crate::sql::uuid::to_bytes(a.value(i)))
                        .flatten()
                    {
                        // uuid's binary form: its 16 bytes
                        Some(bytes) => b.put_slice(&bytes),
                        None => match inet_binary
                            .then(|| {
                                crate::sql::inet::to_binary(a.value(i), plan.ty == SqlType::Cidr)
                            })
                            .flatten()
                        {
                            Some(bytes) => b.put_slice(&bytes),
                            None => b.put_slice(a.value(i).as_bytes()),
                        },
                    }
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
                        // the infinities are the type's ends on the wire too
                        b.put_i32(match d {
                            i32::MAX | i32::MIN => d,
                            _ => d - PG_EPOCH_OFFSET_DAYS,
                        })
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
            let zone = tz.is_some().then_some(&plan.zone);
            for i in 0..n {
                put(i, &mut |b| {
                    let us = a.value(i);
                    if binary {
                        b.put_i64(match us {
                            i64::MAX | i64::MIN => us,
                            _ => us - PG_EPOCH_OFFSET_US,
                        })
                    } else {
                        timestamp_text(b, us, zone)
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
        DataType::Struct(_) => {
            // a record, in its text form (clients read a record as text)
            let c: ArrayRef = Arc::new(crate::sql::pg_text::text_values_in(col, &plan.zone)?);
            let plan2 = ColumnPlan {
                ty: SqlType::Text,
                format: plan.format,
                zone: plan.zone,
            };
            return encode_column(&c, &plan2, rows);
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
                zone: plan.zone,
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
        SqlType::Array(e) | SqlType::Vector(e) => (**e).clone(),
        _ => SqlType::Text,
    };
    // int2vector / oidvector: `1 2` in text, lower bound 0 in binary
    let vector = matches!(plan.ty, SqlType::Vector(_));
    let binary = plan.format == FieldFormat::Binary;
    // encode all element values once, in the requested format, then frame each row's slice
    let values = a.values();
    let mut cells: Vec<BytesMut> = (0..values.len()).map(|_| BytesMut::new()).collect();
    encode_column(
        values,
        &ColumnPlan {
            ty: elem_ty.clone(),
            format: plan.format,
            zone: plan.zone,
        },
        &mut cells,
    )?;
    let offsets = a.value_offsets();
    let nested = matches!(
        values.data_type(),
        DataType::List(_) | DataType::LargeList(_)
    );
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
                buf.put_i32(if vector { 0 } else { 1 }); // lower bound
                for cell in &cells[start..end] {
                    buf.put_slice(cell);
                }
            }
        } else if vector {
            for (k, cell) in cells[start..end].iter().enumerate() {
                if k > 0 {
                    buf.put_u8(b' ');
                }
                buf.put_slice(cell.get(4..).unwrap_or_default());
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
                } else if nested {
                    // a multi-dimensional array: the inner arrays unquoted, `{{1,2},{3,4}}`
                    buf.put_slice(&cell[4..]);
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

/// Shared empty-row helper for command results.
pub fn no_fields() -> Arc<Vec<FieldInfo>> {
    Arc::new(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::pg_text::interval_text_string;

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
        assert_eq!(decimal_text(-125, -1, false), "-1250");
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
