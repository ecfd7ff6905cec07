//! `to_number(text, template)`: a number read by a `to_char` numeric template, as Postgres
//! reads one.
//!
//! The template is walked with the text: a digit position (`9`, `0`) takes the next digit
//! (a blank or another character there is skipped; the decimal point there starts the
//! decimals), `.`/`D` the decimal point, `,`/`G` a
//! group separator when there is one, `S`/`MI`/`PL`/`SG` a sign, `L` a currency symbol,
//! `PR` angle brackets (a negative number), any other template character one character of
//! the text; `FM` changes nothing. A `-` before the first digit makes the number negative.
//! Text left after the template is ignored (`to_number('12345', '99')` is 12), as Postgres.
//!
//! The result is a `numeric` with as many decimals as the template has digit positions
//! after its decimal point (`9G999D99`: two), when the template is a constant (an
//! unconstrained `numeric` otherwise). No digit at all is 22P02, as Postgres. Postgres'
//! reading of `PR` is odd (`to_number('(123.45)', '999D99PR')` is 123.4 there): here the
//! brackets make the number negative.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Builder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{WeirError, sqlstate};
use crate::sql::types::{NUMERIC_DEFAULT_PRECISION, NUMERIC_DEFAULT_SCALE};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToNumber {
    signature: Signature,
}

impl Default for ToNumber {
    fn default() -> Self {
        ToNumber {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8],
                Volatility::Immutable,
            ),
        }
    }
}

fn err(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

/// The digit positions after the template's decimal point.
fn decimals(template: &str) -> i8 {
    let t = template.to_ascii_uppercase();
    let Some(at) = t.find(['D', '.']) else {
        return 0;
    };
    let n = t[at + 1..]
        .chars()
        .filter(|c| matches!(c, '9' | '0'))
        .count();
    n.min(NUMERIC_DEFAULT_PRECISION as usize - 1) as i8
}

/// `text` read by `template`: (negative, integer digits, decimal digits), or None when no
/// digit was read.
fn read(text: &str, template: &str) -> Option<(bool, String, String)> {
    let t: Vec<char> = template.chars().collect();
    let s: Vec<char> = text.chars().collect();
    let (mut i, mut j) = (0usize, 0usize);
    let (mut neg, mut after_point) = (false, false);
    let (mut int, mut frac) = (String::new(), String::new());
    let has_point = t.iter().any(|c| matches!(c, '.' | 'D' | 'd'));
    let upper = |k: usize, n: usize| -> String {
        t[k..(k + n).min(t.len())]
            .iter()
            .collect::<String>()
            .to_ascii_uppercase()
    };
    while i < t.len() {
        let c = t[i];
        let two = upper(i, 2);
        if two == "FM" {
            i += 2;
            continue;
        }
        if two == "PR" {
            if s.get(j) == Some(&'<') || s.get(j) == Some(&'>') {
                j += 1;
            }
            i += 2;
            continue;
        }
        if two == "MI" || two == "PL" || two == "SG" {
            match s.get(j) {
                Some('-') => {
                    neg = true;
                    j += 1;
                }
                Some('+') => j += 1,
                _ => {}
            }
            i += 2;
            continue;
        }
        match c.to_ascii_uppercase() {
            '9' | '0' => {
                // a sign or an opening bracket before the first digit
                while int.is_empty() && frac.is_empty() {
                    match s.get(j) {
                        Some('-') | Some('(') | Some('<') => {
                            neg = true;
                            j += 1;
                        }
                        Some('+') => j += 1,
                        _ => break,
                    }
                }
                match s.get(j) {
                    // the decimal point where the template has a digit: the digits after it
                    // are decimals
                    Some('.') if has_point && !after_point => {
                        after_point = true;
                        j += 1;
                    }
                    Some(d) if d.is_ascii_digit() => {
                        if after_point { &mut frac } else { &mut int }.push(*d);
                        j += 1;
                    }
                    Some(_) => j += 1,
                    None => {}
                }
            }
            '.' | 'D' => {
                if s.get(j) == Some(&'.') {
                    j += 1;
                }
                after_point = true;
            }
            ',' | 'G' => {
                if s.get(j) == Some(&',') {
                    j += 1;
                }
            }
            'S' => match s.get(j) {
                Some('-') => {
                    neg = true;
                    j += 1;
                }
                Some('+') => j += 1,
                _ => {}
            },
            'L' => {
                if s.get(j).is_some_and(|c| !c.is_ascii_digit() && *c != '-') {
                    j += 1;
                }
            }
            _ => {
                if j < s.len() {
                    j += 1;
                }
            }
        }
        i += 1;
    }
    if s[j.min(s.len())..].contains(&')') && s[..j.min(s.len())].contains(&'(') {
        neg = true;
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    Some((neg, int, frac))
}

/// The number `text` reads as, at `scale` decimals (extra decimals cut off, as Postgres).
fn number(text: &str, template: &str, scale: i8) -> DfResult<i128> {
    let Some((neg, int, mut frac)) = read(text, template) else {
        return Err(err(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            "invalid input syntax for type numeric: \" \"",
        ));
    };
    frac.truncate(scale as usize);
    while frac.len() < scale as usize {
        frac.push('0');
    }
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let value: i128 = if digits.is_empty() {
        0
    } else if digits.len() > NUMERIC_DEFAULT_PRECISION as usize {
        return Err(err(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "numeric field overflow",
        ));
    } else {
        digits.parse().map_err(|_| {
            err(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!("invalid input syntax for type numeric: \"{text}\""),
            )
        })?
    };
    Ok(if neg { -value } else { value })
}

impl ScalarUDFImpl for ToNumber {
    fn name(&self) -> &str {
        "to_number"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(
            "to_number's type is given by return_field_from_args".into(),
        ))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let scale = match args.scalar_arguments.get(1) {
            Some(Some(
                ScalarValue::Utf8(Some(t))
                | ScalarValue::Utf8View(Some(t))
                | ScalarValue::LargeUtf8(Some(t)),
            )) => decimals(t),
            _ => NUMERIC_DEFAULT_SCALE,
        };
        Ok(Arc::new(Field::new(
            self.name(),
            DataType::Decimal128(NUMERIC_DEFAULT_PRECISION, scale),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let DataType::Decimal128(precision, scale) = args.return_field.data_type().clone() else {
            return Err(DataFusionError::Internal("to_number's type".into()));
        };
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let text = cast(&args.args[0].to_array(rows)?, &DataType::Utf8)?;
        let template = cast(&args.args[1].to_array(rows)?, &DataType::Utf8)?;
        let (text, template) = (text.as_string::<i32>(), template.as_string::<i32>());
        let mut out = Decimal128Builder::with_capacity(rows);
        for r in 0..rows {
            if text.is_null(r) || template.is_null(r) || template.value(r).is_empty() {
                out.append_null();
                continue;
            }
            out.append_value(number(text.value(r), template.value(r), scale)?);
        }
        let out: ArrayRef = Arc::new(out.finish().with_precision_and_scale(precision, scale)?);
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str, template: &str) -> String {
        let scale = decimals(template);
        match number(text, template, scale) {
            Ok(v) => {
                let s = format!("{:0>width$}", v.abs(), width = scale as usize + 1);
                let (i, f) = s.split_at(s.len() - scale as usize);
                let sign = if v < 0 { "-" } else { "" };
                if f.is_empty() {
                    format!("{sign}{i}")
                } else {
                    format!("{sign}{i}.{f}")
                }
            }
            Err(e) => format!("error {e}"),
        }
    }

    /// Postgres 15's answers.
    #[test]
    fn reads_as_postgres() {
        assert_eq!(n("1,234.50", "9G999D99"), "1234.50");
        assert_eq!(n("12,454.8-", "99G999D9S"), "-12454.8");
        assert_eq!(n("1.239", "9D99"), "1.23");
        assert_eq!(n("-34,338,492", "99G999G999"), "-34338492");
        assert_eq!(n("  12", "9999"), "12");
        assert_eq!(n("$1,234", "L9G999"), "1234");
        assert_eq!(n("12345", "99"), "12");
        assert_eq!(n("1.5", "9.9"), "1.5");
        assert_eq!(n("5 000", "9 999"), "5000");
        assert_eq!(n("1e3", "9999"), "13");
        assert_eq!(n("12.3", "99"), "12");
        assert_eq!(n("-1", "9"), "-1");
        assert_eq!(n("1-", "9MI"), "-1");
        assert_eq!(n("0012", "0000"), "12");
        assert_eq!(n("12", "FM9999"), "12");
        // (Postgres: 1.5, its scale the digits read)
        assert_eq!(n("1.5", "999D99"), "1.50");
        assert!(n("abc", "999").starts_with("error"));
        assert!(n("", "999").starts_with("error"));
    }
}
