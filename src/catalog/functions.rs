//! Postgres system functions clients call (`version()`, `format_type`, `pg_get_indexdef`,
//! `pg_table_is_visible`, the `::regclass` family...), as DataFusion scalar UDFs over
//! Weir's catalog, and a type planner that gives Postgres type names (`oid`, `name`,
//! `jsonb`, `pg_catalog.text`) their Arrow types.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBuilder, Int32Array, ListBuilder, StringArray,
    StringBuilder, UInt32Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::Result as DfResult;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::sql::sqlparser::ast;

use crate::catalog::pg_catalog::{
    format_type, relation_name_of_oid, relation_oid_of_name, type_oid_of_name, unqualified_name,
};
use crate::catalog::{Catalog, DATABASE_NAME};
use crate::sql::pg_functions::PgFunction;
use crate::sql::types::SqlType;

/// `pg_typeof(x)`: the Postgres type name of its argument (`integer`, `jsonb`,
/// `character varying` ...), from the argument's declared type where a column carries
/// one. Postgres returns `regtype`, which prints as this name.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let name = args
            .arg_fields
            .first()
            .and_then(|f| crate::sql::types::field_sql_type(f))
            // regtype prints without the type modifier: `character varying`, `numeric`
            .map(|t| crate::catalog::type_without_modifiers(&t))
            .unwrap_or_else(|| "unknown".into());
        Ok(ColumnarValue::Scalar(
            datafusion::common::ScalarValue::Utf8(Some(name)),
        ))
    }
}

/// The `version()` string: a Postgres 16 version, so drivers pick modern protocol paths.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {} on x86_64-pc-linux-gnu, compiled by rustc, 64-bit (Weir {})",
        crate::server::PG_VERSION,
        env!("CARGO_PKG_VERSION")
    )
}

fn any_args() -> Signature {
    Signature::one_of(
        vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
        Volatility::Stable,
    )
}

fn register_fn(
    ctx: &SessionContext,
    name: &'static str,
    ret: DataType,
    imp: impl Fn(&[ArrayRef], usize) -> DfResult<ArrayRef> + Send + Sync + 'static,
) {
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name,
        signature: any_args(),
        ret: Box::new(move |_| ret.clone()),
        imp: Box::new(imp),
    }));
}

fn as_u32(a: &ArrayRef) -> DfResult<UInt32Array> {
    let c = cast(a, &DataType::UInt32)?;
    Ok(c.as_any()
        .downcast_ref::<UInt32Array>()
        .expect("cast to UInt32 gives UInt32Array")
        .clone())
}

fn as_str(a: &ArrayRef) -> DfResult<StringArray> {
    let c = cast(a, &DataType::Utf8)?;
    Ok(c.as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 gives StringArray")
        .clone())
}

/// Map the first argument row by row; rows of a missing argument are NULL.
fn map_u32_to_str(
    args: &[ArrayRef],
    rows: usize,
    f: impl Fn(u32) -> Option<String>,
) -> DfResult<ArrayRef> {
    let Some(a) = args.first() else {
        return Ok(Arc::new(StringArray::new_null(rows)));
    };
    let a = as_u32(a)?;
    Ok(Arc::new(
        (0..rows)
            .map(|i| if a.is_null(i) { None } else { f(a.value(i)) })
            .collect::<StringArray>(),
    ))
}

fn constant_str(rows: usize, s: Option<&str>) -> ArrayRef {
    Arc::new((0..rows).map(|_| s).collect::<StringArray>())
}

fn constant_bool(rows: usize, b: bool) -> ArrayRef {
    Arc::new(BooleanArray::from(vec![b; rows]))
}

/// Postgres' `pg_size_pretty`: bytes below 10 kB, then kB, MB, GB, TB, PB, each unit
/// used below 10240 of it, halves rounded away from zero.
fn size_pretty(bytes: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    if bytes.abs() < LIMIT {
        return format!("{bytes} bytes");
    }
    let half_rounded = |x: i64| if x >= 0 { (x + 1) / 2 } else { (x - 1) / 2 };
    // in half-units of the current unit
    let mut size = bytes >> 9;
    for unit in ["kB", "MB", "GB", "TB"] {
        if size.abs() < LIMIT * 2 - 1 {
            return format!("{} {unit}", half_rounded(size));
        }
        size >>= 10;
    }
    format!("{} PB", half_rounded(size))
}

/// Postgres' `pg_size_bytes`: `1.5 GB` as 1610612736 (a number, maybe with a fraction and
/// an exponent, then `bytes`, `kB`, `MB`, `GB`, `TB` or `PB` in any case, powers of 1024;
/// Postgres 15's units), rounded half away from zero; 22023 for anything else, as Postgres
/// words it.
fn size_bytes(text: &str) -> crate::error::Result<i64> {
    use crate::error::{WeirError, sqlstate};
    let invalid = || {
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid size: \"{text}\""),
        )
    };
    let t = text.trim();
    let number_end = t
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == '-' || c == '+') && (i == 0 || t[..i].ends_with(['e', 'E'])))
                || ((c == 'e' || c == 'E')
                    && t[i + 1..]
                        .starts_with(|d: char| d.is_ascii_digit() || d == '-' || d == '+')))
        })
        .map_or(t.len(), |(i, _)| i);
    let (number, unit) = (&t[..number_end], t[number_end..].trim());
    // the number as digits and a power of ten: digits * 10^exp
    let (mantissa, exp) = match number.find(['e', 'E']) {
        Some(i) => (
            &number[..i],
            number[i + 1..].parse::<i32>().map_err(|_| invalid())?,
        ),
        None => (number, 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches(['-', '+']);
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(invalid());
    }
    let multiplier: i128 = match unit.to_ascii_lowercase().as_str() {
        "" | "bytes" => 1,
        "kb" => 1 << 10,
        "mb" => 1 << 20,
        "gb" => 1 << 30,
        "tb" => 1 << 40,
        "pb" => 1 << 50,
        _ => {
            return Err(invalid()
                .with_detail(format!("Invalid size unit: \"{unit}\"."))
                .with_hint(
                    "Valid units are \"bytes\", \"kB\", \"MB\", \"GB\", \"TB\", and \"PB\".",
                ));
        }
    };
    let out_of_range =
        || WeirError::new(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range");
    let digits: String = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let scale = frac.len() as i32 - exp;
    if digits.len() > 30 || !(-20..=60).contains(&scale) {
        return if digits.is_empty() {
            Ok(0)
        } else {
            Err(out_of_range())
        };
    }
    let value: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| invalid())?
    };
    let scaled = value.checked_mul(multiplier).ok_or_else(out_of_range)?;
    let bytes = if scale <= 0 {
        scaled
            .checked_mul(
                10i128
                    .checked_pow((-scale) as u32)
                    .ok_or_else(out_of_range)?,
            )
            .ok_or_else(out_of_range)?
    } else if scale > 38 {
        0
    } else {
        let d = 10i128.pow(scale as u32);
        (scaled + d / 2) / d
    };
    let bytes = if negative { -bytes } else { bytes };
    i64::try_from(bytes).map_err(|_| out_of_range())
}

pub use crate::sql::pg_text::parse_array_text;

fn expand_fields(elem: DataType) -> datafusion::arrow::datatypes::Fields {
    vec![
        Field::new("x", elem, true),
        Field::new("n", DataType::Int32, false),
    ]
    .into()
}

/// A value as JSON (numbers, booleans and NULL as themselves, the rest as text).
fn scalar_json(v: &datafusion::common::ScalarValue) -> serde_json::Value {
    use datafusion::common::ScalarValue as S;
    if v.is_null() {
        return serde_json::Value::Null;
    }
    match v {
        S::Boolean(Some(b)) => (*b).into(),
        S::Int8(Some(x)) => (*x).into(),
        S::Int16(Some(x)) => (*x).into(),
        S::Int32(Some(x)) => (*x).into(),
        S::Int64(Some(x)) => (*x).into(),
        S::UInt32(Some(x)) => (*x).into(),
        S::UInt64(Some(x)) => (*x).into(),
        S::Float32(Some(x)) => (*x as f64).into(),
        S::Float64(Some(x)) => (*x).into(),
        other => other.to_string().into(),
    }
}

/// `length(x)`: characters of text (DataFusion's), bytes of bytea (Postgres'; DataFusion's
/// takes text only).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Length {
    signature: Signature,
    text: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for Length {
    fn name(&self) -> &str {
        "length"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn aliases(&self) -> &[String] {
        &[]
    }
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        if args.len() != 1 {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "length takes one argument, not {}",
                args.len()
            )));
        }
        Ok(args
            .iter()
            .map(|t| match t {
                DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View => t.clone(),
                _ => DataType::Utf8,
            })
            .collect())
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match args.first() {
            Some(DataType::Binary | DataType::LargeBinary | DataType::BinaryView) => {
                Ok(DataType::Int32)
            }
            _ => self.text.return_type(args),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let binary = args.args.first().is_some_and(|a| {
            matches!(
                a.data_type(),
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            )
        });
        if !binary {
            return self.text.invoke_with_args(args);
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let n = datafusion::arrow::compute::kernels::length::length(&arrays[0])?;
        Ok(ColumnarValue::Array(cast(&n, &DataType::Int32)?))
    }
}

/// `::regclass` (the rewriter turns the cast into `weir_regclass`): a name as SQL writes it
/// becomes the OID; an OID prints as Postgres' regclassout prints it, the name quoted where
/// it needs to be and qualified unless the search path (`schemas`) finds it by its bare
/// name (OID 0 as `-`, InvalidOid).
fn register_regclass(
    ctx: &SessionContext,
    catalog: Arc<Catalog>,
    schemas: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
) {
    let c2 = catalog.clone();
    reg_cast(
        ctx,
        "weir_regclass",
        Arc::new(move |s: &str| relation_oid_of_name(&c2, s)),
        Arc::new(move |o: u32| match o {
            0 => Some("-".to_owned()),
            o => {
                let key = relation_name_of_oid(&catalog, o)?;
                if crate::catalog::pg_catalog::SYSTEM_RELATIONS
                    .iter()
                    .any(|r| r.oid == o)
                {
                    return Some(key);
                }
                Some(crate::catalog::schemas::shown_on_path(
                    &key,
                    &schemas(),
                    |k| catalog.name_in_use(k),
                ))
            }
        }),
    );
}

/// `current_schema()` and `current_schemas(implicit)`: the schemas of the search path that
/// exist (`schemas`, read as a statement runs), with pg_catalog first when implicit.
/// Also `pg_table_is_visible(oid)` / `pg_type_is_visible(oid)`: a relation or type is
/// visible when its schema is on the path (pg_catalog's always; information_schema's not).
pub fn register_search_path(
    ctx: &SessionContext,
    catalog: Arc<Catalog>,
    schemas: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
) {
    let types = catalog.clone();
    let path = schemas.clone();
    // (a user type's name as the path finds it)
    register_fn(ctx, "format_type", DataType::Utf8, move |args, rows| {
        let path = path();
        let Some(t) = args.first() else {
            return Ok(constant_str(rows, None));
        };
        let t = as_u32(t)?;
        let m = match args.get(1) {
            Some(m) => Some(cast(m, &DataType::Int32)?),
            None => None,
        };
        let m = m
            .as_ref()
            .and_then(|m| m.as_any().downcast_ref::<Int32Array>());
        Ok(Arc::new(
            (0..rows)
                .map(|i| {
                    if t.is_null(i) {
                        return None;
                    }
                    let typmod = m
                        .map(|m| if m.is_null(i) { -1 } else { m.value(i) })
                        .unwrap_or(-1);
                    Some(
                        format_type(t.value(i), typmod)
                            .or_else(|| types.user_type_shown_on(t.value(i), &path))
                            .unwrap_or_else(|| "???".to_owned()),
                    )
                })
                .collect::<StringArray>(),
        ))
    });
    for name in ["pg_table_is_visible", "pg_type_is_visible"] {
        let (catalog, schemas) = (catalog.clone(), schemas.clone());
        register_fn(ctx, name, DataType::Boolean, move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(constant_bool(rows, true));
            };
            let a = as_u32(a)?;
            let path = schemas();
            // (not visible: off the path, or one of the same name comes first on it)
            use crate::catalog::schemas::visible_on_path;
            let hidden: std::collections::HashSet<u32> = catalog
                .entries()
                .iter()
                .filter(|e| !visible_on_path(&e.desc.name, &path, |k| catalog.get(k).is_some()))
                .flat_map(|e| {
                    std::iter::once(e.desc.oid)
                        .chain(std::iter::once(e.desc.row_type_oid()))
                        .chain(e.desc.all_indexes().into_iter().map(|i| i.oid))
                })
                .chain(
                    catalog
                        .user_types()
                        .into_iter()
                        .filter(|(k, _)| {
                            !visible_on_path(k, &path, |k| catalog.user_type_exists(k))
                        })
                        .flat_map(|(_, t)| [t, t + 1]),
                )
                .collect();
            Ok(Arc::new(
                a.iter()
                    .map(|o| {
                        o.map(|o| {
                            !hidden.contains(&o)
                                && !crate::catalog::pg_catalog::SYSTEM_RELATIONS
                                    .iter()
                                    .any(|r| {
                                        r.oid == o
                                            && r.namespace
                                                != crate::catalog::PG_CATALOG_NAMESPACE_OID
                                    })
                        })
                    })
                    .collect::<BooleanArray>(),
            ))
        });
    }
    register_regclass(ctx, catalog.clone(), schemas.clone());
    let first = schemas.clone();
    register_fn(ctx, "current_schema", DataType::Utf8, move |_, rows| {
        Ok(constant_str(rows, first().first().map(String::as_str)))
    });
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name: "current_schemas",
        signature: any_args(),
        ret: Box::new(|_| DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))),
        imp: Box::new(move |args, rows| {
            let path = schemas();
            let include_implicit = args
                .first()
                .and_then(|a| {
                    a.as_any()
                        .downcast_ref::<BooleanArray>()
                        .map(|b| b.value(0))
                })
                .unwrap_or(false);
            let mut b = ListBuilder::new(StringBuilder::new());
            for _ in 0..rows {
                if include_implicit {
                    b.values().append_value("pg_catalog");
                }
                for p in &path {
                    b.values().append_value(p);
                }
                b.append(true);
            }
            Ok(Arc::new(b.finish()))
        }),
    }));
}

/// Register every function on a session context.
pub fn register(ctx: &SessionContext, catalog: Arc<Catalog>) {
    register_server_file_refusals(ctx);
    // the parser's mark of an ASOF join (`plan::asof` removes it); reached only where a
    // statement is not planned through `plan::asof`
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name: crate::sql::parser::ASOF_MARKER,
        signature: Signature::nullary(Volatility::Volatile),
        ret: Box::new(|_| DataType::Boolean),
        imp: Box::new(|_, _| {
            Err(datafusion::error::DataFusionError::External(Box::new(
                crate::error::WeirError::not_supported(
                    "ASOF JOIN is supported in queries and materialized views only",
                ),
            )))
        }),
    }));
    ctx.register_udf(ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    }));
    ctx.register_udf(crate::catalog::side_effects::keep_udf());
    register_fn(ctx, "version", DataType::Utf8, |_, rows| {
        Ok(constant_str(rows, Some(&version_string())))
    });
    register_fn(ctx, "current_database", DataType::Utf8, |_, rows| {
        Ok(constant_str(rows, Some(DATABASE_NAME)))
    });
    register_fn(ctx, "current_catalog", DataType::Utf8, |_, rows| {
        Ok(constant_str(rows, Some(DATABASE_NAME)))
    });
    register_search_path(ctx, catalog.clone(), Arc::new(|| vec!["public".to_owned()]));
    // json_build_object(k1, v1, ...): catalog queries (SQLAlchemy's column reflection) build
    // small objects with it
    register_fn(ctx, "json_build_object", DataType::Utf8, |args, rows| {
        if args.len() % 2 != 0 {
            return Err(datafusion::error::DataFusionError::Plan(
                "argument list must have even number of elements".into(),
            ));
        }
        let keys: Vec<StringArray> = args
            .iter()
            .step_by(2)
            .map(as_str)
            .collect::<DfResult<_>>()?;
        let mut out = StringBuilder::new();
        for i in 0..rows {
            let mut obj = serde_json::Map::new();
            for (k, v) in keys.iter().zip(args.iter().skip(1).step_by(2)) {
                let key = if k.is_null(i) {
                    "".to_owned()
                } else {
                    k.value(i).to_owned()
                };
                let value = datafusion::common::ScalarValue::try_from_array(v, i)?;
                obj.insert(key, scalar_json(&value));
            }
            out.append_value(serde_json::Value::Object(obj).to_string());
        }
        Ok(Arc::new(out.finish()))
    });
    // information_schema._pg_expandarray(a): each element with its position, as
    // struct {x, n}; the rewriter unnests it (pgJDBC's getPrimaryKeys / getIndexInfo)
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name: "weir_expandarray",
        signature: Signature::any(1, Volatility::Immutable),
        ret: Box::new(|args| {
            let elem = match args.first() {
                Some(DataType::List(f)) => f.data_type().clone(),
                _ => DataType::Int32,
            };
            DataType::List(Arc::new(Field::new_list_field(
                DataType::Struct(expand_fields(elem)),
                true,
            )))
        }),
        imp: Box::new(|args, rows| {
            use datafusion::arrow::array::{AsArray, ListArray, StructArray};
            let Some(a) = args.first() else {
                return Err(datafusion::error::DataFusionError::Plan(
                    "_pg_expandarray takes an array".into(),
                ));
            };
            let Some(list) = a.as_list_opt::<i32>() else {
                return Err(datafusion::error::DataFusionError::Plan(
                    "_pg_expandarray takes an array".into(),
                ));
            };
            let values = list.values().clone();
            let offsets = list.offsets();
            let mut n = Vec::with_capacity(values.len());
            for w in offsets.windows(2) {
                n.extend(1..=(w[1] - w[0]));
            }
            let fields = expand_fields(values.data_type().clone());
            let st = StructArray::try_new(
                fields.clone(),
                vec![values, Arc::new(Int32Array::from(n)) as ArrayRef],
                None,
            )?;
            let out = ListArray::try_new(
                Arc::new(Field::new_list_field(DataType::Struct(fields), true)),
                offsets.clone(),
                Arc::new(st),
                list.nulls().cloned(),
            )?;
            debug_assert_eq!(out.len(), rows);
            Ok(Arc::new(out))
        }),
    }));
    ctx.register_udf(ScalarUDF::new_from_impl(Length {
        signature: Signature::user_defined(Volatility::Immutable),
        text: datafusion::functions::unicode::character_length(),
    }));
    // octet_length on text and bytea (DataFusion's takes text only)
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name: "octet_length",
        signature: Signature::any(1, Volatility::Immutable),
        ret: Box::new(|_| DataType::Int32),
        imp: Box::new(|args, rows| {
            let Some(a) = args.first() else {
                return Ok(Arc::new(Int32Array::new_null(rows)));
            };
            let a = match a.data_type() {
                DataType::Binary | DataType::LargeBinary | DataType::Utf8 | DataType::LargeUtf8 => {
                    a.clone()
                }
                DataType::Null => return Ok(Arc::new(Int32Array::new_null(rows))),
                _ => cast(a, &DataType::Utf8)?,
            };
            let n = datafusion::arrow::compute::kernels::length::length(&a)?;
            Ok(cast(&n, &DataType::Int32)?)
        }),
    }));
    // relation sizes: a table's rows as stored (`TableStore::stored_bytes`); the database
    // is its tables' rows. Not counted: secondary indexes' entries, views' state, the
    // store's own files beyond the rows (docs/sql.md)
    for name in [
        "pg_table_size",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_indexes_size",
    ] {
        let catalog = catalog.clone();
        register_fn(ctx, name, DataType::Int64, move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(Arc::new(datafusion::arrow::array::Int64Array::new_null(
                    rows,
                )));
            };
            let mut out = Vec::with_capacity(rows);
            for i in 0..rows {
                let Some(oid) = relation_arg(&catalog, a, i)? else {
                    out.push(None);
                    continue;
                };
                let rows_bytes = catalog
                    .get_by_oid(oid)
                    .and_then(|e| e.table.as_ref().map(|t| t.stored_bytes() as i64));
                // (an index, a view, a sequence: no rows of its own counted; an OID that
                // names nothing is NULL, as in Postgres)
                let known = rows_bytes.is_some() || relation_name_of_oid(&catalog, oid).is_some();
                out.push(match (name, rows_bytes) {
                    ("pg_indexes_size", _) if known => Some(0),
                    (_, Some(b)) => Some(b),
                    _ if known => Some(0),
                    _ => None,
                });
            }
            Ok(Arc::new(datafusion::arrow::array::Int64Array::from(out)))
        });
    }
    // Weir is never a standby replaying another's log
    register_fn(ctx, "pg_is_in_recovery", DataType::Boolean, |_, rows| {
        Ok(constant_bool(rows, false))
    });
    // when the server process started (uptime panels); its configuration was read then
    // (Weir reads no configuration file later)
    for name in ["pg_postmaster_start_time", "pg_conf_load_time"] {
        register_fn(
            ctx,
            name,
            DataType::Timestamp(
                datafusion::arrow::datatypes::TimeUnit::Microsecond,
                Some("+00:00".into()),
            ),
            |_, rows| {
                let start = crate::metrics::process_start_micros();
                Ok(Arc::new(
                    datafusion::arrow::array::TimestampMicrosecondArray::from(vec![start; rows])
                        .with_timezone("+00:00"),
                ))
            },
        );
    }
    {
        let catalog = catalog.clone();
        register_fn(ctx, "pg_database_size", DataType::Int64, move |_, rows| {
            let total: i64 = catalog
                .entries()
                .iter()
                .filter_map(|e| e.table.as_ref().map(|t| t.stored_bytes() as i64))
                .sum();
            Ok(Arc::new(datafusion::arrow::array::Int64Array::from(vec![
                total;
                rows
            ])))
        });
    }
    register_fn(ctx, "pg_size_pretty", DataType::Utf8, |args, rows| {
        let Some(a) = args.first() else {
            return Ok(constant_str(rows, None));
        };
        let a = cast(a, &DataType::Int64)?;
        let a = a
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .expect("cast to Int64 gives Int64Array");
        Ok(Arc::new(
            a.iter()
                .map(|v| v.map(size_pretty))
                .collect::<StringArray>(),
        ))
    });
    // `pg_settings.setting` of the session's value: in the setting's unit
    // (`catalog/rewrite.rs::session_views`)
    register_fn(ctx, "weir_setting_in_unit", DataType::Utf8, |args, rows| {
        let (Some(names), Some(values)) = (args.first(), args.get(1)) else {
            return Ok(constant_str(rows, None));
        };
        let (names, values) = (as_str(names)?, as_str(values)?);
        Ok(Arc::new(
            names
                .iter()
                .zip(values.iter())
                .map(|(n, v)| match (n, v) {
                    (Some(n), Some(v)) => Some(crate::server::settings::in_unit(
                        &crate::server::settings::normalize(n),
                        v,
                    )),
                    _ => None,
                })
                .collect::<StringArray>(),
        ))
    });
    register_fn(ctx, "pg_size_bytes", DataType::Int64, |args, rows| {
        let Some(a) = args.first() else {
            return Ok(Arc::new(datafusion::arrow::array::Int64Array::new_null(
                rows,
            )));
        };
        let a = as_str(a)?;
        let mut out = datafusion::arrow::array::Int64Builder::with_capacity(rows);
        for v in a.iter() {
            match v {
                None => out.append_null(),
                Some(text) => out.append_value(
                    size_bytes(text)
                        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?,
                ),
            }
        }
        Ok(Arc::new(out.finish()))
    });
    // LIKE ... ESCAPE 'c' with a pattern known only at run time (see the rewriter)
    register_fn(ctx, "weir_like_escape", DataType::Utf8, |args, rows| {
        let (Some(p), Some(e)) = (args.first(), args.get(1)) else {
            return Ok(constant_str(rows, None));
        };
        let (p, e) = (as_str(p)?, as_str(e)?);
        Ok(Arc::new(
            (0..rows)
                .map(|i| {
                    if p.is_null(i) || e.is_null(i) {
                        return None;
                    }
                    let esc = e.value(i).chars().next().unwrap_or('\\');
                    Some(crate::catalog::rewrite::backslash_pattern(p.value(i), esc))
                })
                .collect::<StringArray>(),
        ))
    });
    register_fn(ctx, "pg_encoding_to_char", DataType::Utf8, |_, rows| {
        Ok(constant_str(rows, Some("UTF8")))
    });
    {
        let catalog = catalog.clone();
        register_fn(ctx, "pg_get_userbyid", DataType::Utf8, move |args, rows| {
            map_u32_to_str(args, rows, |o| {
                Some(
                    catalog
                        .role_name(o)
                        .unwrap_or_else(|| format!("unknown (OID={o})")),
                )
            })
        });
    }
    for name in [
        "pg_function_is_visible",
        "pg_collation_is_visible",
        "pg_opclass_is_visible",
        "pg_opfamily_is_visible",
        "pg_operator_is_visible",
        "pg_conversion_is_visible",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "has_any_column_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
    ] {
        register_fn(ctx, name, DataType::Boolean, |_, rows| {
            Ok(constant_bool(rows, true))
        });
    }
    register_fn(
        ctx,
        "pg_relation_is_publishable",
        DataType::Boolean,
        |_, rows| Ok(constant_bool(rows, false)),
    );
    // pg_get_function_result(oid) / pg_get_function_arguments(oid) /
    // pg_get_function_identity_arguments(oid) / pg_get_functiondef(oid): a SQL function's
    // signature as psql's \df shows it (`integer`; `a integer, b integer`), its CREATE
    // statement, and (pg_get_function_sqlbody) a `RETURN expr` body; NULL for another OID
    for (name, what) in [
        ("pg_get_function_result", 0),
        ("pg_get_function_arguments", 1),
        ("pg_get_function_identity_arguments", 4),
        ("pg_get_functiondef", 2),
        ("pg_get_function_sqlbody", 3),
    ] {
        let catalog = catalog.clone();
        register_fn(ctx, name, DataType::Utf8, move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(constant_str(rows, None));
            };
            let a = as_u32(a)?;
            Ok(Arc::new(
                a.iter()
                    .map(|o| {
                        let f = catalog.sql_function_by_oid(o?)?;
                        match what {
                            0 => Some(
                                crate::catalog::sql_functions::SqlFunction::type_named(&f.returns)
                                    .0,
                            ),
                            1 => Some(f.arguments_text()),
                            4 => Some(f.identity_arguments_text()),
                            2 => Some(f.definition()),
                            // (a `RETURN expr` body; one `AS '...'` is `prosrc`)
                            _ => f.source.is_none().then(|| format!("RETURN {}", f.body)),
                        }
                    })
                    .collect::<StringArray>(),
            ))
        });
    }
    // obj_description(oid [, catalog]) / col_description(table oid, column number): what
    // COMMENT ON gave a relation (catalog pg_class) or one of its columns
    {
        let catalog = catalog.clone();
        register_fn(ctx, "obj_description", DataType::Utf8, move |args, rows| {
            let Some(o) = args.first() else {
                return Ok(constant_str(rows, None));
            };
            let o = as_u32(o)?;
            let which = args.get(1).map(as_str).transpose()?;
            let entries = catalog.entries();
            let types = catalog.enum_types();
            let domains = catalog.all_domains();
            Ok(Arc::new(
                (0..rows)
                    .map(|i| {
                        if o.is_null(i) || which.as_ref().is_some_and(|w| w.is_null(i)) {
                            return None;
                        }
                        let (oid, class) = (o.value(i), which.as_ref().map(|w| w.value(i)));
                        // a relation's, an index's (pg_class), a constraint's, a type's, an
                        // extension's
                        let relation = (class.is_none() || class == Some("pg_class"))
                            .then(|| entries.iter().find(|e| e.desc.oid == oid))
                            .flatten()
                            .and_then(|e| e.desc.comments.relation.clone());
                        let class_oid = match class {
                            None => None,
                            Some("pg_class") => Some(1259),
                            Some("pg_constraint") => Some(2606),
                            Some("pg_type") => Some(1247),
                            Some("pg_extension") => Some(3079),
                            Some("pg_namespace") => return catalog.schema_comment(oid),
                            // the one procedural language, plpgsql's (listed once its
                            // extension is installed), described as its extension is
                            Some("pg_language") => {
                                return (oid == 13563)
                                    .then(|| {
                                        catalog
                                            .installed_extensions()
                                            .iter()
                                            .find(|x| x.name == "plpgsql")
                                            .map(|x| x.comment.to_owned())
                                    })
                                    .flatten();
                            }
                            Some(_) => return None,
                        };
                        relation
                            .or_else(|| {
                                entries.iter().find_map(|e| {
                                    e.desc.object_comments().into_iter().find_map(|(c, x, t)| {
                                        (x == oid && class_oid.is_none_or(|k| k == c)).then_some(t)
                                    })
                                })
                            })
                            .or_else(|| {
                                types
                                    .iter()
                                    .filter(|_| class_oid.is_none_or(|k| k == 1247))
                                    .find(|t| t.oid == oid)
                                    .and_then(|t| t.comment.clone())
                            })
                            .or_else(|| {
                                domains
                                    .iter()
                                    .filter(|_| class_oid.is_none_or(|k| k == 1247))
                                    .find(|d| d.oid == oid)
                                    .and_then(|d| d.comment.clone())
                            })
                            .or_else(|| {
                                catalog
                                    .installed_extensions()
                                    .iter()
                                    .filter(|_| class_oid.is_none_or(|k| k == 3079))
                                    .find(|x| x.oid == oid)
                                    .map(|x| x.comment.to_owned())
                            })
                    })
                    .collect::<StringArray>(),
            ))
        });
    }
    {
        let catalog = catalog.clone();
        register_fn(ctx, "col_description", DataType::Utf8, move |args, rows| {
            let (Some(o), Some(n)) = (args.first(), args.get(1)) else {
                return Ok(constant_str(rows, None));
            };
            let o = as_u32(o)?;
            let n = cast(n, &DataType::Int64)?;
            let n = datafusion::arrow::array::AsArray::as_primitive::<
                datafusion::arrow::datatypes::Int64Type,
            >(&n);
            let entries = catalog.entries();
            Ok(Arc::new(
                (0..rows)
                    .map(|i| {
                        if o.is_null(i) || n.is_null(i) || n.value(i) < 1 {
                            return None;
                        }
                        let e = entries.iter().find(|e| e.desc.oid == o.value(i))?;
                        let col = e.desc.columns.get(n.value(i) as usize - 1)?;
                        e.desc
                            .comments
                            .columns
                            .iter()
                            .find(|(c, _)| *c == col.name)
                            .map(|(_, t)| t.clone())
                    })
                    .collect::<StringArray>(),
            ))
        });
    }
    for name in [
        "shobj_description",
        "pg_get_statisticsobjdef_columns",
        "pg_get_triggerdef",
        "pg_get_ruledef",
        "pg_get_partkeydef",
    ] {
        register_fn(ctx, name, DataType::Utf8, |_, rows| {
            Ok(constant_str(rows, None))
        });
    }
    // pg_get_serial_sequence(table, column): the sequence a serial or identity column
    // owns (`public.t_c_seq`), NULL for other columns
    let cat = catalog.clone();
    register_fn(
        ctx,
        "pg_get_serial_sequence",
        DataType::Utf8,
        move |args, rows| {
            let (Some(t), Some(c)) = (args.first(), args.get(1)) else {
                return Ok(constant_str(rows, None));
            };
            let (t, c) = (as_str(t)?, as_str(c)?);
            Ok(Arc::new(
                (0..rows)
                    .map(|i| {
                        if t.is_null(i) || c.is_null(i) {
                            return None;
                        }
                        // (the table as an identifier, maybe quoted and qualified: Drizzle's
                        // `'"public"."t"'`)
                        let table = unqualified_name(t.value(i));
                        let seq = cat
                            .get(&table)?
                            .desc
                            .owned_sequence(c.value(i).trim_matches('"'))?;
                        Some(crate::catalog::schemas::qualified_relation(&seq))
                    })
                    .collect::<StringArray>(),
            ))
        },
    );
    // pg_get_expr(text, oid [, pretty]): our stored expressions are already text, as the
    // deparser gives them; pretty drops the parentheses around the whole (`a * 2`)
    register_fn(
        ctx,
        "pg_get_expr",
        DataType::Utf8,
        |args, rows| match args.first() {
            Some(a) => {
                let texts = as_str(a)?;
                let pretty = match args.get(2) {
                    Some(p) => Some(cast(p, &DataType::Boolean)?),
                    None => None,
                };
                let pretty = pretty.as_ref().map(|p| p.as_boolean());
                Ok(Arc::new(
                    (0..texts.len())
                        .map(|i| {
                            let t = texts.is_valid(i).then(|| texts.value(i))?;
                            Some(match pretty {
                                Some(p) if p.is_valid(i) && p.value(i) => {
                                    crate::sql::parser::strip_outer_parens(t)
                                }
                                _ => t,
                            })
                        })
                        .collect::<StringArray>(),
                ) as ArrayRef)
            }
            None => Ok(constant_str(rows, None)),
        },
    );
    {
        let catalog = catalog.clone();
        // pg_get_indexdef(index [, column, pretty]): the definition, or with column k > 0
        // the k-th key column's name
        register_fn(ctx, "pg_get_indexdef", DataType::Utf8, move |args, rows| {
            let column = match args.get(1) {
                Some(c) => Some(cast(c, &DataType::Int32)?),
                None => None,
            };
            let column = column
                .as_ref()
                .and_then(|c| c.as_any().downcast_ref::<Int32Array>());
            // pretty (psql's \d): a partial index's predicate without its parentheses
            let pretty = match args.get(2) {
                Some(p) => Some(cast(p, &DataType::Boolean)?),
                None => None,
            };
            let pretty = pretty.as_ref().map(|p| p.as_boolean().clone());
            let Some(a) = args.first() else {
                return Ok(constant_str(rows, None));
            };
            let a = as_u32(a)?;
            let entries = catalog.entries();
            Ok(Arc::new(
                (0..rows)
                    .map(|i| {
                        if a.is_null(i) {
                            return None;
                        }
                        let oid = a.value(i);
                        let (e, ix) = entries.iter().find_map(|e| {
                            e.desc
                                .all_indexes()
                                .into_iter()
                                .find(|i| i.oid == oid)
                                .map(|i| (e, i))
                        })?;
                        let k = column
                            .map(|c| if c.is_null(i) { 0 } else { c.value(i) })
                            .unwrap_or(0);
                        if k > 0 {
                            return ix.columns.get(k as usize - 1).cloned();
                        }
                        let pretty = pretty.as_ref().is_some_and(|p| p.is_valid(i) && p.value(i));
                        Some(ix.definition(&e.desc.name, pretty))
                    })
                    .collect::<StringArray>(),
            ))
        });
    }
    {
        let catalog = catalog.clone();
        register_fn(
            ctx,
            "pg_get_constraintdef",
            DataType::Utf8,
            move |args, rows| {
                // pg_get_constraintdef(oid, pretty): pretty leaves out the parentheses
                // Postgres puts around an operator expression (the same for all rows here)
                let pretty = match args.get(1) {
                    Some(p) => {
                        let p = cast(p, &DataType::Boolean)?;
                        let p = datafusion::arrow::array::AsArray::as_boolean(&p);
                        (0..p.len()).any(|i| p.is_valid(i) && p.value(i))
                    }
                    None => false,
                };
                let domains = catalog.all_domains();
                map_u32_to_str(args, rows, |oid| {
                    // a domain's CHECK
                    if let Some(c) = domains
                        .iter()
                        .flat_map(|d| d.checks.iter())
                        .find(|c| c.oid == oid)
                    {
                        let expr = match pretty {
                            true => crate::sql::parser::shown_expr(&c.expr),
                            false => crate::sql::parser::shown_expr_deparsed(&c.expr),
                        };
                        let mut def = format!("CHECK ({expr})");
                        if c.not_valid {
                            def.push_str(" NOT VALID");
                        }
                        return Some(def);
                    }
                    catalog.entries().iter().find_map(|e| {
                        if e.desc.pkey_constraint_oid() == Some(oid) {
                            return Some(format!(
                                "PRIMARY KEY ({})",
                                e.desc.primary_key.join(", ")
                            ));
                        }
                        if let Some(ix) = e
                            .desc
                            .indexes
                            .iter()
                            .find(|i| i.constraint && i.oid + 1 == oid)
                        {
                            return Some(format!(
                                "UNIQUE {}({})",
                                if ix.nulls_not_distinct {
                                    "NULLS NOT DISTINCT "
                                } else {
                                    ""
                                },
                                ix.columns.join(", ")
                            ));
                        }
                        // NOT VALID said after a constraint added so and not validated since
                        let not_valid = |name: &str, def: String| match e
                            .desc
                            .not_valid
                            .iter()
                            .any(|n| n == name)
                        {
                            true => format!("{def} NOT VALID"),
                            false => def,
                        };
                        if let Some(fk) = e.desc.foreign_keys.iter().find(|f| f.oid == oid) {
                            return Some(not_valid(&fk.name, fk.definition()));
                        }
                        (0..e.desc.checks.len())
                            .find(|&k| e.desc.check_constraint_oid(k) == oid)
                            .map(|k| {
                                let (name, expr) = &e.desc.checks[k];
                                // Postgres prints an operator expression in parentheses
                                // of its own: `CHECK ((a > 0))`, `CHECK (flag)`
                                let def = match pretty {
                                    true => {
                                        format!("CHECK ({})", crate::sql::parser::shown_expr(expr))
                                    }
                                    false => format!(
                                        "CHECK ({})",
                                        crate::sql::parser::shown_expr_deparsed(expr)
                                    ),
                                };
                                not_valid(name, def)
                            })
                    })
                })
            },
        );
    }
    {
        let catalog = catalog.clone();
        register_fn(ctx, "pg_get_viewdef", DataType::Utf8, move |args, rows| {
            let definition = |oid: u32| {
                catalog
                    .get_by_oid(oid)
                    .and_then(|e| e.desc.query.clone())
                    .map(|q| format!(" {q};"))
            };
            // (also by name: `pg_get_viewdef('v')`, Postgres' older form)
            if let Some(names) = args.first().filter(|a| {
                matches!(
                    a.data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                )
            }) {
                let names = as_str(names)?;
                let mut out = Vec::with_capacity(names.len());
                for n in names.iter() {
                    out.push(match n {
                        None => None,
                        Some(n) => match relation_oid_of_name(&catalog, n) {
                            Some(oid) => definition(oid),
                            None => {
                                return Err(datafusion::error::DataFusionError::External(
                                    Box::new(crate::error::WeirError::undefined_table(n)),
                                ));
                            }
                        },
                    });
                }
                return Ok(Arc::new(StringArray::from(out)));
            }
            map_u32_to_str(args, rows, definition)
        });
    }
    register_fn(ctx, "quote_ident", DataType::Utf8, |args, rows| {
        let Some(a) = args.first() else {
            return Ok(constant_str(rows, None));
        };
        let s = as_str(a)?;
        Ok(Arc::new(
            s.iter()
                .map(|v| v.map(quote_ident))
                .collect::<StringArray>(),
        ))
    });
    // ::regclass and friends (the rewriter turns casts into these calls). A name becomes
    // the OID; an OID becomes the name, which is how a regclass value prints.
    register_regclass(ctx, catalog.clone(), Arc::new(|| vec!["public".to_owned()]));
    {
        let (c1, c2) = (catalog.clone(), catalog.clone());
        reg_cast(
            ctx,
            "weir_regtype",
            Arc::new(move |s: &str| {
                type_oid_of_name(s).or_else(|| c1.user_type_oid(&unqualified_name(s)))
            }),
            Arc::new(move |o| format_type(o, -1).or_else(|| c2.user_type_shown(o))),
        );
    }
    {
        let (c1, c2) = (catalog.clone(), catalog.clone());
        reg_cast(
            ctx,
            "weir_regnamespace",
            Arc::new(move |s: &str| c1.namespace_oid(&unqualified_name(s))),
            Arc::new(move |o| {
                c2.namespace_name(o)
                    .map(|n| crate::sql::pg_text::quote_ident(&n))
            }),
        );
    }
    {
        let (c1, c2) = (catalog.clone(), catalog.clone());
        reg_cast(
            ctx,
            "weir_regrole",
            Arc::new(move |s: &str| c1.role(s.trim_matches('"')).map(|r| r.oid)),
            Arc::new(move |o| c2.role_name(o)),
        );
    }
    // regproc: the I/O functions of pg_proc and the SQL functions, by name or OID
    let c2 = catalog.clone();
    reg_cast(
        ctx,
        "weir_regproc",
        proc_of_name(catalog.clone()),
        Arc::new(move |o| {
            crate::catalog::pg_catalog::io_procs()
                .iter()
                .find(|(oid, _)| *oid == o)
                .map(|(_, n)| n.clone())
                .or_else(|| c2.sql_function_by_oid(o).map(|f| f.name))
        }),
    );
    // to_regproc / to_regprocedure / to_regnamespace / to_regrole: the OID, NULL for no
    // such object (the casts fail instead)
    let lookups: [(&'static str, NameToOid); 4] = [
        ("to_regproc", proc_of_name(catalog.clone())),
        ("to_regprocedure", proc_of_name(catalog.clone())),
        ("to_regnamespace", {
            let c = catalog.clone();
            Arc::new(move |s: &str| c.namespace_oid(&unqualified_name(s)))
        }),
        ("to_regrole", {
            let c = catalog.clone();
            Arc::new(move |s: &str| c.role(s.trim_matches('"')).map(|r| r.oid))
        }),
    ];
    for (name, of_name) in lookups {
        register_fn(ctx, name, DataType::UInt32, move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(Arc::new(UInt32Array::new_null(rows)));
            };
            let s = as_str(a)?;
            Ok(Arc::new(
                s.iter()
                    .map(|v| v.and_then(|v| of_name(v)))
                    .collect::<UInt32Array>(),
            ))
        });
    }
    let types = catalog.clone();
    register_fn(ctx, "to_regtype", DataType::UInt32, move |args, rows| {
        let Some(a) = args.first() else {
            return Ok(Arc::new(UInt32Array::new_null(rows)));
        };
        let s = as_str(a)?;
        Ok(Arc::new(
            s.iter()
                .map(|v| {
                    v.and_then(|v| {
                        type_oid_of_name(v).or_else(|| types.user_type_oid(&unqualified_name(v)))
                    })
                })
                .collect::<UInt32Array>(),
        ))
    });
    {
        let catalog = catalog.clone();
        register_fn(ctx, "to_regclass", DataType::UInt32, move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(Arc::new(UInt32Array::new_null(rows)));
            };
            let s = as_str(a)?;
            Ok(Arc::new(
                s.iter()
                    .map(|v| v.and_then(|n| relation_oid_of_name(&catalog, n)))
                    .collect::<UInt32Array>(),
            ))
        });
    }
}

type NameToOid = Arc<dyn Fn(&str) -> Option<u32> + Send + Sync>;

/// A function's OID by name (`regproc`'s input): the I/O functions of pg_proc and the SQL
/// functions; a `(argument types)` suffix (`regprocedure`) is not read.
fn proc_of_name(catalog: Arc<Catalog>) -> NameToOid {
    Arc::new(move |n: &str| {
        let n = n.split('(').next().unwrap_or(n).trim();
        let n = n.trim_start_matches("pg_catalog.").trim_matches('"');
        crate::catalog::pg_catalog::io_procs()
            .iter()
            .find(|(_, name)| name == n)
            .map(|(o, _)| *o)
            .or_else(|| {
                let n = n.trim_start_matches("public.").trim_matches('"');
                catalog.sql_function(n).map(|f| f.oid)
            })
    })
}
type OidToName = Arc<dyn Fn(u32) -> Option<String> + Send + Sync>;

/// `x::regclass` and friends. On text the cast gives the OID (what comparisons with oid
/// columns need); on an OID it gives the name. `<name>_out` is the same cast shown as a
/// result column, where Postgres prints the name either way (the rewriter uses it for
/// casts that are a whole select item).
fn reg_cast(ctx: &SessionContext, name: &'static str, to_oid: NameToOid, to_name: OidToName) {
    use crate::error::sqlstate;
    // what a name that names nothing is, in Postgres' words
    let (code, what) = match name {
        "weir_regclass" => (sqlstate::UNDEFINED_TABLE, "relation"),
        "weir_regtype" => (sqlstate::UNDEFINED_OBJECT, "type"),
        "weir_regnamespace" => (sqlstate::INVALID_SCHEMA_NAME, "schema"),
        "weir_regrole" => (sqlstate::UNDEFINED_OBJECT, "role"),
        _ => (sqlstate::UNDEFINED_FUNCTION, "function"),
    };
    let lookup = {
        let to_oid = to_oid.clone();
        move |n: &str| -> DfResult<u32> {
            to_oid(n).or_else(|| n.parse::<u32>().ok()).ok_or_else(|| {
                let n = crate::sql::search_path::written_text(n);
                datafusion::error::DataFusionError::External(Box::new(
                    crate::error::WeirError::new(code, format!("{what} \"{n}\" does not exist")),
                ))
            })
        }
    };
    let lookup = Arc::new(lookup);
    {
        let lookup = lookup.clone();
        let to_name = to_name.clone();
        ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
            name,
            signature: any_args(),
            ret: Box::new(|args| match args.first() {
                Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => DataType::UInt32,
                // `'{int,int8}'::regtype[]`: each name's OID
                Some(DataType::List(_)) => {
                    DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, true)))
                }
                _ => DataType::Utf8,
            }),
            imp: Box::new(move |args, rows| {
                let Some(a) = args.first() else {
                    return Ok(Arc::new(StringArray::new_null(rows)));
                };
                if let Some(list) = a
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::ListArray>()
                {
                    let names = as_str(list.values())?;
                    let oids: Vec<Option<u32>> = names
                        .iter()
                        .map(|v| v.map(|n| lookup(n)).transpose())
                        .collect::<DfResult<_>>()?;
                    return Ok(Arc::new(datafusion::arrow::array::ListArray::try_new(
                        Arc::new(Field::new_list_field(DataType::UInt32, true)),
                        list.offsets().clone(),
                        Arc::new(UInt32Array::from(oids)),
                        list.nulls().cloned(),
                    )?));
                }
                match a.data_type() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        let s = as_str(a)?;
                        let out: Vec<Option<u32>> = s
                            .iter()
                            .map(|v| v.map(|n| lookup(n)).transpose())
                            .collect::<DfResult<_>>()?;
                        Ok(Arc::new(UInt32Array::from(out)))
                    }
                    _ => map_u32_to_str(args, rows, |o| {
                        Some(to_name(o).unwrap_or_else(|| o.to_string()))
                    }),
                }
            }),
        }));
    }
    let out_name: &'static str = match name {
        "weir_regclass" => "weir_regclass_out",
        "weir_regtype" => "weir_regtype_out",
        "weir_regnamespace" => "weir_regnamespace_out",
        "weir_regrole" => "weir_regrole_out",
        _ => "weir_regproc_out",
    };
    ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
        name: out_name,
        signature: any_args(),
        ret: Box::new(|_| DataType::Utf8),
        imp: Box::new(move |args, rows| {
            let Some(a) = args.first() else {
                return Ok(Arc::new(StringArray::new_null(rows)));
            };
            let shown = |o: u32| to_name(o).unwrap_or_else(|| o.to_string());
            match a.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    let s = as_str(a)?;
                    let out: Vec<Option<String>> = s
                        .iter()
                        .map(|v| v.map(|n| lookup(n).map(shown)).transpose())
                        .collect::<DfResult<_>>()?;
                    Ok(Arc::new(StringArray::from(out)))
                }
                _ => map_u32_to_str(args, rows, |o| Some(shown(o))),
            }
        }),
    }));
}

pub use crate::sql::pg_text::quote_ident;

/// Gives Postgres type names their Arrow types, carrying the declared type in field
/// metadata so results report it on the wire.
/// Enum types (`CREATE TYPE ... AS ENUM`) are looked up in the catalog.
pub struct WeirTypePlanner {
    /// None: built-in types only (expressions planned where no catalog is, e.g. a domain's
    /// CHECK).
    pub catalog: Option<Arc<Catalog>>,
}

impl std::fmt::Debug for WeirTypePlanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeirTypePlanner")
    }
}

impl TypePlanner for WeirTypePlanner {
    fn plan_type_field(&self, sql_type: &ast::DataType) -> DfResult<Option<FieldRef>> {
        // an array of a type that does not exist: the array type is what does not exist
        if let ast::DataType::Array(
            ast::ArrayElemTypeDef::SquareBracket(inner, _)
            | ast::ArrayElemTypeDef::AngleBracket(inner),
        ) = sql_type
            && let ast::DataType::Custom(..) = inner.as_ref()
            && let Err(e) = self.plan_type_field(inner)
        {
            return Err(match e {
                datafusion::error::DataFusionError::External(b) => {
                    match b.downcast::<crate::error::WeirError>() {
                        Ok(w) => datafusion::error::DataFusionError::External(Box::new(
                            w.of_array_type(),
                        )),
                        Err(b) => datafusion::error::DataFusionError::External(b),
                    }
                }
                other => other,
            });
        }
        if let ast::DataType::Custom(name, args) = sql_type
            && args.is_empty()
            && let Some(t) = self
                .catalog
                .as_ref()
                .and_then(|c| c.enum_type(&crate::catalog::user_types::user_type_name(name)))
        {
            return Ok(Some(Arc::new(t.sql_type().field("", true))));
        }
        // a domain: its base type, the domain in the field (a cast to it is checked,
        // `catalog::pg_semantics`)
        if let ast::DataType::Custom(name, args) = sql_type
            && args.is_empty()
            && let Some(d) = self
                .catalog
                .as_ref()
                .and_then(|c| c.domain(&crate::catalog::user_types::user_type_name(name)))
        {
            let f = d.base.field("", true);
            let mut meta = f.metadata().clone();
            meta.insert(
                crate::sql::types::DOMAIN_KEY.to_owned(),
                serde_json::to_string(&d).unwrap_or_default(),
            );
            return Ok(Some(Arc::new(f.with_metadata(meta))));
        }
        // `timestamp` / `timestamptz` are microseconds, as in Postgres (DataFusion's default
        // is nanoseconds): casts and literals agree with table columns, and `infinity` (the
        // type's ends) stays infinity when it meets a column
        if let ast::DataType::Timestamp(None, tz) = sql_type {
            let zone = match tz {
                ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone => {
                    Some(crate::sql::types::SESSION_ZONE.into())
                }
                _ => None,
            };
            return Ok(Some(Arc::new(Field::new(
                "",
                DataType::Timestamp(TimeUnit::Microsecond, zone),
                true,
            ))));
        }
        // `time` likewise (a cast of a column's microseconds to DataFusion's nanoseconds
        // multiplied the junk under its NULLs: an overflow)
        if let ast::DataType::Time(
            None,
            ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone,
        ) = sql_type
        {
            return Ok(Some(Arc::new(Field::new(
                "",
                DataType::Time64(TimeUnit::Microsecond),
                true,
            ))));
        }
        let declared = match sql_type {
            ast::DataType::JSONB => Some(SqlType::Jsonb),
            ast::DataType::JSON => Some(SqlType::Json),
            ast::DataType::Uuid => Some(SqlType::Uuid),
            // plain `varchar` too: the column is `character varying` on the wire, as in
            // Postgres, and a cast to it drops another row's `varchar(n)`
            ast::DataType::Varchar(_)
            | ast::DataType::CharacterVarying(_)
            | ast::DataType::Char(_)
            | ast::DataType::Character(_) => SqlType::from_ast(sql_type).ok(),
            ast::DataType::Numeric(_) | ast::DataType::Decimal(_) => {
                SqlType::from_ast(sql_type).ok()
            }
            ast::DataType::Custom(_, args) if args.is_empty() => {
                match SqlType::from_ast(sql_type) {
                    Ok(t) => Some(t),
                    // neither built in nor the catalog's: Postgres' 42704
                    Err(e) => {
                        return Err(datafusion::error::DataFusionError::External(Box::new(e)));
                    }
                }
            }
            ast::DataType::Custom(..) => SqlType::from_ast(sql_type).ok(),
            _ => None,
        };
        Ok(declared.map(|t| Arc::new(t.field("", true))))
    }
}

/// Functions that read or write the server's files: refused to everyone, superusers
/// included (nothing in SQL touches the server's files; COPY is refused the same way).
const SERVER_FILE_FUNCTIONS: &[&str] = &[
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
    "pg_file_write",
    "lo_import",
    "lo_export",
];

fn register_server_file_refusals(ctx: &SessionContext) {
    for name in SERVER_FILE_FUNCTIONS {
        register_fn(ctx, name, DataType::Utf8, move |_, _| {
            Err(datafusion::error::DataFusionError::External(Box::new(
                crate::error::WeirError::new(
                    crate::error::sqlstate::INSUFFICIENT_PRIVILEGE,
                    format!("permission denied for function {name}"),
                )
                .with_hint("Weir never reads or writes files on the server from SQL."),
            )))
        });
    }
}

/// Row `i` of a role argument, by OID or by name (NULL: None); 42704 for a name no role has.
fn role_oid_at(catalog: &Catalog, a: &ArrayRef, i: usize) -> DfResult<Option<u32>> {
    if a.data_type().is_integer() {
        let v = as_u32(a)?;
        return Ok((!v.is_null(i)).then(|| v.value(i)));
    }
    let v = as_str(a)?;
    if v.is_null(i) {
        return Ok(None);
    }
    match catalog.role(v.value(i)) {
        Some(r) => Ok(Some(r.oid)),
        None => Err(datafusion::error::DataFusionError::External(Box::new(
            crate::error::WeirError::new(
                crate::error::sqlstate::UNDEFINED_OBJECT,
                format!("role \"{}\" does not exist", v.value(i)),
            ),
        ))),
    }
}

/// Who the session is, for the functions that answer it: `(current role, session user)`.
pub type WhoAmI = Arc<dyn Fn() -> (u32, u32) + Send + Sync>;

/// Register the functions that depend on the session's role: `current_user`,
/// `session_user`, `user`, `current_role` and `has_table_privilege`.
pub fn register_identity(ctx: &SessionContext, catalog: Arc<Catalog>, who: WhoAmI, pid: i32) {
    // the pid clients got in BackendKeyData (psycopg's `info.backend_pid`, pg_stat_ssl.pid)
    register_fn(ctx, "pg_backend_pid", DataType::Int32, move |_, rows| {
        Ok(Arc::new(Int32Array::from(vec![pid; rows])))
    });
    // inet_client_addr() / inet_client_port(): the client's address of this connection
    // (an `inet`: `pg_functions::declared_result`)
    let client = {
        let catalog = catalog.clone();
        move || catalog.connections.lock().get(&pid).and_then(|c| c.client)
    };
    {
        let client = client.clone();
        register_fn(ctx, "inet_client_addr", DataType::Utf8, move |_, rows| {
            let addr =
                client().and_then(|a| crate::sql::inet::canonical_inet(&a.ip().to_string()).ok());
            Ok(constant_str(rows, addr.as_deref()))
        });
    }
    register_fn(ctx, "inet_client_port", DataType::Int32, move |_, rows| {
        let port = client().map(|a| a.port() as i32);
        Ok(Arc::new(Int32Array::from(vec![port; rows])))
    });
    // inet_server_addr() / inet_server_port(): the server's end of this connection
    let server = {
        let catalog = catalog.clone();
        move || catalog.connections.lock().get(&pid).and_then(|c| c.server)
    };
    {
        let server = server.clone();
        register_fn(ctx, "inet_server_addr", DataType::Utf8, move |_, rows| {
            let addr =
                server().and_then(|a| crate::sql::inet::canonical_inet(&a.ip().to_string()).ok());
            Ok(constant_str(rows, addr.as_deref()))
        });
    }
    register_fn(ctx, "inet_server_port", DataType::Int32, move |_, rows| {
        let port = server().map(|a| a.port() as i32);
        Ok(Arc::new(Int32Array::from(vec![port; rows])))
    });
    for name in ["current_user", "user", "current_role"] {
        let (catalog, who) = (catalog.clone(), who.clone());
        register_fn(ctx, name, DataType::Utf8, move |_, rows| {
            Ok(constant_str(rows, catalog.role_name(who().0).as_deref()))
        });
    }
    {
        let (catalog, who) = (catalog.clone(), who.clone());
        register_fn(ctx, "session_user", DataType::Utf8, move |_, rows| {
            Ok(constant_str(rows, catalog.role_name(who().1).as_deref()))
        });
    }
    for (name, terminate) in [("pg_cancel_backend", false), ("pg_terminate_backend", true)] {
        let (catalog, who) = (catalog.clone(), who.clone());
        register_fn(ctx, name, DataType::Boolean, move |args, rows| {
            // (pid) or, terminating, (pid, timeout): the timeout is not waited for
            let Some(pids) = args.first() else {
                return Err(datafusion::error::DataFusionError::Plan(format!(
                    "{name} takes a backend's pid"
                )));
            };
            let pids = cast(pids, &DataType::Int32)?;
            let pids = pids.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
            let me = who().0;
            let mut out = BooleanBuilder::with_capacity(rows);
            for i in 0..rows {
                if pids.is_null(i) {
                    out.append_null();
                    continue;
                }
                let target = catalog
                    .connections
                    .lock()
                    .get(&pids.value(i))
                    .map(|c| (c.user.clone(), c.signals.clone()));
                // not a connection of this server: false (Postgres also warns)
                let Some((user, Some(signals))) = target else {
                    out.append_value(false);
                    continue;
                };
                let target_role = catalog.role(&user);
                let target_super = target_role.as_ref().is_some_and(|r| r.superuser);
                let allowed = catalog.is_superuser(me)
                    || (!target_super
                        && (catalog
                            .has_owner_rights(me, crate::catalog::roles::PG_SIGNAL_BACKEND)
                            || target_role
                                .is_some_and(|r| r.oid == me || catalog.is_member_of(me, r.oid))));
                if !allowed {
                    let message = match (terminate, target_super) {
                        (false, true) => "must be a superuser to cancel superuser query",
                        (true, true) => "must be a superuser to terminate superuser process",
                        (false, false) => {
                            "must be a member of the role whose query is being canceled or member of pg_signal_backend"
                        }
                        (true, false) => {
                            "must be a member of the role whose process is being terminated or member of pg_signal_backend"
                        }
                    };
                    return Err(datafusion::error::DataFusionError::External(Box::new(
                        crate::error::WeirError::new(
                            crate::error::sqlstate::INSUFFICIENT_PRIVILEGE,
                            message,
                        ),
                    )));
                }
                if terminate {
                    signals.terminate();
                } else {
                    signals.cancel();
                }
                out.append_value(true);
            }
            Ok(Arc::new(out.finish()))
        });
    }
    {
        let (catalog, who) = (catalog.clone(), who.clone());
        register_fn(ctx, "pg_has_role", DataType::Boolean, move |args, rows| {
            // (role, privilege) or (user, role, privilege); names or OIDs
            let (user_arg, role_arg, priv_arg) = match args {
                [r, p] => (None, r, p),
                [u, r, p] => (Some(u), r, p),
                _ => {
                    return Err(datafusion::error::DataFusionError::Plan(
                        "pg_has_role takes (role, privilege) or (user, role, privilege)".into(),
                    ));
                }
            };
            let role_at = |a: &ArrayRef, i: usize| role_oid_at(&catalog, a, i);
            let privs = as_str(priv_arg)?;
            let mut out = BooleanBuilder::with_capacity(rows);
            for i in 0..rows {
                let user = match user_arg {
                    Some(u) => role_at(u, i)?,
                    None => Some(who().0),
                };
                let (Some(user), Some(role), false) =
                    (user, role_at(role_arg, i)?, privs.is_null(i))
                else {
                    out.append_null();
                    continue;
                };
                let mut any = false;
                for word in privs.value(i).split(',') {
                    let word = word.trim();
                    let word = word
                        .strip_suffix(" WITH ADMIN OPTION")
                        .unwrap_or(word)
                        .trim();
                    any |= match word.to_ascii_uppercase().as_str() {
                        // a member (directly or through other roles), or a superuser
                        "MEMBER" | "SET" => user == role || catalog.is_member_of(user, role),
                        // has the role's privileges now (inherits them)
                        "USAGE" => catalog.has_owner_rights(user, role),
                        _ => {
                            return Err(datafusion::error::DataFusionError::External(Box::new(
                                crate::error::WeirError::new(
                                    crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                                    format!("unrecognized privilege type: \"{word}\""),
                                ),
                            )));
                        }
                    };
                }
                out.append_value(any);
            }
            Ok(Arc::new(out.finish()))
        });
    }
    register_fn(
        ctx,
        "has_table_privilege",
        DataType::Boolean,
        move |args, rows| {
            // (table, privilege) or (role, table, privilege); names or OIDs
            let (role_arg, table_arg, priv_arg) = match args {
                [t, p] => (None, t, p),
                [r, t, p] => (Some(r), t, p),
                _ => {
                    return Err(datafusion::error::DataFusionError::Plan(
                        "has_table_privilege takes (table, privilege) or (role, table, privilege)"
                            .into(),
                    ));
                }
            };
            let role_at = |i: usize| -> DfResult<Option<u32>> {
                match role_arg {
                    Some(a) => role_oid_at(&catalog, a, i),
                    None => Ok(Some(who().0)),
                }
            };
            let tables_by_oid = table_arg.data_type().is_integer();
            let table_oids = if tables_by_oid {
                Some(as_u32(table_arg)?)
            } else {
                None
            };
            let table_names = if tables_by_oid {
                None
            } else {
                Some(as_str(table_arg)?)
            };
            let privs = as_str(priv_arg)?;
            let mut out = BooleanBuilder::with_capacity(rows);
            for i in 0..rows {
                let entry = match (&table_oids, &table_names) {
                    (Some(o), _) if !o.is_null(i) => catalog.get_by_oid(o.value(i)),
                    (_, Some(n)) if !n.is_null(i) => {
                        // a name as SQL writes it: `t`, `public.t`, `"public"."t"`
                        match crate::catalog::pg_catalog::relation_oid_of_name(&catalog, n.value(i))
                        {
                            Some(o) => catalog.get_by_oid(o),
                            None => {
                                return Err(datafusion::error::DataFusionError::External(
                                    Box::new(crate::error::WeirError::undefined_table(n.value(i))),
                                ));
                            }
                        }
                    }
                    _ => {
                        out.append_null();
                        continue;
                    }
                };
                let (Some(role), false) = (role_at(i)?, privs.is_null(i)) else {
                    out.append_null();
                    continue;
                };
                let Some(entry) = entry else {
                    // system catalogs: everyone reads them
                    out.append_value(true);
                    continue;
                };
                let mut any = false;
                for word in privs.value(i).split(',') {
                    let word = word.trim();
                    let word = word
                        .strip_suffix(" WITH GRANT OPTION")
                        .unwrap_or(word)
                        .trim();
                    let p =
                        crate::catalog::roles::Privilege::from_keyword(word).ok_or_else(|| {
                            datafusion::error::DataFusionError::Execution(format!(
                                "unrecognized privilege type: \"{word}\""
                            ))
                        })?;
                    any |= catalog.has_privilege(role, &entry.desc, p);
                }
                out.append_value(any);
            }
            Ok(Arc::new(out.finish()))
        },
    );
}

/// The relation a `regclass` argument names: an OID, or a name as SQL writes it (42P01 when
/// no relation has it).
fn relation_arg(catalog: &Catalog, a: &ArrayRef, i: usize) -> DfResult<Option<u32>> {
    relation_arg_where(catalog, a, i, |_| true)
}

/// [`relation_arg`] of the relations `keep` takes (42P01 for a name of another).
fn relation_arg_where(
    catalog: &Catalog,
    a: &ArrayRef,
    i: usize,
    keep: impl Fn(u32) -> bool,
) -> DfResult<Option<u32>> {
    if a.is_null(i) || a.data_type() == &DataType::Null {
        return Ok(None);
    }
    if a.data_type().is_integer() {
        return Ok(Some(as_u32(a)?.value(i)));
    }
    let s = as_str(a)?;
    let raw = s.value(i);
    relation_oid_of_name(catalog, raw)
        .filter(|o| keep(*o))
        .map(Some)
        .ok_or_else(|| {
            datafusion::error::DataFusionError::External(Box::new(
                crate::error::WeirError::undefined_table(raw),
            ))
        })
}

/// What this session's `nextval` handed out: per sequence, and the last of any.
type SessionValues = (std::collections::HashMap<u32, i64>, Option<i64>);

fn seq_err(e: crate::error::WeirError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}

/// The sequence a `nextval`-style argument names: an OID (`'s'::regclass`) or a name.
fn sequence_oid(catalog: &Catalog, a: &ArrayRef, i: usize) -> DfResult<Option<u32>> {
    relation_arg_where(catalog, a, i, |o| {
        catalog
            .get_by_oid(o)
            .is_some_and(|e| e.desc.kind == crate::catalog::RelationKind::Sequence)
    })
}

/// One of `nextval`, `currval`, `setval`, `lastval` over a batch: one value per row.
fn sequence_call(
    name: &str,
    catalog: &Catalog,
    seen: &parking_lot::Mutex<SessionValues>,
    args: &[ArrayRef],
    rows: usize,
) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::Int64Array;
    let not_yet = |what: String| seq_err(crate::error::WeirError::new("55000", what));
    let mut out = Vec::with_capacity(rows);
    for i in 0..rows {
        if name == "lastval" {
            let v = seen.lock().1;
            out.push(Some(v.ok_or_else(|| {
                not_yet("lastval is not yet defined in this session".into())
            })?));
            continue;
        }
        let Some(oid) = sequence_oid(catalog, &args[0], i)? else {
            out.push(None);
            continue;
        };
        let v = match name {
            "nextval" => catalog.nextval(oid).map_err(seq_err)?,
            "currval" => seen.lock().0.get(&oid).copied().ok_or_else(|| {
                not_yet(format!(
                    "currval of sequence \"{}\" is not yet defined in this session",
                    catalog
                        .get_by_oid(oid)
                        .map(|e| e.desc.name.clone())
                        .unwrap_or_default()
                ))
            })?,
            _ => {
                let vals = cast(&args[1], &DataType::Int64)?;
                let vals = vals
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("cast to Int64 gives Int64Array");
                if vals.is_null(i) {
                    out.push(None);
                    continue;
                }
                let called = match args.get(2) {
                    Some(b) => {
                        let b = cast(b, &DataType::Boolean)?;
                        let b = b
                            .as_any()
                            .downcast_ref::<BooleanArray>()
                            .expect("cast to Boolean gives BooleanArray");
                        b.is_valid(i) && b.value(i)
                    }
                    None => true,
                };
                let v = catalog
                    .setval(oid, vals.value(i), called)
                    .map_err(seq_err)?;
                if !called {
                    out.push(Some(v));
                    continue;
                }
                v
            }
        };
        if name != "currval" {
            let mut s = seen.lock();
            s.0.insert(oid, v);
            s.1 = Some(v);
        }
        out.push(Some(v));
    }
    Ok(Arc::new(Int64Array::from(out)))
}

/// Register the sequence functions (with this session's currval/lastval memory).
pub fn register_sequences(ctx: &SessionContext, catalog: Arc<Catalog>) {
    let seen: Arc<parking_lot::Mutex<SessionValues>> = Arc::new(parking_lot::Mutex::new((
        std::collections::HashMap::new(),
        None,
    )));
    for (name, sig) in [
        ("nextval", TypeSignature::Any(1)),
        ("currval", TypeSignature::Any(1)),
        ("lastval", TypeSignature::Nullary),
        (
            "setval",
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
        ),
    ] {
        let (catalog, seen) = (catalog.clone(), seen.clone());
        ctx.register_udf(ScalarUDF::new_from_impl(PgFunction {
            name,
            signature: Signature::new(sig, Volatility::Volatile),
            ret: Box::new(|_| DataType::Int64),
            imp: Box::new(move |args, rows| sequence_call(name, &catalog, &seen, args, rows)),
        }));
    }
}

/// Postgres types a quoted literal compared with an interval as an interval (`v = '1
/// day'`); DataFusion finds no common type for interval and text. `interval * number`
/// (either order) and `interval / number` are Postgres' (`pg_functions::INTERVAL_MUL`,
/// `INTERVAL_DIV`); DataFusion has no such operators and fails at planning.
#[derive(Debug)]
pub struct WeirExprPlanner;

/// The operators over `inet` / `cidr` (`sql::inet`): containment `<<`, `<<=`, `>>`, `>>=`,
/// `&&`, `&`, `|`, `inet - inet`, `inet ± bigint`. A quoted constant beside an address is
/// read as an `inet`. None when neither operand is an address.
fn inet_operator(
    expr: &mut datafusion::logical_expr::planner::RawBinaryExpr,
    schema: &datafusion::common::DFSchema,
) -> Option<datafusion::logical_expr::Expr> {
    use crate::sql::inet::{InetFn, InetOp};
    use crate::sql::types::{SqlType, field_sql_type};
    use datafusion::logical_expr::{Expr, ExprSchemable};
    use datafusion::scalar::ScalarValue;
    use datafusion::sql::sqlparser::ast::BinaryOperator as B;
    let address = |e: &Expr| {
        e.to_field(schema)
            .is_ok_and(|(_, f)| matches!(field_sql_type(&f), Some(SqlType::Inet | SqlType::Cidr)))
    };
    let (l, r) = (address(&expr.left), address(&expr.right));
    if !l && !r {
        return None;
    }
    let number = |e: &Expr| e.get_type(schema).is_ok_and(|t| t.is_integer());
    let text = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(Some(_)), _));
    let op = match &expr.op {
        B::PGBitwiseShiftLeft => InetOp::ContainedBy,
        B::PGBitwiseShiftRight => InetOp::Contains,
        B::Custom(o) if o == "<<=" => InetOp::ContainedByOrEqual,
        B::Custom(o) if o == ">>=" => InetOp::ContainsOrEqual,
        B::PGOverlap => InetOp::Overlaps,
        B::BitwiseAnd => InetOp::And,
        B::BitwiseOr => InetOp::Or,
        B::Plus if l && number(&expr.right) => InetOp::Plus,
        B::Plus if r && number(&expr.left) => {
            std::mem::swap(&mut expr.left, &mut expr.right);
            InetOp::Plus
        }
        B::Minus if l && number(&expr.right) => InetOp::Minus,
        B::Minus if l => InetOp::Difference,
        _ => return None,
    };
    let read = |e: Expr| match text(&e) {
        true => InetFn::udf(InetOp::InetIn).call(vec![e]),
        false => e,
    };
    let left = read(std::mem::replace(
        &mut expr.left,
        Expr::Literal(ScalarValue::Null, None),
    ));
    let right = match op {
        InetOp::Plus | InetOp::Minus => {
            std::mem::replace(&mut expr.right, Expr::Literal(ScalarValue::Null, None))
        }
        _ => read(std::mem::replace(
            &mut expr.right,
            Expr::Literal(ScalarValue::Null, None),
        )),
    };
    Some(InetFn::udf(op).call(vec![left, right]))
}

impl datafusion::logical_expr::planner::ExprPlanner for WeirExprPlanner {
    /// `ARRAY[...]` as Weir's `make_array` (`sql/typed_arrays.rs`): typed by its elements,
    /// and untyped literals beside typed elements read as their type (`ARRAY[d,
    /// '2030-01-01']`), from the first type check on.
    fn plan_array_literal(
        &self,
        exprs: Vec<datafusion::logical_expr::Expr>,
        _schema: &datafusion::common::DFSchema,
    ) -> datafusion::error::Result<
        datafusion::logical_expr::planner::PlannerResult<Vec<datafusion::logical_expr::Expr>>,
    > {
        use datafusion::logical_expr::planner::PlannerResult;
        if exprs.is_empty() {
            return Ok(PlannerResult::Original(exprs));
        }
        Ok(PlannerResult::Planned(
            crate::sql::typed_arrays::make_array().call(exprs),
        ))
    }

    /// `doc['key']`, `doc[0]` over a `jsonb` (or `json`): Postgres' subscripts, the same as
    /// `doc -> 'key'` / `doc -> 0` (DataFusion would take the text for a struct).
    fn plan_field_access(
        &self,
        expr: datafusion::logical_expr::planner::RawFieldAccessExpr,
        schema: &datafusion::common::DFSchema,
    ) -> datafusion::error::Result<
        datafusion::logical_expr::planner::PlannerResult<
            datafusion::logical_expr::planner::RawFieldAccessExpr,
        >,
    > {
        use crate::sql::types::{SqlType, field_sql_type};
        use datafusion::logical_expr::planner::PlannerResult;
        use datafusion::logical_expr::{Expr, ExprSchemable, GetFieldAccess};
        let json = expr
            .expr
            .to_field(schema)
            .is_ok_and(|(_, f)| matches!(field_sql_type(&f), Some(SqlType::Jsonb | SqlType::Json)));
        if !json {
            return Ok(PlannerResult::Original(expr));
        }
        let key = match expr.field_access {
            GetFieldAccess::NamedStructField { name } => Expr::Literal(name, None),
            GetFieldAccess::ListIndex { key } => *key,
            GetFieldAccess::ListRange { .. } => {
                return Err(datafusion::error::DataFusionError::External(Box::new(
                    crate::error::WeirError::new(
                        crate::error::sqlstate::DATATYPE_MISMATCH,
                        "jsonb subscript does not support slices",
                    ),
                )));
            }
        };
        Ok(PlannerResult::Planned(
            Arc::new(crate::sql::json::json_get()).call(vec![expr.expr, key]),
        ))
    }

    fn plan_binary_op(
        &self,
        expr: datafusion::logical_expr::planner::RawBinaryExpr,
        schema: &datafusion::common::DFSchema,
    ) -> datafusion::error::Result<
        datafusion::logical_expr::planner::PlannerResult<
            datafusion::logical_expr::planner::RawBinaryExpr,
        >,
    > {
        use datafusion::logical_expr::planner::PlannerResult;
        use datafusion::logical_expr::{Expr, ExprSchemable};
        use datafusion::scalar::ScalarValue;
        use datafusion::sql::sqlparser::ast::BinaryOperator as B;
        let interval = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Interval(_)));
        let number = |e: &Expr| e.get_type(schema).is_ok_and(|t| t.is_numeric());
        let timestamp = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Timestamp(..)));
        let datetime = |e: &Expr| {
            matches!(
                e.get_type(schema),
                Ok(DataType::Timestamp(..) | DataType::Date32)
            )
        };
        let time = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Time64(_)));
        let jsonb = |e: &Expr| {
            e.to_field(schema).is_ok_and(|(_, f)| {
                crate::sql::types::field_sql_type(&f) == Some(crate::sql::types::SqlType::Jsonb)
            })
        };
        let textual = |e: &Expr| {
            matches!(
                e.get_type(schema),
                Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null)
            )
        };
        let text_literal = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(Some(_)), _));
        let pg = |name: &'static str, args: Vec<Expr>| {
            Arc::new(ScalarUDF::new_from_impl(crate::sql::pg_functions::udf(
                name,
            )))
            .call(args)
        };
        // a jsonb result (a no-op cast carrying the type)
        let as_jsonb = |e: Expr| {
            Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                Box::new(e),
                Arc::new(crate::sql::types::SqlType::Jsonb.field("", true)),
            ))
        };
        let planned =
            |name: &'static str, args: Vec<Expr>| Ok(PlannerResult::Planned(pg(name, args)));
        // `array = '{1,2}'`: the text constant is read as the array's type (Postgres types an
        // untyped literal by the other operand; the cast reads array text)
        let list_type = |e: &Expr| match e.get_type(schema) {
            Ok(t @ DataType::List(_)) => Some(t),
            _ => None,
        };
        let comparison = matches!(
            expr.op,
            B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq
        );
        let mut expr = expr;
        if let Some(planned) = inet_operator(&mut expr, schema) {
            return Ok(PlannerResult::Planned(planned));
        }
        // `interval ± '2 hours'`, `interval < '1 day'`: the text constant is an interval
        let interval_type = |e: &Expr| match e.get_type(schema) {
            Ok(t @ DataType::Interval(_)) => Some(t),
            _ => None,
        };
        if comparison || matches!(expr.op, B::Plus | B::Minus) {
            if let (Some(t), true) = (interval_type(&expr.left), text_literal(&expr.right)) {
                expr.right = datafusion::logical_expr::cast(expr.right, t);
            } else if let (Some(t), true) = (interval_type(&expr.right), text_literal(&expr.left)) {
                expr.left = datafusion::logical_expr::cast(expr.left, t);
            }
        }
        // `'5' + 1`, `price * '2'`: the text constant is of the number's type (22P02 when
        // it is not one), as Postgres types an untyped literal by the other operand
        if matches!(
            expr.op,
            B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo
        ) {
            // beside a numeric, the constant is a numeric of its own digits (`q * '2'` keeps
            // q's scale, as `q * 2` does)
            let typed = |e: Expr, other: DataType| -> Expr {
                let digits = match &e {
                    Expr::Literal(ScalarValue::Utf8(Some(t)), _)
                        if matches!(other, DataType::Decimal128(..)) =>
                    {
                        let t = t.trim().trim_start_matches(['-', '+']);
                        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
                        let ok = !t.is_empty()
                            && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
                            && int.len() + frac.len() <= 38;
                        ok.then(|| ((int.len() + frac.len()).max(1), frac.len()))
                    }
                    _ => None,
                };
                match digits {
                    Some((p, s)) => {
                        datafusion::logical_expr::cast(e, DataType::Decimal128(p as u8, s as i8))
                    }
                    None => datafusion::logical_expr::cast(e, other),
                }
            };
            let number_type = |e: &Expr| e.get_type(schema).ok().filter(|t| t.is_numeric());
            if let (Some(t), true) = (number_type(&expr.left), text_literal(&expr.right)) {
                expr.right = typed(expr.right, t);
            } else if let (Some(t), true) = (number_type(&expr.right), text_literal(&expr.left)) {
                expr.left = typed(expr.left, t);
            }
        }
        // `real` beside an integer or a numeric: both as double precision, as Postgres
        // resolves the operator (float48mul, float48eq, ...: `3::real * 1234.56789` is
        // 3703.70367, double precision; two reals stay real)
        if comparison
            || matches!(
                expr.op,
                B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo
            )
        {
            let real = |e: &Expr| {
                matches!(
                    e.get_type(schema),
                    Ok(DataType::Float32 | DataType::Float16)
                )
            };
            let exact = |e: &Expr| {
                e.get_type(schema).is_ok_and(|t| {
                    t.is_integer()
                        || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
                })
            };
            if (real(&expr.left) && exact(&expr.right)) || (exact(&expr.left) && real(&expr.right))
            {
                expr.left = datafusion::logical_expr::cast(expr.left, DataType::Float64);
                expr.right = datafusion::logical_expr::cast(expr.right, DataType::Float64);
            }
        }
        // ... and beside an array in `@>`, `<@`, `&&` and `||` (`tags @> '{b}'`, `a || '{3}'`
        // is array_cat, as Postgres resolves it)
        if comparison
            || matches!(
                expr.op,
                B::AtArrow | B::ArrowAt | B::PGOverlap | B::StringConcat
            )
        {
            // a parameter sent without a type beside an array (psycopg's list of str, an
            // array's text): read as that array's text
            let untyped = |e: &Expr| matches!(e, Expr::Placeholder(p) if p.field.is_none());
            if !comparison {
                if list_type(&expr.left).is_some() && untyped(&expr.right) {
                    expr.right = pg(crate::sql::pg_functions::PARSE_ARRAY, vec![expr.right]);
                } else if list_type(&expr.right).is_some() && untyped(&expr.left) {
                    expr.left = pg(crate::sql::pg_functions::PARSE_ARRAY, vec![expr.left]);
                }
            }
            let parsed_text = |e: &Expr| {
                matches!(e, Expr::ScalarFunction(f)
                    if f.func.name() == crate::sql::pg_functions::PARSE_ARRAY)
            };
            let typed = if let (Some(t), true) = (
                list_type(&expr.left),
                text_literal(&expr.right) || parsed_text(&expr.right),
            ) {
                expr.right = datafusion::logical_expr::cast(expr.right, t);
                true
            } else if let (Some(t), true) = (
                list_type(&expr.right),
                text_literal(&expr.left) || parsed_text(&expr.left),
            ) {
                expr.left = datafusion::logical_expr::cast(expr.left, t);
                true
            } else {
                false
            };
            // planned here: DataFusion's own array operators were offered the text first
            use datafusion::functions_nested::expr_fn as nested;
            match expr.op {
                B::AtArrow if typed => {
                    return Ok(PlannerResult::Planned(nested::array_has_all(
                        expr.left, expr.right,
                    )));
                }
                B::ArrowAt if typed => {
                    return Ok(PlannerResult::Planned(nested::array_has_all(
                        expr.right, expr.left,
                    )));
                }
                // `a && b`: the arrays overlap (share an element; NULL elements match
                // nothing)
                B::PGOverlap
                    if typed
                        || list_type(&expr.left).is_some()
                        || list_type(&expr.right).is_some() =>
                {
                    return Ok(PlannerResult::Planned(nested::array_has_any(
                        pg(
                            crate::sql::pg_functions::ARRAY_REMOVE_NULLS,
                            vec![expr.left],
                        ),
                        expr.right,
                    )));
                }
                B::StringConcat if typed => {
                    return Ok(PlannerResult::Planned(nested::array_concat(vec![
                        expr.left, expr.right,
                    ])));
                }
                _ => {}
            }
        }
        match expr.op {
            B::Multiply if interval(&expr.left) && number(&expr.right) => {
                return planned(
                    crate::sql::pg_functions::INTERVAL_MUL,
                    vec![expr.left, expr.right],
                );
            }
            B::Multiply if number(&expr.left) && interval(&expr.right) => {
                return planned(
                    crate::sql::pg_functions::INTERVAL_MUL,
                    vec![expr.right, expr.left],
                );
            }
            B::Divide if interval(&expr.left) && number(&expr.right) => {
                return planned(
                    crate::sql::pg_functions::INTERVAL_DIV,
                    vec![expr.left, expr.right],
                );
            }
            // `date | timestamp ± time`, `time + date`: the time as an interval (Postgres'
            // implicit cast), then the datetime arithmetic as for an interval
            B::Plus | B::Minus
                if (datetime(&expr.left) && time(&expr.right))
                    || (expr.op == B::Plus && time(&expr.left) && datetime(&expr.right)) =>
            {
                let (dt, t) = if time(&expr.right) {
                    (expr.left, expr.right)
                } else {
                    (expr.right, expr.left)
                };
                return Ok(PlannerResult::Original(
                    datafusion::logical_expr::planner::RawBinaryExpr {
                        op: expr.op,
                        left: dt,
                        right: pg(crate::sql::pg_functions::TIME_AS_INTERVAL, vec![t]),
                    },
                ));
            }
            // jsonb's operators: `?`, `?|`, `?&`, `@>`, `<@`, and `||` / `-` with a jsonb on
            // the left (a quoted literal beside a jsonb is a jsonb, as Postgres resolves it)
            B::Question | B::QuestionPipe | B::QuestionAnd if textual(&expr.left) => {
                let name = match expr.op {
                    B::Question => crate::sql::pg_functions::JSONB_EXISTS,
                    B::QuestionPipe => crate::sql::pg_functions::JSONB_EXISTS_ANY,
                    _ => crate::sql::pg_functions::JSONB_EXISTS_ALL,
                };
                return planned(name, vec![expr.left, expr.right]);
            }
            // `jsonb @? jsonpath` / `jsonb @@ jsonpath`: jsonb_path_exists / jsonb_path_match
            // with no variables, silent (`sql::jsonpath`)
            B::AtQuestion | B::AtAt if textual(&expr.left) => {
                let name = match expr.op {
                    B::AtQuestion => "jsonb_path_exists",
                    _ => "jsonb_path_match",
                };
                let no_vars = Expr::Literal(
                    ScalarValue::Utf8(Some(crate::sql::jsonpath::OPERATOR_VARS.into())),
                    None,
                );
                let silent = Expr::Literal(ScalarValue::Boolean(Some(true)), None);
                return Ok(PlannerResult::Planned(pg(
                    name,
                    vec![expr.left, expr.right, no_vars, silent],
                )));
            }
            // `text ^@ prefix`: starts_with
            B::PGStartsWith => {
                return Ok(PlannerResult::Planned(
                    datafusion::functions::string::starts_with().call(vec![expr.left, expr.right]),
                ));
            }
            B::AtArrow | B::ArrowAt if textual(&expr.left) && textual(&expr.right) => {
                let (l, r) = if expr.op == B::AtArrow {
                    (expr.left, expr.right)
                } else {
                    (expr.right, expr.left)
                };
                return planned(crate::sql::pg_functions::JSONB_CONTAINS, vec![l, r]);
            }
            B::StringConcat
                if (jsonb(&expr.left) && (jsonb(&expr.right) || text_literal(&expr.right)))
                    || (jsonb(&expr.right) && text_literal(&expr.left)) =>
            {
                return Ok(PlannerResult::Planned(as_jsonb(pg(
                    crate::sql::pg_functions::JSONB_CONCAT,
                    vec![expr.left, expr.right],
                ))));
            }
            B::HashMinus if textual(&expr.left) => {
                return Ok(PlannerResult::Planned(as_jsonb(pg(
                    crate::sql::pg_functions::JSONB_DELETE_PATH,
                    vec![expr.left, expr.right],
                ))));
            }
            B::Minus if jsonb(&expr.left) => {
                return Ok(PlannerResult::Planned(as_jsonb(pg(
                    crate::sql::pg_functions::JSONB_DELETE,
                    vec![expr.left, expr.right],
                ))));
            }
            // `timestamp - timestamp` has its whole days as days (`4 days 01:30:00`, not
            // `97:30:00`), as Postgres' `timestamp_mi`
            B::Minus if timestamp(&expr.left) && timestamp(&expr.right) => {
                return planned(
                    crate::sql::pg_functions::TIMESTAMP_MI,
                    vec![expr.left, expr.right],
                );
            }
            _ => {}
        }
        if !matches!(
            expr.op,
            B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq
        ) {
            return Ok(PlannerResult::Original(expr));
        }
        let text = |e: &Expr| {
            matches!(
                e,
                Expr::Literal(
                    ScalarValue::Utf8(Some(_)) | ScalarValue::LargeUtf8(Some(_)),
                    _
                )
            )
        };
        let mut expr = expr;
        if text(&expr.right) && interval(&expr.left) {
            let t = expr.left.get_type(schema)?;
            expr.right = datafusion::logical_expr::cast(expr.right, t);
        } else if text(&expr.left) && interval(&expr.right) {
            let t = expr.right.get_type(schema)?;
            expr.left = datafusion::logical_expr::cast(expr.left, t);
        }
        Ok(PlannerResult::Original(expr))
    }
}
