//! Bound parameters of the extended protocol to DataFusion values.
//!
//! Text-format values are parsed by casting the string to the type the planner inferred for
//! the placeholder (or that the client declared); binary values are decoded by the
//! declared Postgres type's `recv` format.

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::api::Type;

use crate::error::{Result, WeirError, sqlstate};
use crate::sql::types::{SqlType, field_sql_type};

const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

/// Arrow type for a Postgres type a client declared for a parameter.
pub fn arrow_type_of_pg(t: &Type) -> Option<DataType> {
    Some(match t.oid() {
        16 => DataType::Boolean,
        17 => DataType::Binary,
        20 => DataType::Int64,
        21 => DataType::Int16,
        23 => DataType::Int32,
        26 => DataType::UInt32,
        700 => DataType::Float32,
        701 => DataType::Float64,
        18 | 19 | 25 | 114 | 1042 | 1043 | 3802 => DataType::Utf8,
        1082 => DataType::Date32,
        1114 => DataType::Timestamp(TimeUnit::Microsecond, None),
        1184 => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        1700 => return None, // precision comes from the plan
        _ => return None,
    })
}

/// Postgres type to describe for a parameter the planner typed as `field`.
pub fn pg_type_of_field(field: Option<&Field>) -> Type {
    match field.and_then(field_sql_type) {
        Some(t) => crate::server::encode::pg_wire_type(&t),
        None => Type::TEXT,
    }
}

fn protocol_error(msg: String) -> WeirError {
    WeirError::new(sqlstate::PROTOCOL_VIOLATION, msg)
}

fn fixed<const N: usize>(b: &[u8], i: usize, t: &str) -> Result<[u8; N]> {
    b.try_into().map_err(|_| {
        protocol_error(format!(
            "incorrect binary data format in bind parameter {} ({t} needs {N} bytes)",
            i + 1
        ))
    })
}

fn decode_binary(raw: &[u8], declared: &Type, i: usize) -> Result<ScalarValue> {
    Ok(match declared.oid() {
        16 => ScalarValue::Boolean(Some(raw.first().copied().unwrap_or(0) != 0)),
        21 => ScalarValue::Int16(Some(i16::from_be_bytes(fixed(raw, i, "int2")?))),
        23 => ScalarValue::Int32(Some(i32::from_be_bytes(fixed(raw, i, "int4")?))),
        20 => ScalarValue::Int64(Some(i64::from_be_bytes(fixed(raw, i, "int8")?))),
        26 => ScalarValue::UInt32(Some(u32::from_be_bytes(fixed(raw, i, "oid")?))),
        700 => ScalarValue::Float32(Some(f32::from_be_bytes(fixed(raw, i, "float4")?))),
        701 => ScalarValue::Float64(Some(f64::from_be_bytes(fixed(raw, i, "float8")?))),
        17 => ScalarValue::Binary(Some(raw.to_vec())),
        18 | 19 | 25 | 114 | 705 | 1042 | 1043 => ScalarValue::Utf8(Some(utf8(raw, i)?)),
        3802 => ScalarValue::Utf8(Some(utf8(raw.get(1..).unwrap_or_default(), i)?)),
        1082 => ScalarValue::Date32(Some(date_from_pg(
            i32::from_be_bytes(fixed(raw, i, "date")?),
            i,
        )?)),
        1114 => ScalarValue::TimestampMicrosecond(
            Some(timestamp_from_pg(
                i64::from_be_bytes(fixed(raw, i, "timestamp")?),
                i,
            )?),
            None,
        ),
        1184 => ScalarValue::TimestampMicrosecond(
            Some(timestamp_from_pg(
                i64::from_be_bytes(fixed(raw, i, "timestamptz")?),
                i,
            )?),
            Some("UTC".into()),
        ),
        1700 => ScalarValue::Utf8(Some(numeric_from_binary(raw, i)?)),
        // microseconds, days, months (interval_recv)
        1186 => {
            let b: [u8; 16] = fixed(raw, i, "interval")?;
            let us = i64::from_be_bytes(b[..8].try_into().unwrap_or_default());
            let days = i32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
            let months = i32::from_be_bytes(b[12..].try_into().unwrap_or_default());
            ScalarValue::IntervalMonthDayNano(Some(
                datafusion::arrow::datatypes::IntervalMonthDayNano::new(
                    months,
                    days,
                    us.checked_mul(1000).ok_or_else(|| out_of_range(i))?,
                ),
            ))
        }
        2950 => ScalarValue::Utf8(Some(crate::sql::uuid::from_bytes(&fixed(raw, i, "uuid")?))),
        869 | 650 => ScalarValue::Utf8(Some(
            crate::sql::inet::from_binary(raw, declared.oid() == 650).ok_or_else(|| {
                protocol_error(format!(
                    "incorrect binary data format in bind parameter {}",
                    i + 1
                ))
            })?,
        )),
        // user types (enums): their binary form is the label's text, as enum_recv reads it
        o if o >= crate::catalog::FIRST_USER_OID => ScalarValue::Utf8(Some(utf8(raw, i)?)),
        // a one-dimensional array (array_recv): its elements decoded by their type, given on
        // as the array's text, which the array parameter's cast reads
        _ if matches!(declared.kind(), postgres_types::Kind::Array(_)) => {
            let postgres_types::Kind::Array(elem) = declared.kind() else {
                unreachable!("matched an array type")
            };
            ScalarValue::Utf8(Some(array_text_from_binary(raw, elem, i)?))
        }
        other => {
            return Err(WeirError::not_supported(format!(
                "binary format for parameter {} of type OID {other} is not supported; send it as text",
                i + 1
            )));
        }
    })
}

/// A binary array parameter (ndim, has-null flag, element OID, per dimension its length
/// and lower bound, then each element's length and bytes; -1 for NULL) as Postgres array
/// text (`{1,NULL,3}`, `{"a b","c"}`).
fn array_text_from_binary(raw: &[u8], elem: &Type, i: usize) -> Result<String> {
    let bad = || {
        protocol_error(format!(
            "incorrect binary data format in bind parameter {} (array)",
            i + 1
        ))
    };
    let int = |at: usize| -> Result<i32> {
        raw.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_be_bytes)
            .ok_or_else(bad)
    };
    let ndim = int(0)?;
    if ndim == 0 {
        return Ok("{}".into());
    }
    if ndim != 1 {
        return Err(WeirError::not_supported(format!(
            "binary array parameter {} with {ndim} dimensions (send it as text)",
            i + 1
        )));
    }
    let len = usize::try_from(int(12)?).map_err(|_| bad())?;
    let mut at = 20;
    let mut items = Vec::with_capacity(len.min(1 << 16));
    for _ in 0..len {
        let n = int(at)?;
        at += 4;
        if n < 0 {
            items.push("NULL".to_owned());
            continue;
        }
        let n = n as usize;
        let bytes = raw.get(at..at + n).ok_or_else(bad)?;
        at += n;
        let v = decode_binary(bytes, elem, i)?;
        let a = v.to_array()?;
        let text = crate::sql::pg_text::text_values(&a)?;
        let t = text.value(0);
        // quoted as array_out quotes: always, with `"` and `\` escaped
        let mut q = String::with_capacity(t.len() + 2);
        q.push('"');
        for c in t.chars() {
            if c == '"' || c == '\\' {
                q.push('\\');
            }
            q.push(c);
        }
        q.push('"');
        items.push(q);
    }
    Ok(format!("{{{}}}", items.join(",")))
}

fn utf8(raw: &[u8], i: usize) -> Result<String> {
    String::from_utf8(raw.to_vec()).map_err(|_| {
        WeirError::new(
            "22021",
            format!(
                "invalid byte sequence for encoding \"UTF8\" in parameter {}",
                i + 1
            ),
        )
    })
}

/// NUMERIC's binary form (base-10000 digits) to its decimal text, checked as Postgres'
/// `numeric_recv` checks it (22P03 on a bad length, sign, scale or digit).
pub(crate) fn numeric_from_binary(raw: &[u8], i: usize) -> Result<String> {
    let bad = |what: &str| {
        WeirError::new(
            "22P03",
            format!(
                "invalid {what} in external \"numeric\" value (bind parameter {})",
                i + 1
            ),
        )
    };
    if raw.len() < 8 {
        return Err(protocol_error(format!(
            "incorrect binary data format in bind parameter {} (numeric needs at least 8 bytes)",
            i + 1
        )));
    }
    let u16_at = |o: usize| u16::from_be_bytes([raw[o], raw[o + 1]]);
    let ndigits = u16_at(0) as usize;
    let weight = u16_at(2) as i16 as i32;
    let sign = u16_at(4);
    let dscale = u16_at(6) as usize;
    // Postgres: at most NUMERIC_MAX_PRECISION + NUMERIC_MAX_RESULT_SCALE digits
    if ndigits > 1000 + 2000 {
        return Err(bad("length"));
    }
    if raw.len() != 8 + 2 * ndigits {
        return Err(protocol_error(format!(
            "incorrect binary data format in bind parameter {} (numeric with {ndigits} digits needs {} bytes, got {})",
            i + 1,
            8 + 2 * ndigits,
            raw.len()
        )));
    }
    if dscale > 0x3FFF {
        return Err(bad("scale"));
    }
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => return Err(bad("sign")),
    }
    let mut digits = Vec::with_capacity(ndigits);
    for k in 0..ndigits {
        let d = u16_at(8 + 2 * k);
        if d >= 10_000 {
            return Err(bad("digit"));
        }
        digits.push(d as u32);
    }
    let digit = |w: i32| -> u32 {
        if w < 0 {
            0
        } else {
            digits.get(w as usize).copied().unwrap_or(0)
        }
    };
    let mut int = String::new();
    for w in 0..=weight.max(-1) {
        let d = digit(w);
        if int.is_empty() {
            if d != 0 || w == weight {
                int = d.to_string();
            }
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::with_capacity(dscale + 4);
    let mut w = weight + 1;
    while frac.len() < dscale {
        frac.push_str(&format!("{:04}", digit(w)));
        w += 1;
    }
    frac.truncate(dscale);
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    out.push_str(&int);
    if dscale > 0 {
        out.push('.');
        out.push_str(&frac);
    }
    Ok(out)
}

/// Decode bound parameters. `declared` are the types the client gave at Parse (may be
/// unknown), `inferred` what the planner expects; `binary(i)` tells the format of each.
/// `zone`: the session's TimeZone, which a `timestamptz` written without its own zone is a
/// wall-clock time in.
pub fn decode(
    values: &[Option<Bytes>],
    declared: &[Option<Type>],
    inferred: &[Option<Field>],
    binary: impl Fn(usize) -> bool,
    zone: &crate::sql::time_zone::Zone,
) -> Result<ParamValues> {
    let mut out = Vec::with_capacity(values.len());
    for (i, raw) in values.iter().enumerate() {
        // what the client declared at Parse, else what we described to it (clients encode
        // binary values by the described type)
        let declared_ty = declared
            .get(i)
            .cloned()
            .flatten()
            .filter(|t| t.oid() != 0 && *t != Type::UNKNOWN)
            .or_else(|| {
                inferred
                    .get(i)
                    .and_then(|t| t.as_ref())
                    .map(|t| pg_type_of_field(Some(t)))
            });
        let target: Option<DataType> = inferred
            .get(i)
            .and_then(|f| f.as_ref())
            .map(|f| f.data_type().clone())
            .or_else(|| declared_ty.as_ref().and_then(arrow_type_of_pg));
        let value = match raw {
            None => match &target {
                Some(t) => ScalarValue::try_from(t)?,
                None => ScalarValue::Utf8(None),
            },
            Some(bytes) => {
                let v = if binary(i) {
                    match declared_ty.clone() {
                        Some(dt) => decode_binary(bytes, &dt, i)?,
                        // no type from the client nor from the place (`$1::bytea`, a cast
                        // the planner does not type its operand by): the bytes themselves,
                        // as node-postgres sends a Buffer
                        None => ScalarValue::Binary(Some(bytes.to_vec())),
                    }
                } else if declared_ty.as_ref().is_some_and(|t| t.oid() == 2950) {
                    // a uuid in any of its input forms compares as the canonical one
                    ScalarValue::Utf8(Some(crate::sql::uuid::canonical(&utf8(bytes, i)?)?))
                } else {
                    ScalarValue::Utf8(Some(utf8(bytes, i)?))
                };
                match &target {
                    Some(t) if v.data_type() != *t => cast_param(&v, t, i, zone)?,
                    _ => v,
                }
            }
        };
        out.push(value);
    }
    Ok(ParamValues::List(out.into_iter().map(Into::into).collect()))
}

fn cast_param(
    v: &ScalarValue,
    t: &DataType,
    i: usize,
    zone: &crate::sql::time_zone::Zone,
) -> Result<ScalarValue> {
    // Postgres' boolean input accepts t/f/yes/no/on/off/1/0
    if let (DataType::Boolean, ScalarValue::Utf8(Some(s))) = (t, v) {
        let b = match s.trim().to_ascii_lowercase().as_str() {
            "t" | "true" | "yes" | "y" | "on" | "1" => true,
            "f" | "false" | "no" | "n" | "off" | "0" => false,
            _ => {
                return Err(WeirError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    format!("invalid input syntax for type boolean: \"{s}\""),
                ));
            }
        };
        return Ok(ScalarValue::Boolean(Some(b)));
    }
    // a timestamp for a timestamptz: that wall-clock time in the session's zone
    if let (ScalarValue::TimestampMicrosecond(Some(local), None), DataType::Timestamp(_, Some(_))) =
        (v, t)
        && !zone.is_utc()
    {
        let utc = zone.utc_of_local_us(*local).ok_or_else(|| {
            WeirError::new(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range")
        })?;
        return Ok(ScalarValue::TimestampMicrosecond(Some(utc), Some("UTC".into())).cast_to(t)?);
    }
    if let ScalarValue::Utf8(Some(text)) = v {
        if matches!(t, DataType::Interval(_))
            && let Some(n) = crate::catalog::rewrite::normalize_interval(text)
        {
            return cast_param(&ScalarValue::Utf8(Some(n)), t, i, zone);
        }
        // dates and timestamps as a cast reads them (`sql::datetime_in`: `2024-01-01 10:00`,
        // `infinity`, BC), a timestamptz without a zone in the session's
        if let Some(keep_zone) = crate::sql::datetime_in::applies(t) {
            let written: datafusion::arrow::array::ArrayRef =
                std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    text.as_str(),
                ]));
            let parsed = crate::sql::pg_functions::timestamp_in(&written, t, keep_zone)?;
            let parsed = if keep_zone {
                crate::sql::time_zone::read_in_zone(written.as_ref(), parsed, zone)?
            } else {
                parsed
            };
            return Ok(ScalarValue::try_from_array(&parsed, 0)?);
        }
        // a numeric with an exponent (`1E+3`: Python's Decimal writes one so)
        if matches!(t, DataType::Decimal128(..))
            && let Some(plain) = crate::sql::numeric::numeric_text(text)
        {
            return cast_param(&ScalarValue::Utf8(Some(plain)), t, i, zone);
        }
        // an array's text for an array the client sent untyped (psycopg sends a list of
        // str so): its elements, as an array literal reads them
        if let DataType::List(_) | DataType::LargeList(_) = t
            && text.trim_start().starts_with('{')
        {
            let items = crate::sql::pg_text::parse_array_text(text)
                .ok_or_else(|| crate::sql::pg_text::malformed_array_literal(text))?;
            let values: Vec<ScalarValue> = items.into_iter().map(ScalarValue::Utf8).collect();
            let list = ScalarValue::List(ScalarValue::new_list(&values, &DataType::Utf8, true));
            return list.cast_to(t).map_err(|_| {
                WeirError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    format!(
                        "invalid input syntax for parameter ${}: {text} is not a valid {}",
                        i + 1,
                        SqlType::from_arrow(t)
                            .map(|s| s.display_name())
                            .unwrap_or_else(|| t.to_string())
                    ),
                )
            });
        }
        if matches!(t, DataType::Binary) {
            return crate::sql::bytea_codec::bytea_in(text)
                .map(|b| ScalarValue::Binary(Some(b)))
                .map_err(|e| e.with_context(format!("unnamed portal parameter ${}", i + 1)));
        }
    }
    v.cast_to(t).map_err(|_| {
        // Postgres' words for the value, and where it came from as context
        let ty = SqlType::from_arrow(t)
            .map(|s| s.display_name())
            .unwrap_or_else(|| t.to_string());
        let ty = match ty.as_str() {
            "int4" => "integer".to_owned(),
            "int8" => "bigint".to_owned(),
            "int2" => "smallint".to_owned(),
            "float8" => "double precision".to_owned(),
            "float4" => "real".to_owned(),
            "bool" => "boolean".to_owned(),
            _ => ty,
        };
        let shown = match v {
            ScalarValue::Utf8(Some(s)) => s.clone(),
            other => other.to_string(),
        };
        WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type {ty}: \"{shown}\""),
        )
        .with_context(format!("unnamed portal parameter ${} = '{shown}'", i + 1))
    })
}

/// Array parameters the client declared (`= ANY($1)` with a list, the idiomatic IN-list of
/// psycopg and node-postgres): the planner cannot type a bare placeholder there, so each
/// `$n` declared as an array becomes `CAST(weir_parse_array($n) AS elem[])`. The value
/// arrives as Postgres array text (`{1,2,3}`). A `$n` declared an integer, `numeric`,
/// `real`, `double precision`, `boolean`, `date`, `timestamp[tz]`, `interval` or `uuid` becomes `CAST($n AS
/// that)`: the planner would type it by its place (`$1 * 2`: an integer, and `1.5` read as
/// one; `$1 + interval '1 day'`: an interval).
pub fn type_array_placeholders(stmt: &mut crate::sql::parser::Statement, types: &[Option<Type>]) {
    use datafusion::sql::sqlparser::ast::{self, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    // an array's elements in any of these types (text included); a scalar in one that
    // the placeholder's place could type otherwise (`$1 * 2` is an integer to the planner;
    // psycopg declares a Decimal `numeric`, a float `float8`): the declared type, as
    // Postgres takes it (text keeps being typed by its place)
    let elems: Vec<Option<ast::DataType>> = types
        .iter()
        .map(|t| {
            let postgres_types::Kind::Array(elem) = t.as_ref()?.kind() else {
                return None;
            };
            let e = declared_sql_type(elem.oid())?;
            Some(ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(
                Box::new(e),
                None,
            )))
        })
        .collect();
    let scalars: Vec<Option<ast::DataType>> = types
        .iter()
        .map(|t| {
            let oid = t.as_ref()?.oid();
            declared_sql_type(oid).filter(|_| !matches!(oid, 25 | 1043 | 19))
        })
        .collect();
    // placeholders the client sent without a type (node-postgres sends every parameter so)
    let untyped: Vec<bool> = types
        .iter()
        .map(|t| {
            t.as_ref()
                .is_none_or(|t| t.oid() == 0 || *t == Type::UNKNOWN)
        })
        .collect();
    struct Typer<'a> {
        elems: &'a [Option<ast::DataType>],
        scalars: &'a [Option<ast::DataType>],
        untyped: &'a [bool],
        /// Inside a table function's arguments (`generate_series(1, $1)` in FROM), which
        /// must stay constants the planner reads: no cast put around a `$n` there.
        in_table_function: usize,
    }
    fn parse_call(arg: ast::Expr) -> ast::Expr {
        ast::Expr::Function(ast::Function {
            name: ast::ObjectName(vec![ast::ObjectNamePart::Identifier(ast::Ident::new(
                crate::sql::pg_functions::PARSE_ARRAY,
            ))]),
            uses_odbc_syntax: false,
            parameters: ast::FunctionArguments::None,
            args: ast::FunctionArguments::List(ast::FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg))],
                clauses: vec![],
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: vec![],
        })
    }
    impl VisitorMut for Typer<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
            if matches!(tf, ast::TableFactor::Table { args: Some(_), .. }) {
                self.in_table_function += 1;
            }
            ControlFlow::Continue(())
        }
        fn post_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
            if matches!(tf, ast::TableFactor::Table { args: Some(_), .. }) {
                self.in_table_function -= 1;
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
            // `x = ANY($n)` with an untyped $n: the elements compare as text (`{1,2}`)
            if let ast::Expr::AnyOp {
                left,
                compare_op: ast::BinaryOperator::Eq,
                right,
                ..
            } = e
                && let Some(i) = placeholder_index(right)
                && self.untyped.get(i).copied().unwrap_or(true)
                && self.elems.get(i).is_none_or(Option::is_none)
            {
                let l = std::mem::replace(left.as_mut(), ast::Expr::value(ast::Value::Null));
                **left = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(l),
                    data_type: ast::DataType::Text,
                    array: false,
                    format: None,
                };
                let r = std::mem::replace(right.as_mut(), ast::Expr::value(ast::Value::Null));
                **right = parse_call(r);
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
            if let ast::Expr::Value(v) = e
                && let ast::Value::Placeholder(p) = &v.value
                && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
                && let Some(Some(dt)) = n.checked_sub(1).and_then(|i| self.elems.get(i))
            {
                let parse = parse_call(e.clone());
                *e = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(parse),
                    data_type: dt.clone(),
                    array: false,
                    format: None,
                };
            } else if self.in_table_function == 0
                && let ast::Expr::Value(v) = e
                && let ast::Value::Placeholder(p) = &v.value
                && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
                && let Some(Some(dt)) = n.checked_sub(1).and_then(|i| self.scalars.get(i))
            {
                *e = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(e.clone()),
                    data_type: dt.clone(),
                    array: false,
                    format: None,
                };
            }
            ControlFlow::Continue(())
        }
    }
    let mut t = Typer {
        elems: &elems,
        scalars: &scalars,
        untyped: &untyped,
        in_table_function: 0,
    };
    match stmt {
        crate::sql::parser::Statement::Query(q) | crate::sql::parser::Statement::Dml(q) => {
            let _ = q.visit(&mut t);
        }
        crate::sql::parser::Statement::Declare(d) => {
            if let crate::sql::client_stmts::CursorQuery::Query(q) = &mut d.query {
                let _ = q.visit(&mut t);
            }
        }
        _ => {}
    }
}

/// The SQL type of a type OID a client declares for a parameter (or an array's elements).
fn declared_sql_type(oid: u32) -> Option<datafusion::sql::sqlparser::ast::DataType> {
    use datafusion::sql::sqlparser::ast::{DataType as T, ExactNumberInfo, TimezoneInfo};
    Some(match oid {
        16 => T::Boolean,
        20 => T::BigInt(None),
        21 => T::SmallInt(None),
        23 => T::Integer(None),
        25 | 1043 | 19 => T::Text,
        700 => T::Real,
        701 => T::DoublePrecision,
        1700 => T::Numeric(ExactNumberInfo::None),
        1082 => T::Date,
        1114 => T::Timestamp(None, TimezoneInfo::None),
        1184 => T::Timestamp(None, TimezoneInfo::Tz),
        1186 => T::Interval {
            fields: None,
            precision: None,
        },
        2950 => T::Uuid,
        869 => T::Custom(
            datafusion::sql::sqlparser::ast::ObjectName::from(vec![
                datafusion::sql::sqlparser::ast::Ident::new("inet"),
            ]),
            vec![],
        ),
        650 => T::Custom(
            datafusion::sql::sqlparser::ast::ObjectName::from(vec![
                datafusion::sql::sqlparser::ast::Ident::new("cidr"),
            ]),
            vec![],
        ),
        _ => return None,
    })
}

/// A binary timestamp (microseconds from 2000-01-01) as microseconds from 1970-01-01; the
/// type's ends are Postgres' `infinity` / `-infinity` and stay the ends; a value that does
/// not fit is an error, not a wrap.
fn timestamp_from_pg(v: i64, i: usize) -> Result<i64> {
    match v {
        i64::MAX | i64::MIN => Ok(v),
        _ => v
            .checked_add(PG_EPOCH_OFFSET_US)
            .ok_or_else(|| out_of_range(i)),
    }
}

/// A binary date (days from 2000-01-01) as days from 1970-01-01, as [`timestamp_from_pg`].
fn date_from_pg(v: i32, i: usize) -> Result<i32> {
    match v {
        i32::MAX | i32::MIN => Ok(v),
        _ => v
            .checked_add(PG_EPOCH_OFFSET_DAYS)
            .ok_or_else(|| out_of_range(i)),
    }
}

fn out_of_range(i: usize) -> WeirError {
    WeirError::new(
        sqlstate::DATETIME_FIELD_OVERFLOW,
        format!("binary date/timestamp parameter {} is out of range", i + 1),
    )
}

/// `$n` as an index from 0.
pub(crate) fn placeholder_index(e: &datafusion::sql::sqlparser::ast::Expr) -> Option<usize> {
    use datafusion::sql::sqlparser::ast;
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => {
                p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_binary_round_trip() {
        // 12345.67: ndigits=3, weight=1, sign=0, dscale=2, digits 1 2345 6700
        let raw = [0, 3, 0, 1, 0, 0, 0, 2, 0, 1, 0x09, 0x29, 0x1a, 0x2c];
        assert_eq!(numeric_from_binary(&raw, 0).unwrap(), "12345.67");
        // 0.0005: ndigits=1, weight=-1, dscale=4, digit 5
        let raw = [0, 1, 0xff, 0xff, 0, 0, 0, 4, 0, 5];
        assert_eq!(numeric_from_binary(&raw, 0).unwrap(), "0.0005");
    }

    #[test]
    fn bad_numerics_are_errors_not_panics() {
        // ndigits = -1 (65535 as unsigned): once a panic
        let raw = [0xff, 0xff, 0, 0, 0, 0, 0, 0];
        assert_eq!(numeric_from_binary(&raw, 0).unwrap_err().code, "22P03");
        // a digit of 10000, a bad sign, a short body, trailing bytes
        assert!(numeric_from_binary(&[0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10], 0).is_err());
        assert!(numeric_from_binary(&[0, 0, 0, 0, 0x12, 0x34, 0, 0], 0).is_err());
        assert!(numeric_from_binary(&[0, 2, 0, 0, 0, 0, 0, 0, 0, 1], 0).is_err());
        assert!(numeric_from_binary(&[0, 0, 0, 0, 0, 0, 0, 0, 9], 0).is_err());
        assert_eq!(
            numeric_from_binary(&[0, 0, 0, 0, 0, 0, 0, 0], 0).unwrap(),
            "0"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

        /// Any bytes, any declared type: a value or an error, never a panic.
        #[test]
        fn binary_decoders_never_panic(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            oid in proptest::sample::select(vec![16u32, 17, 18, 19, 20, 21, 23, 25, 26, 114, 700, 701, 705, 1042, 1043, 1082, 1114, 1184, 1700, 3802, 2950, 1186]),
        ) {
            let t = Type::from_oid(oid).unwrap_or(Type::TEXT);
            let _ = decode_binary(&raw, &t, 0);
            let _ = numeric_from_binary(&raw, 0);
            let _ = decode(&[Some(Bytes::from(raw.clone()))], &[Some(t.clone())], &[None], |_| true, &crate::sql::time_zone::Zone::utc());
            let _ = decode(&[Some(Bytes::from(raw))], &[Some(t)], &[None], |_| false, &crate::sql::time_zone::Zone::utc());
        }

        /// Well-formed numerics decode to the number they encode.
        #[test]
        fn numerics_round_trip(int in 0u64..1_000_000_000_000, frac in 0u32..10_000, neg: bool) {
            // base-10000 digits of int, then one fractional digit with dscale 4
            let mut groups = Vec::new();
            let mut n = int;
            while n > 0 {
                groups.push((n % 10_000) as u16);
                n /= 10_000;
            }
            groups.reverse();
            let weight = groups.len() as i16 - 1;
            groups.push(frac as u16);
            let mut raw = Vec::new();
            raw.extend_from_slice(&(groups.len() as u16).to_be_bytes());
            raw.extend_from_slice(&weight.to_be_bytes());
            raw.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
            raw.extend_from_slice(&4u16.to_be_bytes());
            for g in &groups {
                raw.extend_from_slice(&g.to_be_bytes());
            }
            let want = format!("{}{int}.{frac:04}", if neg { "-" } else { "" });
            proptest::prop_assert_eq!(numeric_from_binary(&raw, 0).unwrap(), want);
        }
    }

    #[test]
    fn text_params_cast_to_inferred_types() {
        let p = decode(
            &[
                Some(Bytes::from_static(b"42")),
                None,
                Some(Bytes::from_static(b"t")),
            ],
            &[None, None, None],
            &[
                Some(Field::new("", DataType::Int64, true)),
                Some(Field::new("", DataType::Utf8, true)),
                Some(Field::new("", DataType::Boolean, true)),
            ],
            |_| false,
            &crate::sql::time_zone::Zone::utc(),
        )
        .unwrap();
        let ParamValues::List(v) = p else { panic!() };
        assert_eq!(v[0].value, ScalarValue::Int64(Some(42)));
        assert_eq!(v[1].value, ScalarValue::Utf8(None));
        assert_eq!(v[2].value, ScalarValue::Boolean(Some(true)));
    }

    #[test]
    fn timestamptz_params_without_a_zone_are_wall_clock_times_in_the_session_zone() {
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let ny = crate::sql::time_zone::Zone::setting("America/New_York")
            .expect("a zone")
            .0;
        let p = decode(
            &[
                Some(Bytes::from_static(b"2024-07-01 12:00")),
                Some(Bytes::from_static(b"2024-07-01 12:00:00+00")),
                Some(Bytes::from(
                    // 2024-07-01 12:00 as a binary timestamp (microseconds since 2000-01-01)
                    (773_150_400_000_000i64).to_be_bytes().to_vec(),
                )),
            ],
            &[None, None, Some(Type::TIMESTAMP)],
            &[
                Some(Field::new("", tz.clone(), true)),
                Some(Field::new("", tz.clone(), true)),
                Some(Field::new("", tz, true)),
            ],
            |i| i == 2,
            &ny,
        )
        .unwrap();
        let ParamValues::List(v) = p else { panic!() };
        let noon_utc = 1_719_835_200_000_000i64;
        let edt = 4 * 3_600_000_000i64;
        let micros = |s: &ScalarValue| match s {
            ScalarValue::TimestampMicrosecond(Some(v), Some(_)) => *v,
            other => panic!("not a timestamptz: {other:?}"),
        };
        assert_eq!(micros(&v[0].value), noon_utc + edt);
        assert_eq!(micros(&v[1].value), noon_utc);
        assert_eq!(micros(&v[2].value), noon_utc + edt);
    }
}
