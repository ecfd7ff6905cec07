//! Event-time helpers: fixed-length intervals in microseconds (window sizes, watermark
//! delays, allowed lateness) and the shape of a WATERMARK expression.

use datafusion::sql::sqlparser::ast;

use crate::error::{Result, WeirError, sqlstate};

pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// A fixed-length interval (`'5 seconds'`, `'1 day 02:00:00'`) in microseconds. Months and
/// years are refused: their length depends on the date.
pub fn interval_micros(text: &str) -> Result<i64> {
    let v = crate::sql::interval_in::parse(text).ok_or_else(|| {
        WeirError::new(
            sqlstate::INVALID_DATETIME_FORMAT,
            format!("invalid input syntax for type interval: \"{text}\""),
        )
    })?;
    if v.months != 0 {
        return Err(WeirError::invalid_parameter(format!(
            "interval \"{text}\" has months or years, whose length varies; use days"
        )));
    }
    (v.days as i64)
        .checked_mul(MICROS_PER_DAY)
        .and_then(|d| d.checked_add(v.micros))
        .ok_or_else(|| {
            WeirError::new(
                sqlstate::DATETIME_FIELD_OVERFLOW,
                format!("interval out of range: \"{text}\""),
            )
        })
}

/// The microseconds of an interval literal: `INTERVAL '5 seconds'`, `INTERVAL '5' SECOND`,
/// `'5 seconds'::interval` or a plain string.
#[recursive::recursive]
pub fn interval_expr_micros(e: &ast::Expr) -> Result<i64> {
    let text = match e {
        ast::Expr::Interval(iv) => {
            let base = string_literal(&iv.value)?;
            match &iv.leading_field {
                Some(f) => format!("{base} {f}"),
                None => base,
            }
        }
        ast::Expr::Cast { expr, .. } => string_literal(expr)?,
        ast::Expr::Nested(inner) => return interval_expr_micros(inner),
        other => string_literal(other)?,
    };
    interval_micros(&text)
}

fn string_literal(e: &ast::Expr) -> Result<String> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => Ok(s.clone()),
            ast::Value::Number(n, _) => Ok(format!("{n} seconds")),
            _ => Err(not_interval(e)),
        },
        _ => Err(not_interval(e)),
    }
}

fn not_interval(e: &ast::Expr) -> WeirError {
    WeirError::syntax(format!("expected an interval literal, found {e}"))
}

/// The delay of `WATERMARK FOR col AS col - INTERVAL '...'` (or `AS col`: no delay).
pub fn watermark_delay(column: &str, expr: &ast::Expr) -> Result<i64> {
    let is_col = |e: &ast::Expr| matches!(e, ast::Expr::Identifier(id) if crate::sql::parser::normalize_ident(id) == column);
    match expr {
        e if is_col(e) => Ok(0),
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Minus,
            right,
        } if is_col(left) => {
            let d = interval_expr_micros(right)?;
            if d < 0 {
                return Err(WeirError::invalid_parameter(
                    "a watermark delay cannot be negative",
                ));
            }
            Ok(d)
        }
        other => Err(WeirError::not_supported(format!(
            "WATERMARK expression {other}: use `{column}` or `{column} - INTERVAL '...'`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_intervals() {
        assert_eq!(interval_micros("5 seconds").unwrap(), 5_000_000);
        assert_eq!(interval_micros("1 minute").unwrap(), 60_000_000);
        assert_eq!(
            interval_micros("1 day 01:00:00").unwrap(),
            MICROS_PER_DAY + 3_600_000_000
        );
        assert!(interval_micros("1 month").is_err());
        assert!(interval_micros("soon").is_err());
    }
}
