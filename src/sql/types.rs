//! The SQL types a column can be declared with, and how each maps to an Arrow type (storage
//! and execution) and to a Postgres type (OID, type modifier, `format_type` text on the wire
//! and in `pg_catalog`).
//!
//! The Postgres type of a result column is derived from its Arrow type, refined by the field
//! metadata key [`PG_TYPE_KEY`] where the Arrow type alone is ambiguous (`jsonb` and
//! `varchar(n)` are both `Utf8`; `numeric` without a declared scale is printed without
//! trailing zeros).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, IntervalUnit, TimeUnit};
use datafusion::sql::sqlparser::ast;
use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};

/// Field metadata key carrying a column's declared SQL type (its `format_type` text).
pub const PG_TYPE_KEY: &str = "weir.pg_type";

/// Timezone used for TIMESTAMPTZ columns in Arrow.
pub const UTC: &str = "UTC";

/// The zone of `timestamptz` values computed in queries (DataFusion's `execution.time_zone`;
/// a column's is [`UTC`]: the same instant either way).
pub const SESSION_ZONE: &str = "+00:00";

/// Field metadata key carrying an enum type (`CREATE TYPE ... AS ENUM`) as JSON
/// ([`EnumType`]): its OID, name and labels in their order, so a result column knows its
/// type's OID for the wire and its labels' order for sorting and comparing.
pub const ENUM_KEY: &str = "weir.enum";
/// Field metadata of a cast's target that is a domain (`catalog/domains.rs`): the
/// domain's JSON, so the cast checks its constraints.
pub const DOMAIN_KEY: &str = "weir.domain";

/// An enum type (`CREATE TYPE name AS ENUM ('a', 'b')`): values are stored as their
/// label's text; they sort and compare by the labels' declared order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnumType {
    /// `pg_type.oid`; 0 while only the name is known (a column type the parser read,
    /// before the engine looked it up in the catalog).
    pub oid: u32,
    pub name: String,
    /// In their sort order.
    pub labels: Vec<String>,
}

impl EnumType {
    /// A type known only by name (see [`EnumType::oid`]).
    pub fn unresolved(name: String) -> EnumType {
        EnumType {
            oid: 0,
            name,
            labels: Vec::new(),
        }
    }

    /// Every text is one of the labels (Postgres' `enum_in`), else 22P02 for the first that
    /// is not: what a table checks on write and a cast to the type checks.
    pub fn check<'a>(&self, texts: impl IntoIterator<Item = Option<&'a str>>) -> Result<()> {
        let labels: std::collections::HashSet<&str> =
            self.labels.iter().map(String::as_str).collect();
        match texts.into_iter().flatten().find(|v| !labels.contains(v)) {
            Some(v) => Err(self.invalid_input(v)),
            None => Ok(()),
        }
    }

    /// Postgres' 22P02 for a text that is not one of the labels.
    pub fn invalid_input(&self, text: &str) -> WeirError {
        WeirError::new(
            crate::error::sqlstate::INVALID_TEXT_REPRESENTATION,
            format!(
                "invalid input value for enum {}: \"{text}\"",
                crate::sql::pg_text::quote_ident(&self.name)
            ),
        )
    }
}

/// Default precision/scale of an unconstrained NUMERIC.
pub const NUMERIC_DEFAULT_PRECISION: u8 = 38;
pub const NUMERIC_DEFAULT_SCALE: i8 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SqlType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// NUMERIC(p, s); `None` when declared without a precision. Stored as an Arrow decimal
    /// of precision `min(p, 38)` ([`NUMERIC_DEFAULT_PRECISION`]): a precision past 38 (up to
    /// Postgres' 1000, Prisma's `Decimal` is `decimal(65,30)`) is kept as declared in the
    /// catalog, and its values are held to 38 digits in all (22003 past them).
    Numeric(Option<(u16, i8)>),
    Text,
    Varchar(Option<u32>),
    /// `character(n)` (`bpchar`): stored without its trailing blanks, which Postgres treats
    /// as insignificant (comparisons, `length`, casts to text drop them), and padded to `n`
    /// when sent. `None`: `bpchar` without a length (no padding).
    Bpchar(Option<u32>),
    Date,
    /// `time(p)`, `timestamp(p)`, `timestamptz(p)`: `p` the declared fractional-second
    /// digits (0..=6; `None`: not declared, all six). Values written to a column of a
    /// declared precision are rounded to it (`round_fractional_seconds`).
    Time(Option<u8>),
    Timestamp(Option<u8>),
    TimestampTz(Option<u8>),
    Interval,
    Bytea,
    Jsonb,
    /// `json`: the text as written (checked to be JSON; key order, white space and
    /// duplicate keys kept, as Postgres keeps them), and what the json functions
    /// (`json_build_object`, `to_json`, `json_agg`, ...) return.
    Json,
    /// `uuid`, stored as its canonical text (`sql::uuid`).
    Uuid,
    /// A user-defined enum type, stored as its label's text.
    Enum(EnumType),
    /// System types that catalog tables expose: `oid`, `name`, `"char"`.
    Oid,
    Name,
    InternalChar,
    /// A one-dimensional array of an element type (`int4[]`, `text[]`).
    Array(Box<SqlType>),
    /// The system catalogs' `int2vector` (of `Int2`) and `oidvector` (of `Oid`): an array
    /// whose text form is its elements separated by spaces (`pg_index.indkey` is `1 2`).
    Vector(Box<SqlType>),
    /// `void`, the result of functions called for their effect (`sql/void.rs`): sent as an
    /// empty value.
    Void,
    /// `inet` and `cidr`, stored as their canonical text (`sql::inet`).
    Inet,
    Cidr,
}

impl SqlType {
    /// One of Postgres' numeric types (its category N but `oid`).
    pub fn is_number(&self) -> bool {
        matches!(
            self,
            SqlType::Int2
                | SqlType::Int4
                | SqlType::Int8
                | SqlType::Float4
                | SqlType::Float8
                | SqlType::Numeric(_)
        )
    }

    pub fn from_ast(dt: &ast::DataType) -> Result<SqlType> {
        use ast::DataType as D;
        if let Some(unquoted) = unquoted_builtin(dt) {
            return Self::from_ast(&unquoted);
        }
        Ok(match dt {
            D::Bool | D::Boolean => SqlType::Bool,
            D::SmallInt(_) | D::Int2(_) => SqlType::Int2,
            D::Int(_) | D::Integer(_) | D::Int4(_) => SqlType::Int4,
            D::BigInt(_) | D::Int8(_) => SqlType::Int8,
            D::Real | D::Float4 => SqlType::Float4,
            D::Double(_) | D::DoublePrecision | D::Float8 => SqlType::Float8,
            D::Float(info) => match info {
                ast::ExactNumberInfo::Precision(p) if *p <= 24 => SqlType::Float4,
                _ => SqlType::Float8,
            },
            D::Numeric(info) | D::Decimal(info) | D::Dec(info) => match info {
                ast::ExactNumberInfo::None => SqlType::Numeric(None),
                ast::ExactNumberInfo::Precision(p) => SqlType::Numeric(Some(check_numeric(*p, 0)?)),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => {
                    SqlType::Numeric(Some(check_numeric(*p, *s)?))
                }
            },
            D::Text | D::String(_) => SqlType::Text,
            D::Varchar(len) | D::CharacterVarying(len) => SqlType::Varchar(char_len(len)?),
            D::Char(len) | D::Character(len) => SqlType::Bpchar(Some(char_len(len)?.unwrap_or(1))),
            D::Date => SqlType::Date,
            D::Time(p, _) => SqlType::Time(seconds_precision(*p)?),
            D::Timestamp(p, tz) => match tz {
                ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz => {
                    SqlType::TimestampTz(seconds_precision(*p)?)
                }
                _ => SqlType::Timestamp(seconds_precision(*p)?),
            },
            D::Interval { .. } => SqlType::Interval,
            D::Bytea => SqlType::Bytea,
            D::JSONB => SqlType::Jsonb,
            D::JSON => SqlType::Json,
            D::Uuid => SqlType::Uuid,
            D::Array(def) => match def {
                ast::ArrayElemTypeDef::AngleBracket(t)
                | ast::ArrayElemTypeDef::SquareBracket(t, _)
                | ast::ArrayElemTypeDef::Parenthesis(t) => {
                    // (an unknown element: the array type is what does not exist)
                    SqlType::Array(Box::new(
                        SqlType::from_ast(t).map_err(WeirError::of_array_type)?,
                    ))
                }
                ast::ArrayElemTypeDef::None => {
                    return Err(WeirError::syntax("array type needs an element type"));
                }
            },
            D::Custom(name, args) if args.is_empty() => {
                let n = name.to_string().to_ascii_lowercase();
                match n.trim_start_matches("pg_catalog.") {
                    "timestamptz" => SqlType::TimestampTz(None),
                    "jsonb" => SqlType::Jsonb,
                    "json" => SqlType::Json,
                    "uuid" => SqlType::Uuid,
                    "inet" => SqlType::Inet,
                    "cidr" => SqlType::Cidr,
                    "int2" => SqlType::Int2,
                    "int4" => SqlType::Int4,
                    "int8" => SqlType::Int8,
                    "float4" => SqlType::Float4,
                    "float8" => SqlType::Float8,
                    "bool" => SqlType::Bool,
                    "bytea" => SqlType::Bytea,
                    "text" => SqlType::Text,
                    "varchar" => SqlType::Varchar(None),
                    "bpchar" => SqlType::Bpchar(None),
                    "numeric" => SqlType::Numeric(None),
                    "oid" => SqlType::Oid,
                    "name" => SqlType::Name,
                    "char" => SqlType::InternalChar,
                    // (named as written: quoted parts keep their case, and no quotes)
                    _ => {
                        let written: Vec<String> = name
                            .0
                            .iter()
                            .map(|p| match p.as_ident() {
                                Some(i) if i.quote_style.is_some() => i.value.clone(),
                                _ => p.to_string().to_ascii_lowercase(),
                            })
                            .collect();
                        return Err(unknown_type(&written.join(".")));
                    }
                }
            }
            other => return Err(unknown_type(&other.to_string())),
        })
    }

    pub fn arrow_type(&self) -> DataType {
        match self {
            SqlType::Bool => DataType::Boolean,
            SqlType::Int2 => DataType::Int16,
            SqlType::Int4 => DataType::Int32,
            SqlType::Int8 => DataType::Int64,
            SqlType::Float4 => DataType::Float32,
            SqlType::Float8 => DataType::Float64,
            SqlType::Numeric(Some((p, s))) => {
                DataType::Decimal128((*p).min(NUMERIC_DEFAULT_PRECISION as u16) as u8, *s)
            }
            SqlType::Numeric(None) => {
                DataType::Decimal128(NUMERIC_DEFAULT_PRECISION, NUMERIC_DEFAULT_SCALE)
            }
            SqlType::Text
            | SqlType::Varchar(_)
            | SqlType::Bpchar(_)
            | SqlType::Jsonb
            | SqlType::Json
            | SqlType::Uuid
            | SqlType::Inet
            | SqlType::Cidr
            | SqlType::Enum(_) => DataType::Utf8,
            SqlType::Date => DataType::Date32,
            SqlType::Time(_) => DataType::Time64(TimeUnit::Microsecond),
            SqlType::Timestamp(_) => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::TimestampTz(_) => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            SqlType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            SqlType::Bytea => DataType::Binary,
            SqlType::Oid => DataType::UInt32,
            SqlType::Name | SqlType::InternalChar => DataType::Utf8,
            SqlType::Array(e) | SqlType::Vector(e) => {
                DataType::List(Arc::new(Field::new_list_field(e.arrow_type(), true)))
            }
            SqlType::Void => DataType::Utf8,
        }
    }

    /// The Postgres type OID.
    pub fn oid(&self) -> u32 {
        match self {
            SqlType::Bool => 16,
            SqlType::Int2 => 21,
            SqlType::Int4 => 23,
            SqlType::Int8 => 20,
            SqlType::Float4 => 700,
            SqlType::Float8 => 701,
            SqlType::Numeric(_) => 1700,
            SqlType::Text => 25,
            SqlType::Varchar(_) => 1043,
            SqlType::Bpchar(_) => 1042,
            SqlType::Date => 1082,
            SqlType::Time(_) => 1083,
            SqlType::Timestamp(_) => 1114,
            SqlType::TimestampTz(_) => 1184,
            SqlType::Interval => 1186,
            SqlType::Bytea => 17,
            SqlType::Jsonb => 3802,
            SqlType::Json => 114,
            SqlType::Uuid => 2950,
            SqlType::Inet => 869,
            SqlType::Cidr => 650,
            SqlType::Enum(e) => e.oid,
            SqlType::Oid => 26,
            SqlType::Name => 19,
            SqlType::InternalChar => 18,
            // (a multi-dimensional array is sent as text[]: its binary form here nests one
            // array per element where Postgres' has one header with every dimension)
            SqlType::Array(e) => array_oid(e.oid()).unwrap_or(1009),
            SqlType::Vector(e) if **e == SqlType::Oid => 30,
            SqlType::Vector(_) => 22,
            SqlType::Void => 2278,
        }
    }

    /// `pg_type.typlen`: the bytes of a fixed-length type, -1 for a variable-length one.
    pub fn typlen(&self) -> i16 {
        match self {
            SqlType::Bool | SqlType::InternalChar => 1,
            SqlType::Int2 => 2,
            SqlType::Int4 | SqlType::Float4 | SqlType::Date | SqlType::Oid | SqlType::Enum(_) => 4,
            SqlType::Int8
            | SqlType::Float8
            | SqlType::Timestamp(_)
            | SqlType::TimestampTz(_)
            | SqlType::Time(_) => 8,
            SqlType::Interval | SqlType::Uuid => 16,
            SqlType::Name => 64,
            _ => -1,
        }
    }

    /// `pg_attribute.atttypmod`: -1, or the declared length/precision packed as Postgres does.
    pub fn typmod(&self) -> i32 {
        match self {
            SqlType::Varchar(Some(n)) | SqlType::Bpchar(Some(n)) => *n as i32 + 4,
            SqlType::Numeric(Some((p, s))) => ((*p as i32) << 16 | (*s as i32 & 0xffff)) + 4,
            SqlType::Time(Some(p))
            | SqlType::Timestamp(Some(p))
            | SqlType::TimestampTz(Some(p)) => *p as i32,
            // an array's is its element's
            SqlType::Array(e) => e.typmod(),
            _ => -1,
        }
    }

    /// The type as `format_type()` prints it.
    pub fn display_name(&self) -> String {
        match self {
            SqlType::Bool => "boolean".into(),
            SqlType::Int2 => "smallint".into(),
            SqlType::Int4 => "integer".into(),
            SqlType::Int8 => "bigint".into(),
            SqlType::Float4 => "real".into(),
            SqlType::Float8 => "double precision".into(),
            SqlType::Numeric(Some((p, s))) => format!("numeric({p},{s})"),
            SqlType::Numeric(None) => "numeric".into(),
            SqlType::Text => "text".into(),
            SqlType::Varchar(Some(n)) => format!("character varying({n})"),
            SqlType::Varchar(None) => "character varying".into(),
            SqlType::Bpchar(Some(n)) => format!("character({n})"),
            SqlType::Bpchar(None) => "bpchar".into(),
            SqlType::Date => "date".into(),
            SqlType::Time(p) => format!("time{} without time zone", precision_text(*p)),
            SqlType::Timestamp(p) => format!("timestamp{} without time zone", precision_text(*p)),
            SqlType::TimestampTz(p) => format!("timestamp{} with time zone", precision_text(*p)),
            SqlType::Interval => "interval".into(),
            SqlType::Bytea => "bytea".into(),
            SqlType::Jsonb => "jsonb".into(),
            SqlType::Json => "json".into(),
            SqlType::Uuid => "uuid".into(),
            SqlType::Inet => "inet".into(),
            SqlType::Cidr => "cidr".into(),
            // (`app.mood`: a type of a user schema, keyed so)
            SqlType::Enum(e) => crate::catalog::schemas::quote_relation(&e.name),
            SqlType::Oid => "oid".into(),
            SqlType::Name => "name".into(),
            SqlType::InternalChar => "\"char\"".into(),
            // Postgres' array types have no dimensions: `integer[]` for `ARRAY[[1]]` too
            SqlType::Array(e) if matches!(**e, SqlType::Array(_)) => e.display_name(),
            SqlType::Array(e) => format!("{}[]", e.display_name()),
            SqlType::Vector(e) if **e == SqlType::Oid => "oidvector".into(),
            SqlType::Vector(_) => "int2vector".into(),
            SqlType::Void => "void".into(),
        }
    }

    /// The name Postgres' input function gives the type in its errors (`invalid input syntax
    /// for type time: ...`): `time` and `timestamp` without "without time zone".
    pub fn input_name(&self) -> String {
        match self {
            SqlType::Time(_) => "time".into(),
            SqlType::Timestamp(_) => "timestamp".into(),
            SqlType::TimestampTz(_) => "timestamp with time zone".into(),
            SqlType::Numeric(_) => "numeric".into(),
            other => other.display_name(),
        }
    }

    /// Parse what [`SqlType::display_name`] printed (used for field metadata round trips).
    pub fn from_display_name(s: &str) -> Option<SqlType> {
        Some(match s {
            "boolean" => SqlType::Bool,
            "smallint" => SqlType::Int2,
            "integer" => SqlType::Int4,
            "bigint" => SqlType::Int8,
            "real" => SqlType::Float4,
            "double precision" => SqlType::Float8,
            "numeric" => SqlType::Numeric(None),
            "text" => SqlType::Text,
            "character varying" => SqlType::Varchar(None),
            "bpchar" => SqlType::Bpchar(None),
            "character" => SqlType::Bpchar(Some(1)),
            "date" => SqlType::Date,
            "time without time zone" => SqlType::Time(None),
            "timestamp without time zone" => SqlType::Timestamp(None),
            "timestamp with time zone" => SqlType::TimestampTz(None),
            "interval" => SqlType::Interval,
            "bytea" => SqlType::Bytea,
            "jsonb" => SqlType::Jsonb,
            "json" => SqlType::Json,
            "uuid" => SqlType::Uuid,
            "inet" => SqlType::Inet,
            "cidr" => SqlType::Cidr,
            "oid" => SqlType::Oid,
            "name" => SqlType::Name,
            "\"char\"" => SqlType::InternalChar,
            "int2vector" => SqlType::Vector(Box::new(SqlType::Int2)),
            "oidvector" => SqlType::Vector(Box::new(SqlType::Oid)),
            "void" => SqlType::Void,
            other => {
                if let Some(elem) = other.strip_suffix("[]") {
                    return Some(SqlType::Array(Box::new(SqlType::from_display_name(elem)?)));
                }
                if let Some(n) = other
                    .strip_prefix("character varying(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    SqlType::Varchar(Some(n.parse().ok()?))
                } else if let Some(n) = other
                    .strip_prefix("character(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    SqlType::Bpchar(Some(n.parse().ok()?))
                } else if let Some(ps) = other
                    .strip_prefix("numeric(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    let (p, s) = ps.split_once(',')?;
                    SqlType::Numeric(Some((p.parse().ok()?, s.parse().ok()?)))
                } else if let Some((kind, rest)) = other.split_once('(')
                    && let Some((p, zone)) = rest.split_once(") ")
                {
                    let p = Some(p.parse().ok().filter(|p| *p <= MAX_SECONDS_PRECISION)?);
                    match (kind, zone) {
                        ("time", "without time zone") => SqlType::Time(p),
                        ("timestamp", "without time zone") => SqlType::Timestamp(p),
                        ("timestamp", "with time zone") => SqlType::TimestampTz(p),
                        _ => return None,
                    }
                } else {
                    return None;
                }
            }
        })
    }

    /// The SQL type of an Arrow type computed by a query, where no declared type is known.
    pub fn from_arrow(dt: &DataType) -> Option<SqlType> {
        Some(match dt {
            DataType::Boolean => SqlType::Bool,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => SqlType::Int2,
            DataType::Int32 | DataType::UInt16 => SqlType::Int4,
            DataType::Int64 => SqlType::Int8,
            // only catalog OIDs are UInt32 in Weir
            DataType::UInt32 => SqlType::Oid,
            // what row_number(), rank() and cardinality() give: bigint, as in Postgres
            DataType::UInt64 => SqlType::Int8,
            DataType::Float16 | DataType::Float32 => SqlType::Float4,
            DataType::Float64 => SqlType::Float8,
            // what an unconstrained `numeric` is stored as (and what sum, min and max of one
            // give): shown as one, without trailing zeros
            DataType::Decimal128(NUMERIC_DEFAULT_PRECISION, NUMERIC_DEFAULT_SCALE) => {
                SqlType::Numeric(None)
            }
            DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
                SqlType::Numeric(Some((*p as u16, *s)))
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => SqlType::Text,
            DataType::Date32 | DataType::Date64 => SqlType::Date,
            DataType::Time32(_) | DataType::Time64(_) => SqlType::Time(None),
            DataType::Timestamp(_, None) => SqlType::Timestamp(None),
            DataType::Timestamp(_, Some(_)) => SqlType::TimestampTz(None),
            DataType::Interval(_) | DataType::Duration(_) => SqlType::Interval,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => SqlType::Bytea,
            DataType::FixedSizeBinary(_) => SqlType::Bytea,
            DataType::Dictionary(_, v) => return SqlType::from_arrow(v),
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                SqlType::Array(Box::new(field_sql_type(f)?))
            }
            _ => return None,
        })
    }

    /// The Arrow field of a column of this type, with the declared type in its metadata.
    pub fn field(&self, name: &str, nullable: bool) -> Field {
        let mut meta = HashMap::from([(PG_TYPE_KEY.to_owned(), self.display_name())]);
        if let SqlType::Enum(e) = self
            && let Ok(json) = serde_json::to_string(e)
        {
            meta.insert(ENUM_KEY.to_owned(), json);
        }
        Field::new(name, self.arrow_type(), nullable).with_metadata(meta)
    }

    /// The enum type, when this is one.
    pub fn as_enum(&self) -> Option<&EnumType> {
        match self {
            SqlType::Enum(e) => Some(e),
            _ => None,
        }
    }
}

/// The declared SQL type of a result field: from its metadata when a table column flows
/// through unchanged, otherwise from its Arrow type.
pub fn field_sql_type(field: &Field) -> Option<SqlType> {
    if let Some(e) = field_enum_type(field) {
        return Some(SqlType::Enum(e));
    }
    if let Some(declared) = field.metadata().get(PG_TYPE_KEY)
        && let Some(t) = SqlType::from_display_name(declared)
        && t.arrow_type() == *field.data_type()
    {
        return Some(t);
    }
    SqlType::from_arrow(field.data_type())
}

/// The enum type a field's metadata names (a column of one, or a cast to one).
pub fn field_enum_type(field: &Field) -> Option<EnumType> {
    let json = field.metadata().get(ENUM_KEY)?;
    if !matches!(field.data_type(), DataType::Utf8) {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// OIDs of the array types of our element types (`_int4` and friends).
pub fn array_oid(element_oid: u32) -> Option<u32> {
    Some(match element_oid {
        16 => 1000,
        17 => 1001,
        20 => 1016,
        21 => 1005,
        23 => 1007,
        25 => 1009,
        700 => 1021,
        701 => 1022,
        1043 => 1015,
        1042 => 1014,
        1082 => 1182,
        1083 => 1183,
        1114 => 1115,
        1184 => 1185,
        1186 => 1187,
        1700 => 1231,
        3802 => 3807,
        114 => 199,
        2950 => 2951,
        869 => 1041,
        650 => 651,
        19 => 1003,
        18 => 1002,
        26 => 1028,
        _ => return None,
    })
}

/// Postgres' largest `numeric` precision.
const NUMERIC_MAX_PRECISION: u64 = 1000;

fn check_numeric(p: u64, s: i64) -> Result<(u16, i8)> {
    if p == 0 || p > NUMERIC_MAX_PRECISION {
        return Err(WeirError::invalid_parameter(format!(
            "NUMERIC precision {p} must be between 1 and {NUMERIC_MAX_PRECISION}"
        )));
    }
    if s < 0 || s as u64 > p {
        return Err(WeirError::invalid_parameter(format!(
            "NUMERIC scale {s} must be between 0 and precision {p}"
        )));
    }
    // (the Arrow decimal it is stored as holds 38 digits, its scale among them)
    if s > NUMERIC_DEFAULT_PRECISION as i64 {
        return Err(WeirError::not_supported(format!(
            "NUMERIC scale {s} is larger than {NUMERIC_DEFAULT_PRECISION}, the most digits Weir stores"
        )));
    }
    Ok((p as u16, s as i8))
}

fn char_len(len: &Option<ast::CharacterLength>) -> Result<Option<u32>> {
    match len {
        None => Ok(None),
        Some(ast::CharacterLength::IntegerLength { length, .. }) => {
            if *length == 0 || *length > 10_485_760 {
                return Err(WeirError::invalid_parameter(format!(
                    "length for type varchar must be between 1 and 10485760, not {length}"
                )));
            }
            Ok(Some(*length as u32))
        }
        Some(ast::CharacterLength::Max) => Ok(None),
    }
}

/// The most fractional-second digits a `time`/`timestamp` keeps (microseconds).
pub const MAX_SECONDS_PRECISION: u8 = 6;

/// A declared `time(p)`/`timestamp(p)` precision: more than 6 is 6 (Postgres warns and
/// reduces it the same way).
fn seconds_precision(p: Option<u64>) -> Result<Option<u8>> {
    Ok(p.map(|p| p.min(MAX_SECONDS_PRECISION as u64) as u8))
}

/// `(3)` for a declared precision, nothing for none: as `format_type` prints it.
fn precision_text(p: Option<u8>) -> String {
    p.map(|p| format!("({p})")).unwrap_or_default()
}

/// A column's stored SQL type, read from a catalog written by any Weir: before `time`,
/// `timestamp` and `timestamptz` carried a precision they were stored as the bare names
/// (`"Timestamp"`), now as `{"Timestamp": null}`. Each bare name, at any depth (an array's
/// element), is read as the type without a declared precision.
pub fn deserialize_stored<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<SqlType, D::Error> {
    fn upgrade(v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Value::String(s) if matches!(s.as_str(), "Time" | "Timestamp" | "TimestampTz") => {
                Value::Object([(s, Value::Null)].into_iter().collect())
            }
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, v)| (k, upgrade(v))).collect())
            }
            other => other,
        }
    }
    let v = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
    serde_json::from_value(upgrade(v)).map_err(serde::de::Error::custom)
}

/// A built-in type's name written quoted (`"int4"`, `"varchar"(3)`, `pg_catalog."text"`,
/// `"char"`), as the type it names: Postgres reads a quoted name as written (so `"int4"`
/// is int4 and `"INT4"` no type), sqlparser as a custom type's name. None for any other
/// type.
pub fn unquoted_builtin(dt: &ast::DataType) -> Option<ast::DataType> {
    let ast::DataType::Custom(name, args) = dt else {
        return None;
    };
    let (schema, last) = match name.0.as_slice() {
        [l] => (None, l.as_ident()?),
        [s, l] => (Some(s.as_ident()?), l.as_ident()?),
        _ => return None,
    };
    if last.quote_style.is_none() && schema.is_none_or(|s| s.quote_style.is_none()) {
        return None;
    }
    if schema.is_some_and(|s| s.value != "pg_catalog")
        || last.value.is_empty()
        || !last
            .value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return None;
    }
    let bare = || {
        ast::DataType::Custom(
            ast::ObjectName::from(vec![ast::Ident::new(last.value.clone())]),
            args.clone(),
        )
    };
    // `"char"` is the one-byte type, `char` is `character(1)`
    if last.value == "char" {
        return Some(bare());
    }
    let text = match args.is_empty() {
        true => last.value.clone(),
        false => format!("{}({})", last.value, args.join(", ")),
    };
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let parsed = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(&text)
        .ok()?
        .parse_data_type()
        .ok()?;
    Some(match parsed {
        // (a name sqlparser has no keyword for: the Custom branch reads it unquoted)
        ast::DataType::Custom(..) => bare(),
        other => other,
    })
}

fn unknown_type(name: &str) -> WeirError {
    WeirError::undefined_type(name)
}

/// A shared Arrow schema built from SQL-typed columns.
pub fn schema_of<'a>(
    columns: impl IntoIterator<Item = (&'a str, &'a SqlType, bool)>,
) -> Arc<datafusion::arrow::datatypes::Schema> {
    Arc::new(datafusion::arrow::datatypes::Schema::new(
        columns
            .into_iter()
            .map(|(name, ty, nullable)| ty.field(name, nullable))
            .collect::<Vec<_>>(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_round_trip() {
        for t in [
            SqlType::Bool,
            SqlType::Numeric(Some((10, 2))),
            SqlType::Numeric(None),
            SqlType::Varchar(Some(20)),
            SqlType::TimestampTz(None),
            SqlType::TimestampTz(Some(2)),
            SqlType::Timestamp(Some(0)),
            SqlType::Time(Some(3)),
            SqlType::Array(Box::new(SqlType::Timestamp(Some(6)))),
            SqlType::Jsonb,
            SqlType::Json,
            SqlType::Uuid,
            SqlType::Inet,
            SqlType::Array(Box::new(SqlType::Cidr)),
        ] {
            assert_eq!(SqlType::from_display_name(&t.display_name()), Some(t));
        }
    }

    #[test]
    fn typmods_match_postgres() {
        // Postgres: varchar(20) -> 24, numeric(10,2) -> 655366
        assert_eq!(SqlType::Varchar(Some(20)).typmod(), 24);
        assert_eq!(SqlType::Numeric(Some((10, 2))).typmod(), 655366);
        assert_eq!(SqlType::Timestamp(Some(3)).typmod(), 3);
        assert_eq!(SqlType::Time(None).typmod(), -1);
    }

    #[test]
    fn catalogs_written_before_precisions_read() {
        #[derive(serde::Deserialize)]
        struct Col {
            #[serde(deserialize_with = "deserialize_stored")]
            ty: SqlType,
        }
        let old: Col = serde_json::from_str(r#"{"ty":{"Array":"TimestampTz"}}"#).unwrap();
        assert_eq!(old.ty, SqlType::Array(Box::new(SqlType::TimestampTz(None))));
        let old: Col = serde_json::from_str(r#"{"ty":"Time"}"#).unwrap();
        assert_eq!(old.ty, SqlType::Time(None));
        let now = serde_json::to_string(&SqlType::Timestamp(Some(3))).unwrap();
        let read: Col = serde_json::from_str(&format!(r#"{{"ty":{now}}}"#)).unwrap();
        assert_eq!(read.ty, SqlType::Timestamp(Some(3)));
    }
}
