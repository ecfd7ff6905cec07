//! Fast path for `INSERT INTO t [(cols)] VALUES (literal, ...), ...`: the literals of each
//! column become one string array cast to the column's type, columnar, without planning the
//! statement. DataFusion's planner is slow on long VALUES lists (it formats every literal
//! into expression names). Anything else (expressions, parameters, values a plain cast
//! would not accept) returns `None` and takes the general path, which gives the same
//! result or Postgres' error.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast;

use crate::catalog::RelationDesc;
use crate::catalog::rewrite::normalize_interval;
use crate::sql::parser::normalize_ident;
use crate::sql::types::SqlType;

/// The text of a literal, `Some(None)` for NULL, `None` for anything else.
fn literal(e: &ast::Expr) -> Option<Option<String>> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Some(Some(n.clone())),
            ast::Value::SingleQuotedString(s) => Some(Some(s.clone())),
            ast::Value::Boolean(b) => Some(Some(b.to_string())),
            ast::Value::Null => Some(None),
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => Some(Some(format!("-{n}"))),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// A literal's text in the form arrow's cast parses for the column's type.
fn adapt(text: String, ty: &SqlType) -> Option<String> {
    match ty {
        SqlType::Interval => Some(normalize_interval(&text).unwrap_or(text)),
        SqlType::Timestamp(_) => {
            Some(crate::sql::datetime_in::normalize(&text, false).unwrap_or(text))
        }
        SqlType::Date => Some(crate::sql::datetime_in::normalize_date(&text).unwrap_or(text)),
        SqlType::Numeric(_) => Some(crate::sql::numeric::numeric_text(&text).unwrap_or(text)),
        // rounded to microseconds by the general path (arrow's reading cuts digits off)
        SqlType::Time(_) if crate::sql::datetime_in::time_rounds_up(&text) => None,
        SqlType::TimestampTz(_) => {
            Some(crate::sql::datetime_in::normalize(&text, true).unwrap_or(text))
        }
        // bytea literals take the general path (hex and escape forms), and so do arrays
        // (Postgres array text: arrow's cast would make the whole text one element)
        SqlType::Bytea | SqlType::Array(_) => None,
        SqlType::Bool => match text.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => Some("true".into()),
            "f" | "false" | "n" | "no" | "off" | "0" => Some("false".into()),
            _ => None,
        },
        _ => Some(text),
    }
}

/// `zone`: the session's TimeZone, which a `timestamptz` literal without its own zone is a
/// wall-clock time in.
pub fn literal_rows(
    ins: &ast::Insert,
    desc: &RelationDesc,
    zone: &crate::sql::time_zone::Zone,
) -> Option<RecordBatch> {
    let source = ins.source.as_ref()?;
    if source.with.is_some() || source.order_by.is_some() || source.limit_clause.is_some() {
        return None;
    }
    let ast::SetExpr::Values(values) = source.body.as_ref() else {
        return None;
    };
    // target column positions, in the order the VALUES give them
    let targets: Vec<usize> = if ins.columns.is_empty() {
        (0..desc.columns.len()).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let id = c.0.last()?.as_ident()?;
                let n = normalize_ident(id);
                desc.columns.iter().position(|d| d.name == n)
            })
            .collect::<Option<Vec<_>>>()?
    };
    if values.rows.iter().any(|r| r.len() != targets.len()) || values.rows.is_empty() {
        return None;
    }
    let n = values.rows.len();
    let schema = desc.schema();
    let mut columns = null_columns(&schema, n);
    let options = CastOptions {
        safe: true,
        ..Default::default()
    };
    for (k, &col) in targets.iter().enumerate() {
        let ty = &desc.columns[col].ty;
        let dated = matches!(
            ty,
            SqlType::Date | SqlType::Timestamp(_) | SqlType::TimestampTz(_)
        );
        let mut texts: Vec<Option<String>> = Vec::with_capacity(n);
        // the literals as written, for `infinity` (dates and timestamps only)
        let mut written: Vec<Option<String>> = Vec::new();
        for row in &values.rows {
            match literal(&row[k])? {
                None => {
                    texts.push(None);
                    if dated {
                        written.push(None);
                    }
                }
                Some(t) => {
                    if dated {
                        written.push(Some(t.clone()));
                    }
                    texts.push(Some(adapt(t, ty)?))
                }
            }
        }
        let strings = StringArray::from(texts);
        let target: &DataType = schema.field(col).data_type();
        let mut cast = cast_with_options(&strings, target, &options).ok()?;
        // a value the cast could not read, or a float past its type's range: let the
        // general path report it
        if cast.null_count() != strings.null_count()
            || (matches!(ty, SqlType::Float4 | SqlType::Float8)
                && !matches!(
                    crate::sql::pg_math::float_out_of_range(&strings, &cast),
                    Ok(None)
                ))
        {
            return None;
        }
        if dated {
            let written = StringArray::from(written);
            cast = crate::sql::datetime_in::with_infinities(&written, cast);
            if matches!(ty, SqlType::TimestampTz(_)) {
                cast = crate::sql::time_zone::read_in_zone(&written, cast, zone).ok()?;
            }
        }
        columns[col] = cast;
    }
    nullable_batch(&schema, columns).ok()
}

/// All-NULL columns of a table's types (the columns an INSERT does not name).
fn null_columns(schema: &datafusion::arrow::datatypes::SchemaRef, n: usize) -> Vec<ArrayRef> {
    schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), n))
        .collect()
}

/// The rows as a batch whose fields all allow NULL (the table store checks NOT NULL with
/// its own error).
fn nullable_batch(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    columns: Vec<ArrayRef>,
) -> std::result::Result<RecordBatch, datafusion::arrow::error::ArrowError> {
    RecordBatch::try_new(
        Arc::new(datafusion::arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        )),
        columns,
    )
}

/// The rows of a scanned literal INSERT (`sql::bulk_insert`) as one batch of the table's
/// columns: `Ok(None)` when a target column's type needs the general path (bytea, arrays,
/// ...). Literals are typed as Postgres types them: a number or a Boolean assigned to a
/// column of an unrelated type is 42804; a string is read by the column's type (22P02 when
/// it does not read).
pub fn scanned_rows(
    scan: &crate::sql::bulk_insert::ScannedInsert,
    desc: &RelationDesc,
) -> crate::error::Result<Option<RecordBatch>> {
    use crate::error::{WeirError, sqlstate};
    columns_once(scan.columns.iter().cloned())?;
    let targets: Vec<usize> = if scan.columns.is_empty() {
        (0..desc.columns.len()).collect()
    } else {
        scan.columns
            .iter()
            .map(|n| {
                desc.columns
                    .iter()
                    .position(|d| d.name == *n)
                    .ok_or_else(|| {
                        WeirError::new(
                            sqlstate::UNDEFINED_COLUMN,
                            format!(
                                "column \"{n}\" of relation \"{}\" does not exist",
                                desc.name
                            ),
                        )
                    })
            })
            .collect::<crate::error::Result<Vec<_>>>()?
    };
    if scan.values.len() > targets.len() {
        return Err(WeirError::syntax(
            "INSERT has more expressions than target columns",
        ));
    }
    if scan.values.len() < targets.len() && !scan.columns.is_empty() {
        return Err(WeirError::syntax(
            "INSERT has more target columns than expressions",
        ));
    }
    let n = scan.rows;
    let schema = desc.schema();
    let mut columns = null_columns(&schema, n);
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    for (value, &col) in scan.values.iter().zip(&targets) {
        let c = &desc.columns[col];
        let ty = &c.ty;
        let mismatch = |kind: &str| assignment_mismatch(&c.name, ty, kind);
        if value.kinds.boolean && !literal_fits(ty, true) {
            return Err(mismatch("boolean"));
        }
        if value.kinds.number && !literal_fits(ty, false) {
            return Err(mismatch("numeric"));
        }
        let texts: StringArray = match ty {
            SqlType::Bool | SqlType::Interval => {
                let mut out: Vec<Option<String>> = Vec::with_capacity(n);
                for v in value.texts.iter() {
                    match v {
                        None => out.push(None),
                        Some(t) => match adapt(t.to_owned(), ty) {
                            Some(a) => out.push(Some(a)),
                            None => {
                                return Err(crate::error::invalid_input(&ty.input_name(), t));
                            }
                        },
                    }
                }
                StringArray::from(out)
            }
            SqlType::Text
            | SqlType::Varchar(_)
            | SqlType::Jsonb
            | SqlType::Json
            | SqlType::Uuid
            | SqlType::Inet
            | SqlType::Cidr
            | SqlType::Enum(_)
            | SqlType::Int2
            | SqlType::Int4
            | SqlType::Int8
            | SqlType::Float4
            | SqlType::Float8
            | SqlType::Numeric(_)
            | SqlType::Date
            | SqlType::Timestamp(_)
            | SqlType::TimestampTz(_) => value.texts.clone(),
            _ => return Ok(None),
        };
        let target: &DataType = schema.field(col).data_type();
        if matches!(
            ty,
            SqlType::Date | SqlType::Timestamp(_) | SqlType::TimestampTz(_) | SqlType::Numeric(_)
        ) {
            // forms arrow does not read (time zone names, BC dates, ...) take the general
            // path, which knows Postgres' input rules
            let lenient = CastOptions {
                safe: true,
                ..Default::default()
            };
            let cast = cast_with_options(&texts, target, &lenient)?;
            if cast.null_count() != texts.null_count() {
                return Ok(None);
            }
            columns[col] = cast;
        } else {
            columns[col] = cast_with_options(&texts, target, &options)?;
            // a float past its type's range: 22003, as Postgres (arrow reads infinity or 0)
            if matches!(ty, SqlType::Float4 | SqlType::Float8)
                && let Some((_, e)) =
                    crate::sql::pg_math::float_out_of_range(&texts, &columns[col])?
            {
                return Err(e);
            }
        }
    }
    Ok(Some(nullable_batch(&schema, columns)?))
}

/// An INSERT's target columns, each named once (Postgres' 42701).
pub fn columns_once(names: impl Iterator<Item = String>) -> crate::error::Result<()> {
    let mut seen = std::collections::HashSet::new();
    for n in names {
        if !seen.insert(n.clone()) {
            return Err(crate::error::WeirError::new(
                "42701",
                format!("column \"{n}\" specified more than once"),
            ));
        }
    }
    Ok(())
}

/// Whether a Boolean (`boolean`) or number literal written to a column of type `ty` converts
/// to it as Postgres' assignment casts do: into its own kind or a string type.
pub fn literal_fits(ty: &SqlType, boolean: bool) -> bool {
    let textual = matches!(ty, SqlType::Text | SqlType::Varchar(_) | SqlType::Bpchar(_));
    textual
        || if boolean {
            *ty == SqlType::Bool
        } else {
            ty.is_number() || *ty == SqlType::Oid
        }
}

/// A value of type `kind` (Postgres' name) written to a column it does not convert to on
/// assignment: 42804, in Postgres' words.
pub fn assignment_mismatch(column: &str, ty: &SqlType, kind: &str) -> crate::error::WeirError {
    crate::error::WeirError::new(
        crate::error::sqlstate::DATATYPE_MISMATCH,
        format!(
            "column \"{column}\" is of type {} but expression is of type {kind}",
            ty.display_name()
        ),
    )
    .with_hint("You will need to rewrite or cast the expression.")
}

/// An INSERT's VALUES written as numbers or Booleans convert to their columns as Postgres
/// reads them (DataFusion types a VALUES list by the table, so `VALUES (1)` into a Boolean
/// column was `true`, into a date a day of 1970): 42804 where the column is not of that
/// kind or text (see `engine.rs::assignments_convert` for other sources).
pub fn values_convert(
    values: &ast::Values,
    ins: &ast::Insert,
    desc: &crate::catalog::RelationDesc,
) -> crate::error::Result<()> {
    let targets: Vec<Option<&crate::catalog::ColumnDesc>> = if ins.columns.is_empty() {
        desc.columns.iter().map(Some).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let n = crate::sql::parser::normalize_ident(c.0.last()?.as_ident()?);
                desc.columns.iter().find(|d| d.name == n)
            })
            .collect()
    };
    for row in &values.rows {
        for (e, column) in row.content.iter().zip(&targets) {
            let Some(column) = column else { continue };
            let value = match e {
                ast::Expr::Value(v) => Some(&v.value),
                ast::Expr::UnaryOp {
                    op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
                    expr,
                } => match expr.as_ref() {
                    ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(..)) => {
                        Some(&v.value)
                    }
                    _ => None,
                },
                _ => None,
            };
            let boolean = match value {
                Some(ast::Value::Number(..)) => false,
                Some(ast::Value::Boolean(_)) => true,
                _ => continue,
            };
            if !literal_fits(&column.ty, boolean) {
                // (the literal's type as Postgres names it, for the message)
                let kind = match value {
                    Some(ast::Value::Number(n, _)) if !n.contains(['.', 'e', 'E']) => {
                        if n.parse::<i32>().is_ok() {
                            "integer"
                        } else if n.parse::<i64>().is_ok() {
                            "bigint"
                        } else {
                            "numeric"
                        }
                    }
                    Some(ast::Value::Number(..)) => "numeric",
                    _ => "boolean",
                };
                return Err(assignment_mismatch(&column.name, &column.ty, kind));
            }
        }
    }
    Ok(())
}
