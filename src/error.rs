//! Errors as Postgres sees them: every error carries a SQLSTATE and a message that names the
//! problem. Conversions from DataFusion, arrow and sqlparser errors pick the SQLSTATE a
//! Postgres client would get for the same mistake.

use std::fmt;

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;
use pgwire::error::{ErrorInfo, PgWireError};

/// SQLSTATE codes we use (names follow Postgres' errcodes.txt).
pub mod sqlstate {
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const AMBIGUOUS_FUNCTION: &str = "42725";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const DUPLICATE_COLUMN: &str = "42701";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const AMBIGUOUS_COLUMN: &str = "42702";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const INVALID_FUNCTION_DEFINITION: &str = "42P13";
    pub const INVALID_TABLE_DEFINITION: &str = "42P16";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const CHECK_VIOLATION: &str = "23514";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    pub const STRING_DATA_RIGHT_TRUNCATION: &str = "22001";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
    pub const INVALID_DATETIME_FORMAT: &str = "22007";
    pub const INVALID_REGULAR_EXPRESSION: &str = "2201B";
    pub const DATA_EXCEPTION: &str = "22000";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const QUERY_CANCELED: &str = "57014";
    pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    pub const INVALID_SCHEMA_NAME: &str = "3F000";
    pub const DUPLICATE_SCHEMA: &str = "42P06";
    pub const RESERVED_NAME: &str = "42939";
    pub const GROUPING_ERROR: &str = "42803";
    pub const INVALID_OBJECT_DEFINITION: &str = "42P17";
    pub const WINDOWING_ERROR: &str = "42P20";
    pub const INVALID_COLUMN_REFERENCE: &str = "42P10";
    pub const GENERATED_ALWAYS: &str = "428C9";
    /// `$n` where no parameter is bound (Postgres' undefined_parameter).
    pub const NO_SUCH_PLACEHOLDER: &str = "42P02";
    pub const UNDEFINED_PARAMETER: &str = "42704";
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const IO_ERROR: &str = "58030";
    pub const DATA_CORRUPTED: &str = "XX001";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const DISK_FULL: &str = "53100";
    pub const OUT_OF_MEMORY: &str = "53200";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    pub const STATEMENT_TOO_COMPLEX: &str = "54001";
    pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
    pub const IDLE_IN_TRANSACTION_TIMEOUT: &str = "25P03";
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
    pub const DEADLOCK_DETECTED: &str = "40P01";
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const INVALID_GRANT_OPERATION: &str = "0LP01";
    pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
}

/// The SQLSTATE constant spelled `code`, for errors that come back as text (from pgwire);
/// codes Weir does not use become XX000.
pub fn code_from_str(code: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "08P01", "0A000", "0LP01", "22000", "28000", "28P01", "22001", "22003", "22007", "22008",
        "22012", "22023", "22P02", "23502", "23505", "25001", "25006", "25P03", "26000", "2BP01",
        "42501", "42601", "42701", "42803", "42702", "42703", "42704", "42710", "42804", "42809",
        "42883", "42P01", "42P07", "42P16", "53100", "53200", "53300", "53400", "54000", "54001",
        "55000", "55P02", "55P03", "57014", "58030", "XX000",
    ];
    KNOWN
        .iter()
        .find(|k| **k == code)
        .copied()
        .unwrap_or(sqlstate::INTERNAL_ERROR)
}

/// An error destined for a Postgres client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeirError {
    pub code: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// Where it happened (`COPY t, line 3`): the CONTEXT line clients print.
    pub context: Option<String>,
    /// The character (from 1) of the query text the error points at: psql prints the
    /// line and a caret under it, JDBC says `Position: n`.
    pub position: Option<u32>,
}

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

impl WeirError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        WeirError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
            context: None,
            position: None,
        }
    }
    pub fn with_position(mut self, position: usize) -> Self {
        self.position = u32::try_from(position).ok();
        self
    }
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(sqlstate::SYNTAX_ERROR, message)
    }
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }
    pub fn undefined_table(name: &str) -> Self {
        use crate::sql::search_path::{written, written_text};
        let name = written(written_text(name));
        Self::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )
    }
    /// 42704 `type "x" does not exist` (a type of public named off the search path as it
    /// was written).
    pub fn undefined_type(name: &str) -> Self {
        use crate::sql::search_path::{written, written_text};
        let name = written(written_text(name));
        Self::new(
            sqlstate::UNDEFINED_OBJECT,
            format!("type \"{name}\" does not exist"),
        )
    }
    /// The type a [`WeirError::undefined_type`] names (None for any other error).
    pub fn undefined_type_name(&self) -> Option<&str> {
        if self.code != sqlstate::UNDEFINED_OBJECT {
            return None;
        }
        self.message
            .strip_prefix("type \"")?
            .strip_suffix("\" does not exist")
    }
    /// An error about an unknown array element type as Postgres says it: the array type
    /// (`mood[]`) is what does not exist. Any other error as it is.
    pub fn of_array_type(self) -> Self {
        match self.undefined_type_name() {
            Some(name) => Self::undefined_type(&format!("{name}[]")),
            None => self,
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(sqlstate::INTERNAL_ERROR, message)
    }
    pub fn io(context: &str, e: impl fmt::Display) -> Self {
        Self::new(sqlstate::IO_ERROR, format!("{context}: {e}"))
    }
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(sqlstate::INVALID_PARAMETER_VALUE, message)
    }

    pub fn into_pgwire(self) -> PgWireError {
        PgWireError::UserError(Box::new(self.into_error_info()))
    }

    pub fn into_error_info(self) -> ErrorInfo {
        let mut info = ErrorInfo::new("ERROR".to_owned(), self.code.to_owned(), self.message);
        info.detail = self.detail;
        info.hint = self.hint;
        info.where_context = self.context;
        info.position = self.position.map(|p| p.to_string());
        info
    }
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)
    }
}

impl std::error::Error for WeirError {}

impl From<ParserError> for WeirError {
    fn from(e: ParserError) -> Self {
        let msg = match e {
            ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
            ParserError::RecursionLimitExceeded => {
                return WeirError::new(
                    sqlstate::STATEMENT_TOO_COMPLEX,
                    format!(
                        "statement is too complex: parentheses, subqueries or calls nest more than {} levels",
                        crate::sql::depth::MAX_PARSER_RECURSION
                    ),
                );
            }
        };
        WeirError::syntax(format!("syntax error: {msg}"))
    }
}

impl From<ArrowError> for WeirError {
    fn from(e: ArrowError) -> Self {
        from_arrow(&e)
    }
}

fn from_arrow(e: &ArrowError) -> WeirError {
    match e {
        ArrowError::CastError(m) | ArrowError::ParseError(m) => {
            if let Some(e) = cast_message(m).or_else(|| numeric_overflow(m)) {
                return e;
            }
            let lower = m.to_ascii_lowercase();
            // "Can't cast value 4294967294 to type Int32" (and a decimal's "value of 1e20 is
            // out of range Int64"): Postgres says "integer out of range"
            let integer_type = if lower.starts_with("can't cast value") {
                m.rsplit("to type ").next()
            } else if lower.starts_with("value of ") {
                m.rsplit("is out of range ").next()
            } else {
                None
            };
            if integer_type.is_some() {
                let pg = match integer_type.map(str::trim) {
                    Some("Int16") => Some("smallint"),
                    Some("Int32") => Some("integer"),
                    Some("Int64") => Some("bigint"),
                    _ => None,
                };
                if let Some(pg) = pg {
                    return WeirError::new(
                        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!("{pg} out of range"),
                    );
                }
            }
            // arrow's own "Invalid input syntax for type interval: ..." is Postgres' text
            const SYNTAX: &str = "invalid input syntax for type ";
            if let Some(rest) = lower.strip_prefix(SYNTAX) {
                let datetime = ["interval", "date", "time"]
                    .iter()
                    .any(|t| rest.starts_with(t));
                return WeirError::new(
                    if datetime {
                        sqlstate::INVALID_DATETIME_FORMAT
                    } else {
                        sqlstate::INVALID_TEXT_REPRESENTATION
                    },
                    format!("{SYNTAX}{}", m.get(SYNTAX.len()..).unwrap_or_default()),
                );
            }
            if lower.contains("overflow")
                || lower.contains("out of range")
                || lower.starts_with("can't cast value")
            {
                WeirError::new(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, m.clone())
            } else {
                WeirError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    format!("invalid input syntax: {m}"),
                )
            }
        }
        ArrowError::DivideByZero => WeirError::new(sqlstate::DIVISION_BY_ZERO, "division by zero"),
        ArrowError::ArithmeticOverflow(m) => WeirError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            integer_overflow_type(m).map_or_else(|| m.clone(), |t| format!("{t} out of range")),
        ),
        ArrowError::InvalidArgumentError(m) => numeric_overflow(m)
            .unwrap_or_else(|| WeirError::new(sqlstate::DATA_EXCEPTION, m.clone())),
        ArrowError::NotYetImplemented(m) => WeirError::not_supported(m.clone()),
        other => WeirError::internal(other.to_string()),
    }
}

/// A pattern the `regex` crate refused, in Postgres' words (its regex library's messages:
/// `invalid regular expression: parentheses () not balanced`), from the crate's error text
/// ("regex parse error: ... error: unclosed group"); None when `text` is no such error.
pub fn regex_error(text: &str) -> Option<WeirError> {
    let (_, rest) = text.split_once("regex parse error:")?;
    let reason = rest
        .lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or("invalid pattern")
        .trim();
    let pg = match reason {
        "unclosed group" | "unopened group" => "parentheses () not balanced",
        "unclosed character class" => "brackets [] not balanced",
        "repetition operator missing expression" => "quantifier operand invalid",
        r if r.starts_with("invalid repetition count range") => "invalid repetition count(s)",
        r if r.starts_with("repetition quantifier expects a valid decimal")
            || r.starts_with("unclosed counted repetition") =>
        {
            "braces {} not balanced"
        }
        r if r.starts_with("invalid escape") || r.starts_with("incomplete escape") => {
            "invalid escape \\ sequence"
        }
        r if r.starts_with("invalid character class range") => "invalid character range",
        r => r,
    };
    Some(WeirError::new(
        sqlstate::INVALID_REGULAR_EXPRESSION,
        format!("invalid regular expression: {pg}"),
    ))
}

/// The Postgres integer type an arrow overflow message ("Overflow happened on: -2147483648 /
/// -1") was computed in: the narrowest whose range holds both operands but not the exact
/// result (the kernels do not name their type).
fn integer_overflow_type(m: &str) -> Option<&'static str> {
    let rest = m.strip_prefix("Overflow happened on: ")?;
    let mut parts = rest.split_whitespace();
    let (l, op, r) = (parts.next()?, parts.next()?, parts.next()?);
    let (l, r): (i128, i128) = (l.parse().ok()?, r.parse().ok()?);
    let exact = match op {
        "+" => l.checked_add(r),
        "-" => l.checked_sub(r),
        "*" => l.checked_mul(r),
        "/" => l.checked_div(r),
        _ => None,
    }?;
    [
        ("smallint", i16::MIN as i128, i16::MAX as i128),
        ("integer", i32::MIN as i128, i32::MAX as i128),
        ("bigint", i64::MIN as i128, i64::MAX as i128),
    ]
    .into_iter()
    .find(|(_, lo, hi)| {
        let holds = |v: i128| (*lo..=*hi).contains(&v);
        holds(l) && holds(r) && !holds(exact)
    })
    .map(|(t, _, _)| t)
}

/// "Cannot cast string 'abc' to value of Int32 type" (and arrow's "Error parsing timestamp
/// from '...'") in Postgres' words: 22P02 for numbers and booleans, 22007 for a date, time,
/// timestamp or interval that is not one, 22008 for one whose month, day or time of day is
/// out of range (`2024-02-30`, `25:00`).
/// A value that a `numeric(p, s)` cannot hold, said as Postgres says it: arrow's "1234.50
/// is too large to store in a Decimal128 of precision 5. Max is 999.99" is 22003 "numeric
/// field overflow" with the detail "A field with precision 5, scale 2 must round to an
/// absolute value less than 10^3."; an infinity cast to one "... cannot hold an infinite
/// value."; NaN and infinity in an unconstrained `numeric` (which Postgres holds, Arrow's
/// decimals cannot) are named as not supported (0A000).
fn numeric_overflow(m: &str) -> Option<WeirError> {
    let overflow = |detail: String| {
        WeirError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "numeric field overflow",
        )
        .with_detail(detail)
    };
    if let Some((_, rest)) = m.split_once(" is too large to store in a Decimal128 of precision ") {
        let (p, max) = rest.split_once(". Max is ")?;
        let p: u32 = p.trim().parse().ok()?;
        let s = max
            .trim()
            .split_once('.')
            .map_or(0, |(_, f)| f.len() as u32);
        let bound = match p.saturating_sub(s) {
            0 => "1".to_owned(),
            d => format!("10^{d}"),
        };
        return Some(overflow(format!(
            "A field with precision {p}, scale {s} must round to an absolute value less than {bound}."
        )));
    }
    let rest = m.strip_prefix("Cannot cast to Decimal128(")?;
    let (ps, value) = rest.split_once("). Overflowing on ")?;
    let (p, s) = ps.split_once(',')?;
    let (p, s): (u8, i8) = (p.trim().parse().ok()?, s.trim().parse().ok()?);
    let unconstrained = (p, s)
        == (
            crate::sql::types::NUMERIC_DEFAULT_PRECISION,
            crate::sql::types::NUMERIC_DEFAULT_SCALE,
        );
    match value.trim() {
        "NaN" | "nan" => Some(WeirError::not_supported(
            "numeric NaN is not supported: a numeric holds only finite values here",
        )),
        _ if unconstrained => Some(WeirError::not_supported(
            "numeric Infinity is not supported: a numeric holds only finite values here",
        )),
        _ => Some(overflow(format!(
            "A field with precision {p}, scale {s} cannot hold an infinite value."
        ))),
    }
}

fn cast_message(m: &str) -> Option<WeirError> {
    let (value, ty) = if let Some(rest) = m
        .strip_prefix("Cannot cast string '")
        .or_else(|| m.strip_prefix("Cannot cast value '"))
    {
        let (value, rest) = rest.rsplit_once("' to value of ")?;
        (value, rest.strip_suffix(" type").unwrap_or(rest))
    } else {
        let rest = m.strip_prefix("Error parsing timestamp from '")?;
        (rest.split_once("'")?.0, "Timestamp")
    };
    let pg = match ty {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        "Float32" => "real",
        "Float64" => "double precision",
        "Boolean" => "boolean",
        t if t.starts_with("Decimal") => "numeric",
        t if t.starts_with("Timestamp") => "timestamp",
        t if t.starts_with("Date") => "date",
        t if t.starts_with("Time") => "time",
        t if t.starts_with("Interval") => "interval",
        other => other,
    };
    Some(invalid_input(pg, value))
}

/// A value of type `pg` (Postgres' name) that does not read: 22P02 "invalid input syntax
/// for type ...", 22007 for a date/time type, 22008 for a date or time written well but
/// out of range. Casts, COPY and literal INSERTs all say it so.
pub fn invalid_input(pg: &str, value: &str) -> WeirError {
    // an integer written well but past its type: Postgres' 22003, naming the value
    if matches!(pg, "smallint" | "integer" | "bigint") {
        let t = value.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return WeirError::new(
                sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("value \"{value}\" is out of range for type {pg}"),
            );
        }
    }
    let datetime = pg == "date" || pg.starts_with("time") || pg == "interval";
    if datetime
        && pg != "interval"
        && let Some(date) = datetime_field_out_of_range(value)
    {
        let e = WeirError::new(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!("date/time field value out of range: \"{value}\""),
        );
        // (Postgres hints at the date order only when a date's field is past its range)
        return match date {
            true => e.with_hint("Perhaps you need a different \"datestyle\" setting."),
            false => e,
        };
    }
    WeirError::new(
        if datetime {
            sqlstate::INVALID_DATETIME_FORMAT
        } else {
            sqlstate::INVALID_TEXT_REPRESENTATION
        },
        format!("invalid input syntax for type {pg}: \"{value}\""),
    )
}

/// A date `Y-M-D` and / or a time `H:M[:S]` written well whose month, day, hour, minute or
/// second is past its range (Postgres' 22008 rather than a syntax error): Some(true) when the
/// month is (Postgres then hints at the date order), Some(false) for the other fields.
fn datetime_field_out_of_range(value: &str) -> Option<bool> {
    let numbers = |part: &str, sep: char| -> Option<Vec<u32>> {
        part.split(sep)
            .map(|n| {
                let n = n.split('.').next()?;
                (!n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse().ok())
                    .flatten()
            })
            .collect()
    };
    let (mut date, mut time) = (false, false);
    // a free-form date (`Feb 30 2024`, `13/15/2024`) as the ISO text it is read as
    let iso = (!crate::sql::datetime_in::iso_date_prefix(value.trim().as_bytes()))
        .then(|| crate::sql::datetime_in::free_form(value.trim()))
        .flatten();
    let value = iso.as_deref().unwrap_or(value);
    for part in value.trim().split([' ', 'T']) {
        if let Some(d) = numbers(part, '-').filter(|d| d.len() == 3) {
            let (y, m, day) = (d[0] as i32, d[1], d[2]);
            let days = chrono::NaiveDate::from_ymd_opt(y, m.clamp(1, 12), 1)
                .and_then(|f| f.checked_add_months(chrono::Months::new(1)))
                .and_then(|n| n.pred_opt())
                .map_or(31, |l| chrono::Datelike::day(&l));
            // (a month past 12 is the one Postgres reads as a day/month mix-up and hints at)
            date |= !(1..=12).contains(&m);
            time |= day == 0 || day > days;
        } else if let Some(t) = numbers(part, ':').filter(|t| (2..=3).contains(&t.len())) {
            let second = t.get(2).copied().unwrap_or(0);
            // 24:00:00 is the one time in hour 24 (a day's end); past it is out of range
            let past_day_end = t[0] == 24
                && (t[1] > 0
                    || second > 0
                    || part.contains('.')
                        && part
                            .trim_end_matches('0')
                            .ends_with(|c: char| c.is_ascii_digit() && c != '0'));
            time |= t[0] > 24 || t[1] > 59 || second > 60 || past_day_end;
        }
    }
    (date || time).then_some(date)
}

impl From<DataFusionError> for WeirError {
    fn from(e: DataFusionError) -> Self {
        from_datafusion(&e)
    }
}

fn from_datafusion(e: &DataFusionError) -> WeirError {
    // a pattern DataFusion's regex kernels could not compile, whatever wraps it
    if let DataFusionError::ArrowError(..)
    | DataFusionError::Execution(_)
    | DataFusionError::Internal(_) = e
        && let Some(r) = regex_error(&e.to_string())
    {
        return r;
    }
    if let DataFusionError::Plan(m) | DataFusionError::Internal(m) = e
        && let Some(w) = no_matching_signature(m)
    {
        return w;
    }
    match e {
        DataFusionError::Context(_, inner) => from_datafusion(inner),
        DataFusionError::Shared(inner) => from_datafusion(inner),
        DataFusionError::Diagnostic(_, inner) => from_datafusion(inner),
        DataFusionError::Collection(errs) => errs
            .first()
            .map(from_datafusion)
            .unwrap_or_else(|| WeirError::internal("empty error collection")),
        DataFusionError::ArrowError(ae, _) => from_arrow(ae),
        DataFusionError::SQL(pe, _) => WeirError::from(clone_parser_error(pe)),
        DataFusionError::SchemaError(se, _) => match se.as_ref() {
            SchemaError::FieldNotFound {
                field,
                valid_fields,
            } => missing_column(field, valid_fields),
            SchemaError::AmbiguousReference { field } => WeirError::new(
                sqlstate::AMBIGUOUS_COLUMN,
                format!("column reference \"{}\" is ambiguous", field.name),
            ),
            SchemaError::DuplicateQualifiedField { name, .. }
            | SchemaError::DuplicateUnqualifiedField { name } => WeirError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ),
        },
        DataFusionError::NotImplemented(m) => WeirError::not_supported(clean(m)),
        DataFusionError::Plan(m) => classify_plan_message(m),
        DataFusionError::Execution(m) => classify_execution_message(m),
        DataFusionError::External(inner) => {
            if let Some(w) = inner.downcast_ref::<WeirError>() {
                w.clone()
            } else if let Some(df) = inner.downcast_ref::<DataFusionError>() {
                from_datafusion(df)
            } else if let Some(ae) = inner.downcast_ref::<ArrowError>() {
                from_arrow(ae)
            } else {
                WeirError::internal(inner.to_string())
            }
        }
        DataFusionError::ResourcesExhausted(m) => WeirError::new("53200", m.clone()),
        other => WeirError::internal(other.to_string()),
    }
}

/// 42703 for a column that is not there, worded as Postgres words it (`column "nme" does
/// not exist`, `column er.nme does not exist` when qualified), with its hint at the nearest
/// column the query could read: Levenshtein distance at most half the written name's
/// length (Postgres' `errorMissingColumn`), the best one, or the best two when they are of
/// different relations.
fn missing_column(
    field: &datafusion::common::Column,
    valid: &[datafusion::common::Column],
) -> WeirError {
    let written = &field.name;
    let message = match &field.relation {
        Some(r) => format!("column {}.{written} does not exist", r.table()),
        None => format!("column \"{written}\" does not exist"),
    };
    let e = WeirError::new(sqlstate::UNDEFINED_COLUMN, message);
    let limit = written.chars().count() / 2;
    let mut best: Vec<&datafusion::common::Column> = Vec::new();
    let mut best_d = usize::MAX;
    for c in valid {
        if let Some(r) = &field.relation
            && c.relation.as_ref().is_none_or(|q| q.table() != r.table())
        {
            continue;
        }
        // (internal columns, `weir_...` markers, are no suggestion)
        if c.name.starts_with("weir_") || c.name.starts_with("__") {
            continue;
        }
        let d = levenshtein(&c.name, written);
        if d > limit || d > best_d {
            continue;
        }
        if d < best_d {
            best_d = d;
            best.clear();
        }
        if !best.iter().any(|b| b.relation == c.relation) {
            best.push(c);
        }
    }
    let name = |c: &datafusion::common::Column| match &c.relation {
        Some(r) => format!("\"{}.{}\"", r.table(), c.name),
        None => format!("\"{}\"", c.name),
    };
    match best.as_slice() {
        [one] => e.with_hint(format!(
            "Perhaps you meant to reference the column {}.",
            name(one)
        )),
        [a, b] => e.with_hint(format!(
            "Perhaps you meant to reference the column {} or the column {}.",
            name(a),
            name(b)
        )),
        _ => e,
    }
}

/// Edit distance (insertions, deletions, substitutions of characters, each 1).
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn clone_parser_error(e: &ParserError) -> ParserError {
    match e {
        ParserError::TokenizerError(m) => ParserError::TokenizerError(m.clone()),
        ParserError::ParserError(m) => ParserError::ParserError(m.clone()),
        ParserError::RecursionLimitExceeded => ParserError::RecursionLimitExceeded,
    }
}

/// DataFusion's messages sometimes carry a trailing backtrace hint; keep the first line.
fn clean(m: &str) -> String {
    m.lines().next().unwrap_or(m).trim().to_owned()
}

/// The column name DataFusion refused as repeated in a projection ("Projections require
/// unique expression names but the expression "t.a" at position 0 and ..."), without its
/// qualifier: Postgres allows a result column name twice (`SELECT *, a FROM t`).
pub fn repeated_projection_name(message: &str) -> Option<String> {
    let rest = message
        .split("Projections require unique expression names")
        .nth(1)?;
    let quoted = rest.split('"').nth(1)?;
    Some(quoted.rsplit('.').next().unwrap_or(quoted).to_owned())
}

fn classify_plan_message(m: &str) -> WeirError {
    let msg = clean(m);
    let lower = msg.to_ascii_lowercase();
    // DataFusion's words for what Postgres words so
    if let Some(rest) = msg.strip_prefix("Order by column out of bounds, specified: ") {
        let n = rest.split(',').next().unwrap_or(rest);
        return WeirError::new(
            "42P10",
            format!("ORDER BY position {n} is not in select list"),
        );
    }
    if lower.starts_with("for select distinct, order by expressions") {
        return WeirError::new(
            "42P10",
            "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
        );
    }
    if let Some(e) = operator_does_not_exist(&msg) {
        return e;
    }
    if lower.starts_with("limit must be >= 0") {
        return WeirError::new("2201W", "LIMIT must not be negative");
    }
    if lower.starts_with("offset must be >=0") || lower.starts_with("offset must be >= 0") {
        return WeirError::new("2201X", "OFFSET must not be negative");
    }
    if let Some(name) = lower
        .strip_prefix("table '")
        .and_then(|rest| rest.strip_suffix("' not found"))
    {
        // DataFusion names the table fully qualified: weir.public.t
        let short = name.rsplit('.').next().unwrap_or(name);
        return WeirError::undefined_table(short);
    }
    // a HAVING over no aggregate and no GROUP BY: Postgres names its first column
    if let Some(rest) = msg.strip_prefix("HAVING clause references: ")
        && let Some(column) = first_column_reference(rest)
    {
        return WeirError::new(
            sqlstate::GROUPING_ERROR,
            format!(
                "column \"{column}\" must appear in the GROUP BY clause or be used in an aggregate function"
            ),
        );
    }
    if lower.contains("must appear in the group by clause")
        && let Some(column) = msg
            .split_once("column \"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(c, _)| c)
    {
        return WeirError::new(
            sqlstate::GROUPING_ERROR,
            format!(
                "column \"{column}\" must appear in the GROUP BY clause or be used in an aggregate function"
            ),
        );
    }
    // a result column name twice where Postgres refuses it too (a materialized view's
    // list; a plain query's repeated names are renamed before this is seen)
    if let Some(name) = repeated_projection_name(&msg) {
        return WeirError::new(
            sqlstate::DUPLICATE_COLUMN,
            format!("column \"{name}\" specified more than once"),
        );
    }
    if lower.starts_with("inconsistent data length across values list") {
        return WeirError::syntax("VALUES lists must all be the same length");
    }
    if lower.contains("invalid function") || lower.contains("no function matches") {
        return undefined_function(&msg);
    }
    if lower.contains("cannot be cast") || lower.contains("cannot cast") {
        return WeirError::new(sqlstate::DATATYPE_MISMATCH, msg);
    }
    if lower.contains("unsupported") || lower.contains("not supported") {
        return WeirError::not_supported(msg);
    }
    if lower.contains("failed to coerce") || lower.contains("type mismatch") {
        return WeirError::new(sqlstate::DATATYPE_MISMATCH, msg);
    }
    WeirError::new(sqlstate::SYNTAX_ERROR, msg)
}

/// The first qualified column (`t.id`) in DataFusion's display of an expression (read with
/// sqlparser's tokenizer: a quoted literal `Utf8("a.b")` is one token, a call `f.g(` none).
fn first_column_reference(expr: &str) -> Option<String> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let mut tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, expr)
        .tokenize()
        .ok()?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    tokens.push(Token::EOF);
    tokens.windows(4).find_map(|w| match w {
        [Token::Word(q), Token::Period, Token::Word(c), next]
            if q.quote_style.is_none() && *next != Token::LParen =>
        {
            Some(format!("{}.{}", q.value, c.value))
        }
        _ => None,
    })
}

/// DataFusion's "Invalid function 'f'" and "No function matches the given name and
/// argument types 'f(Int64, Utf8)'" as Postgres says them: `function f(bigint, text) does
/// not exist` (without the types when DataFusion does not name them), with Postgres' hint.
fn undefined_function(msg: &str) -> WeirError {
    let quoted = |after: &str| {
        msg.split_once(after)
            .and_then(|(_, rest)| rest.split_once('\''))
            .map(|(q, _)| q.to_owned())
    };
    let signature = quoted("argument types '").map(|sig| match sig.split_once('(') {
        Some((name, args)) => {
            let args: Vec<String> = top_level_items(args.strip_suffix(')').unwrap_or(args))
                .into_iter()
                .filter(|a| !a.is_empty())
                .map(pg_type_of_arrow_text)
                .collect();
            format!("{}({})", name.to_lowercase(), args.join(", "))
        }
        None => sig,
    });
    match signature.or_else(|| quoted("Invalid function '")) {
        Some(f) => WeirError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function {f} does not exist"),
        )
        .with_hint(
            "No function matches the given name and argument types. You might need to add explicit type casts.",
        ),
        None => WeirError::new(sqlstate::UNDEFINED_FUNCTION, msg.to_owned()),
    }
}

/// DataFusion's type coercion failures of an operator in Postgres' words: "Cannot coerce
/// arithmetic expression Int32 + Utf8 to valid types" (also comparisons and `||`) is 42883
/// `operator does not exist: integer + text`; a non-Boolean operand of AND/OR is 42804
/// `argument of AND must be type boolean, not type integer`.
fn operator_does_not_exist(msg: &str) -> Option<WeirError> {
    let operands = [
        ("Cannot coerce arithmetic expression ", " to valid types"),
        (
            "Cannot infer common argument type for comparison operation ",
            "",
        ),
        (
            "Cannot infer common string type for string concat operation ",
            "",
        ),
        (
            "Cannot infer common argument type for logical boolean operation ",
            "",
        ),
    ]
    .iter()
    .find_map(|(head, tail)| {
        let rest = msg.strip_prefix(head)?;
        Some(
            rest.strip_suffix(tail)
                .unwrap_or(rest)
                .trim_end_matches('.'),
        )
    })?;
    // "Int32 + Utf8": the operator is the one word between the two types
    let items: Vec<&str> = operands.split(' ').collect();
    let at = items.iter().position(|w| {
        !w.is_empty() && w.chars().all(|c| !c.is_alphanumeric())
            || w.eq_ignore_ascii_case("and")
            || w.eq_ignore_ascii_case("or")
    })?;
    let (left, op, right) = (items[..at].join(" "), items[at], items[at + 1..].join(" "));
    let (l, r) = (pg_type_of_arrow_text(&left), pg_type_of_arrow_text(&right));
    if op.eq_ignore_ascii_case("and") || op.eq_ignore_ascii_case("or") {
        let other = if l == "boolean" { r } else { l };
        return Some(WeirError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "argument of {} must be type boolean, not type {other}",
                op.to_uppercase()
            ),
        ));
    }
    Some(
        WeirError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!("operator does not exist: {l} {op} {r}"),
        )
        .with_hint(
            "No operator matches the given name and argument types. You might need to add explicit type casts.",
        ),
    )
}

/// `a, Decimal128(10, 2), b` split at its top-level commas, each trimmed.
fn top_level_items(text: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].trim());
    items
}

/// An Arrow type as DataFusion prints it (`Int64`, `Decimal128(10, 2)`, `List(Int64)`), in
/// Postgres' name (`bigint`, `numeric`, `bigint[]`).
fn pg_type_of_arrow_text(t: &str) -> String {
    match t {
        "Int16" => "smallint".to_owned(),
        "Int32" => "integer".to_owned(),
        "Int64" => "bigint".to_owned(),
        "Float32" => "real".to_owned(),
        "Float64" => "double precision".to_owned(),
        "Boolean" => "boolean".to_owned(),
        "Utf8" | "Utf8View" | "LargeUtf8" => "text".to_owned(),
        "Date32" => "date".to_owned(),
        "Null" => "unknown".to_owned(),
        t if t.starts_with("Decimal") => "numeric".to_owned(),
        // "Timestamp(µs)", "Timestamp(Microsecond, Some(\"UTC\"))"
        t if t.starts_with("Timestamp") && (t.contains("Some(") || t.contains(", \"")) => {
            "timestamp with time zone".to_owned()
        }
        t if t.starts_with("Timestamp") => "timestamp without time zone".to_owned(),
        t if t.starts_with("Interval") => "interval".to_owned(),
        t if t.starts_with("Time") => "time without time zone".to_owned(),
        t if t.starts_with("List(") => {
            let inner = t["List(".len()..].strip_suffix(')').unwrap_or_default();
            let inner = inner
                .strip_prefix("nullable ")
                .or_else(|| inner.strip_prefix("non-null "))
                .unwrap_or(inner);
            match pg_type_of_arrow_text(inner) {
                known if !known.contains(['(', ' ', ':']) || known == "double precision" => {
                    format!("{known}[]")
                }
                _ => "anyarray".to_owned(),
            }
        }
        other => other.to_lowercase(),
    }
}

/// "Function 'round' failed to match any signature, errors: ... expects 2 arguments but
/// received 1 ... but received List(Decimal(2, 1)) (DataType: List(Decimal128(2, 1)))": no
/// such function for these arguments (their type named when there is one argument, the only
/// one DataFusion names).
fn no_matching_signature(m: &str) -> Option<WeirError> {
    if !m.contains("failed to match any signature") {
        return None;
    }
    let name = m
        .split_once("Function '")
        .and_then(|(_, r)| r.split_once('\''))
        .map_or("?", |(n, _)| n);
    let one_argument =
        m.contains("arguments but received 1,") || m.contains("arguments but received 1.");
    let args = m
        .split_once("(DataType: ")
        .filter(|_| one_argument)
        .map(|(_, rest)| {
            // the type, up to its own closing parenthesis
            let mut depth = 0i32;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth < 0
                })
                .map_or(rest.len(), |(i, _)| i);
            format!("({})", pg_type_of_arrow_text(&rest[..end]))
        })
        .unwrap_or_default();
    Some(WeirError::new(
        sqlstate::UNDEFINED_FUNCTION,
        format!("function {}{args} does not exist", name.to_lowercase()),
    )
    .with_hint(
        "No function matches the given name and argument types. You might need to add explicit type casts.",
    ))
}

/// `function name(type, ...) does not exist` (42883) with Postgres' hint, the arguments
/// named by their SQL types: what a function answers for argument types it has no form for.
pub fn no_function_for(name: &str, args: &[datafusion::arrow::datatypes::DataType]) -> WeirError {
    let types: Vec<String> = args
        .iter()
        .map(|t| {
            crate::sql::types::SqlType::from_arrow(t)
                .map(|t| t.display_name())
                .unwrap_or_else(|| t.to_string())
        })
        .collect();
    WeirError::new(
        sqlstate::UNDEFINED_FUNCTION,
        format!("function {name}({}) does not exist", types.join(", ")),
    )
    .with_hint(
        "No function matches the given name and argument types. You might need to add explicit type casts.",
    )
}

fn classify_execution_message(m: &str) -> WeirError {
    let msg = clean(m);
    if let Some(e) = numeric_overflow(&msg) {
        return e;
    }
    let lower = msg.to_ascii_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        return WeirError::new(sqlstate::DIVISION_BY_ZERO, "division by zero");
    }
    if lower.contains("scalar subquery returned more than one row") {
        return WeirError::new(
            "21000",
            "more than one row returned by a subquery used as an expression",
        );
    }
    if lower.contains("overflow") || lower.contains("out of range") {
        // arrow's kernels name the array type: say it as Postgres does
        // (a numeric cast to an integer: "value of 1e20 is out of range Int64")
        for (arrow, pg) in [
            ("int16array", "smallint"),
            ("int32array", "integer"),
            ("int64array", "bigint"),
            ("is out of range int16", "smallint"),
            ("is out of range int32", "integer"),
            ("is out of range int64", "bigint"),
        ] {
            if lower.contains(arrow) {
                return WeirError::new(
                    sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!("{pg} out of range"),
                );
            }
        }
        return WeirError::new(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, msg);
    }
    if lower.contains("cannot cast") || lower.contains("cast error") || lower.contains("parse") {
        return WeirError::new(sqlstate::INVALID_TEXT_REPRESENTATION, msg);
    }
    WeirError::new(sqlstate::DATA_EXCEPTION, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_overflow_names_the_type() {
        for (m, t) in [
            ("Overflow happened on: -2147483648 / -1", Some("integer")),
            (
                "Overflow happened on: -9223372036854775808 / -1",
                Some("bigint"),
            ),
            ("Overflow happened on: -32768 / -1", Some("smallint")),
            ("Overflow happened on: 2147483647 + 1", Some("integer")),
            ("Overflow happened on: 1.5 * 2", None),
        ] {
            assert_eq!(integer_overflow_type(m), t, "{m}");
        }
    }

    #[test]
    fn table_not_found_maps_to_42p01() {
        let e = WeirError::from(DataFusionError::Plan(
            "table 'weir.public.nope' not found".into(),
        ));
        assert_eq!(e.code, sqlstate::UNDEFINED_TABLE);
        assert_eq!(e.message, "relation \"nope\" does not exist");
    }

    #[test]
    fn cast_error_maps_to_22p02() {
        let e = WeirError::from(ArrowError::CastError(
            "Cannot cast string 'abc' to value of Int64 type".into(),
        ));
        assert_eq!(e.code, sqlstate::INVALID_TEXT_REPRESENTATION);
    }
}
