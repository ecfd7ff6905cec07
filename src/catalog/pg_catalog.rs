//! `pg_catalog`, generated from Weir's catalog each time a query names one of its tables.
//!
//! Column sets follow Postgres 16 for the columns clients read (psql's `\d` family now;
//! drivers and BI tools extend it). OIDs are the ones the catalog assigned and stored, so they
//! agree across tables, connections and restarts. Tables we have nothing for (policies,
//! publications, statistics objects...) exist with their columns and no rows, so client
//! queries that join them plan and return what Postgres would for a database without them.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Int16Builder, Int32Builder, Int64Builder,
    ListBuilder, StringBuilder, UInt32Builder,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;

use crate::catalog::schemas::split_relation_name;
use crate::catalog::{
    Catalog, DATABASE_NAME, DATABASE_OID, Entry, INFORMATION_SCHEMA_NAMESPACE_OID,
    PG_CATALOG_NAMESPACE_OID, PUBLIC_NAMESPACE_OID, SUPERUSER_OID,
};
use crate::sql::types::{SqlType, array_oid};

/// A cell of a catalog row.
#[derive(Debug, Clone)]
pub enum V {
    Null,
    I(i64),
    F(f64),
    S(String),
    B(bool),
    /// An array of text or integers, by the column's element type.
    A(Vec<V>),
    /// Raw bytes (a `bytea` column).
    Bytes(Vec<u8>),
}

impl From<&str> for V {
    fn from(s: &str) -> V {
        V::S(s.to_owned())
    }
}
impl From<String> for V {
    fn from(s: String) -> V {
        V::S(s)
    }
}
impl From<bool> for V {
    fn from(b: bool) -> V {
        V::B(b)
    }
}
impl From<u32> for V {
    fn from(i: u32) -> V {
        V::I(i as i64)
    }
}
impl From<i32> for V {
    fn from(i: i32) -> V {
        V::I(i as i64)
    }
}
impl From<i64> for V {
    fn from(i: i64) -> V {
        V::I(i)
    }
}
impl From<usize> for V {
    fn from(i: usize) -> V {
        V::I(i as i64)
    }
}

use SqlType as T;

fn oid() -> T {
    T::Oid
}
fn name() -> T {
    T::Name
}
fn text() -> T {
    T::Text
}
fn ch() -> T {
    T::InternalChar
}
fn b() -> T {
    T::Bool
}
fn i2() -> T {
    T::Int2
}
fn i4() -> T {
    T::Int4
}
fn arr(t: T) -> T {
    T::Array(Box::new(t))
}
/// `int2vector` (of `i2()`) or `oidvector` (of `oid()`).
fn vector(t: T) -> T {
    T::Vector(Box::new(t))
}

/// Build a catalog table from column specs and rows.
pub fn build_table(columns: &[(&str, T)], rows: Vec<Vec<V>>) -> DfResult<RecordBatch> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, t)| t.field(n, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, t))| column(t, rows.iter().map(|r| r.get(i).unwrap_or(&V::Null))))
        .collect();
    Ok(RecordBatch::try_new(schema, arrays)?)
}

fn column<'a>(t: &T, cells: impl Iterator<Item = &'a V>) -> ArrayRef {
    fn int(v: &V) -> Option<i64> {
        match v {
            V::I(i) => Some(*i),
            V::B(b) => Some(*b as i64),
            _ => None,
        }
    }
    fn string(v: &V) -> Option<String> {
        match v {
            V::S(s) => Some(s.clone()),
            V::I(i) => Some(i.to_string()),
            _ => None,
        }
    }
    match t {
        T::Oid => {
            let mut bld = UInt32Builder::new();
            for v in cells {
                bld.append_option(int(v).map(|i| i as u32));
            }
            Arc::new(bld.finish())
        }
        T::Int2 => {
            let mut bld = Int16Builder::new();
            for v in cells {
                bld.append_option(int(v).map(|i| i as i16));
            }
            Arc::new(bld.finish())
        }
        T::Int4 => {
            let mut bld = Int32Builder::new();
            for v in cells {
                bld.append_option(int(v).map(|i| i as i32));
            }
            Arc::new(bld.finish())
        }
        T::Int8 => {
            let mut bld = Int64Builder::new();
            for v in cells {
                bld.append_option(int(v));
            }
            Arc::new(bld.finish())
        }
        T::Float4 => {
            let mut bld = Float32Builder::new();
            for v in cells {
                bld.append_option(match v {
                    V::F(f) => Some(*f as f32),
                    V::I(i) => Some(*i as f32),
                    _ => None,
                });
            }
            Arc::new(bld.finish())
        }
        T::Timestamp(_) | T::TimestampTz(_) => {
            let vals: Vec<Option<i64>> = cells.map(int).collect();
            let a = datafusion::arrow::array::TimestampMicrosecondArray::from(vals);
            match t {
                T::TimestampTz(_) => Arc::new(a.with_timezone(crate::sql::types::UTC)),
                _ => Arc::new(a),
            }
        }
        T::Bool => {
            let mut bld = BooleanBuilder::new();
            for v in cells {
                bld.append_option(match v {
                    V::B(b) => Some(*b),
                    _ => None,
                });
            }
            Arc::new(bld.finish())
        }
        T::Array(elem) | T::Vector(elem) => match elem.as_ref() {
            T::Oid => {
                let mut bld = ListBuilder::new(UInt32Builder::new())
                    .with_field(Arc::new(Field::new_list_field(elem.arrow_type(), true)));
                for v in cells {
                    match v {
                        V::A(items) => {
                            for it in items {
                                bld.values().append_option(int(it).map(|i| i as u32));
                            }
                            bld.append(true);
                        }
                        _ => bld.append(false),
                    }
                }
                Arc::new(bld.finish())
            }
            T::Int2 => {
                let mut bld = ListBuilder::new(Int16Builder::new())
                    .with_field(Arc::new(Field::new_list_field(elem.arrow_type(), true)));
                for v in cells {
                    match v {
                        V::A(items) => {
                            for it in items {
                                bld.values().append_option(int(it).map(|i| i as i16));
                            }
                            bld.append(true);
                        }
                        _ => bld.append(false),
                    }
                }
                Arc::new(bld.finish())
            }
            _ => {
                let mut bld = ListBuilder::new(StringBuilder::new())
                    .with_field(Arc::new(Field::new_list_field(elem.arrow_type(), true)));
                for v in cells {
                    match v {
                        V::A(items) => {
                            for it in items {
                                bld.values().append_option(string(it));
                            }
                            bld.append(true);
                        }
                        _ => bld.append(false),
                    }
                }
                Arc::new(bld.finish())
            }
        },
        T::Float8 => {
            let mut bld = datafusion::arrow::array::Float64Builder::new();
            for v in cells {
                bld.append_option(match v {
                    V::F(f) => Some(*f),
                    V::I(i) => Some(*i as f64),
                    _ => None,
                });
            }
            Arc::new(bld.finish())
        }
        T::Bytea => {
            let mut bld = datafusion::arrow::array::BinaryBuilder::new();
            for v in cells {
                match v {
                    V::Bytes(b) => bld.append_value(b),
                    _ => bld.append_null(),
                }
            }
            Arc::new(bld.finish())
        }
        T::Text | T::Name | T::InternalChar | T::Varchar(_) => {
            let mut bld = StringBuilder::new();
            for v in cells {
                bld.append_option(string(v));
            }
            Arc::new(bld.finish())
        }
        // V::I: seconds
        T::Interval => {
            use datafusion::arrow::datatypes::IntervalMonthDayNano;
            let mut bld = datafusion::arrow::array::IntervalMonthDayNanoBuilder::new();
            for v in cells {
                bld.append_option(
                    int(v).map(|s| IntervalMonthDayNano::new(0, 0, s * 1_000_000_000)),
                );
            }
            Arc::new(bld.finish())
        }
        // other types appear only as all-NULL columns in catalog tables
        other => datafusion::arrow::array::new_null_array(&other.arrow_type(), cells.count()),
    }
}

/// A schema whose tables are generated from the catalog when a query names them
/// (`pg_catalog`, `information_schema`).
pub struct GeneratedSchema {
    name: &'static str,
    catalog: Arc<Catalog>,
    tables: &'static [&'static str],
    build: fn(&str, &Catalog) -> DfResult<Option<RecordBatch>>,
}

impl fmt::Debug for GeneratedSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GeneratedSchema({})", self.name)
    }
}

impl GeneratedSchema {
    pub fn new(
        name: &'static str,
        catalog: Arc<Catalog>,
        tables: &'static [&'static str],
        build: fn(&str, &Catalog) -> DfResult<Option<RecordBatch>>,
    ) -> Self {
        GeneratedSchema {
            name,
            catalog,
            tables,
            build,
        }
    }

    /// `pg_catalog`.
    pub fn pg_catalog(catalog: Arc<Catalog>) -> Self {
        Self::new("pg_catalog", catalog, TABLES, build)
    }

    /// One of the schema's tables as it is now (`None`: not one of its tables).
    pub fn build_batch(&self, name: &str) -> DfResult<Option<RecordBatch>> {
        if !self.tables.contains(&name) {
            return Ok(None);
        }
        (self.build)(name, &self.catalog)
    }
}

#[async_trait]
impl SchemaProvider for GeneratedSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(batch) = (self.build)(name, &self.catalog)? else {
            return Ok(None);
        };
        let mem = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(Some(Arc::new(mem)))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.contains(&name)
    }
}

const TABLES: &[&str] = &[
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_type",
    "pg_database",
    "pg_roles",
    "pg_user",
    "pg_authid",
    "pg_am",
    "pg_index",
    "pg_constraint",
    "pg_attrdef",
    "pg_description",
    "pg_shdescription",
    "pg_inherits",
    "pg_collation",
    "pg_policy",
    "pg_policies",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_namespace",
    "pg_publication_rel",
    "pg_proc",
    "pg_settings",
    "pg_tables",
    "pg_views",
    "pg_matviews",
    "pg_indexes",
    "pg_tablespace",
    "pg_extension",
    "pg_available_extensions",
    "pg_locks",
    "pg_stat_database",
    "pg_trigger",
    "pg_rewrite",
    "pg_depend",
    "pg_sequences",
    "pg_sequence",
    "pg_foreign_table",
    "pg_partitioned_table",
    "pg_enum",
    "pg_range",
    "pg_event_trigger",
    "pg_conversion",
    "pg_language",
    "pg_opclass",
    "pg_opfamily",
    "pg_auth_members",
    "pg_stat_activity",
    "pg_stat_ssl",
    "pg_stat_all_tables",
    "pg_stat_user_tables",
    "pg_statio_all_tables",
    "pg_statio_user_tables",
    "pg_stat_all_indexes",
    "pg_stat_user_indexes",
    "pg_statio_all_indexes",
    "pg_statio_user_indexes",
    "pg_stat_bgwriter",
    "pg_stat_replication",
    "pg_replication_slots",
    "pg_timezone_names",
    "pg_timezone_abbrevs",
];

/// Built-in types: (oid, name, len, category, element oid for arrays).
const BUILTIN_TYPES: &[(u32, &str, i16, &str)] = &[
    (16, "bool", 1, "B"),
    (17, "bytea", -1, "U"),
    (18, "char", 1, "Z"),
    (19, "name", 64, "S"),
    (20, "int8", 8, "N"),
    (21, "int2", 2, "N"),
    (22, "int2vector", -1, "A"),
    (23, "int4", 4, "N"),
    (24, "regproc", 4, "N"),
    (25, "text", -1, "S"),
    (26, "oid", 4, "N"),
    (30, "oidvector", -1, "A"),
    (114, "json", -1, "U"),
    (700, "float4", 4, "N"),
    (701, "float8", 8, "N"),
    (705, "unknown", -2, "X"),
    (1042, "bpchar", -1, "S"),
    (1043, "varchar", -1, "S"),
    (1082, "date", 4, "D"),
    (1083, "time", 8, "D"),
    (1114, "timestamp", 8, "D"),
    (1184, "timestamptz", 8, "D"),
    (1186, "interval", 16, "T"),
    (1700, "numeric", -1, "N"),
    (2205, "regclass", 4, "N"),
    (2206, "regtype", 4, "N"),
    (650, "cidr", -1, "I"),
    (869, "inet", -1, "I"),
    (2950, "uuid", 16, "U"),
    (3802, "jsonb", -1, "U"),
    (4089, "regnamespace", 4, "N"),
];

/// The 1-based numbers of named columns of a relation (`conkey`).
fn column_numbers(d: &crate::catalog::RelationDesc, names: &[String]) -> Vec<V> {
    names
        .iter()
        .filter_map(|k| d.columns.iter().position(|c| &c.name == k))
        .map(|p| V::I(p as i64 + 1))
        .collect()
}

/// What a foreign key's `pg_constraint` row says of the table it references.
struct ForeignRef {
    relid: u32,
    on_update: &'static str,
    on_delete: &'static str,
    matching: &'static str,
    keys: Vec<V>,
}

/// A `pg_constraint` row of a primary key (`p`), a UNIQUE (`u`; both with their index
/// `index`), a CHECK (`c`) or a FOREIGN KEY (`f`, with the referenced table's index and
/// `foreign`) of relation `relid` over the columns `keys` (1-based).
fn constraint_row(
    oid: u32,
    name: String,
    kind: &str,
    relid: u32,
    index: u32,
    keys: Vec<V>,
    foreign: Option<ForeignRef>,
) -> Vec<V> {
    let (frel, fupd, fdel, fmatch, fkeys) = match foreign {
        Some(f) => (f.relid, f.on_update, f.on_delete, f.matching, V::A(f.keys)),
        None => (0, " ", " ", " ", V::Null),
    };
    vec![
        oid.into(),
        name.into(),
        PUBLIC_NAMESPACE_OID.into(),
        kind.into(),
        false.into(),
        false.into(),
        true.into(),
        relid.into(),
        0u32.into(),
        index.into(),
        0u32.into(),
        frel.into(),
        fupd.into(),
        fdel.into(),
        fmatch.into(),
        true.into(),
        0i32.into(),
        // connoinherit: a primary key, unique or foreign key constraint is not inherited,
        // a CHECK is
        (kind != "c").into(),
        V::A(keys),
        fkeys,
        V::Null,
    ]
}

/// Whether a CHECK constraint's expression text names a column.
pub fn check_reads(expr: &str, column: &str) -> bool {
    let Ok(e) = crate::sql::parser::parse_expr_text(expr) else {
        return false;
    };
    let mut found = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(&e, |x| {
        if let datafusion::sql::sqlparser::ast::Expr::Identifier(id) = x {
            found |= crate::sql::parser::normalize_ident(id) == column;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}

/// The OID of a built-in type's `pg_type` name (`int4`, `text`).
pub fn builtin_type_oid(name: &str) -> Option<u32> {
    BUILTIN_TYPES.iter().find(|t| t.1 == name).map(|t| t.0)
}

fn type_name(oid: u32) -> Option<&'static str> {
    BUILTIN_TYPES.iter().find(|t| t.0 == oid).map(|t| t.1)
}

/// `format_type(oid, typmod)` for the types we know.
pub fn format_type(type_oid: u32, typmod: i32) -> Option<String> {
    let base = |oid: u32| -> Option<SqlType> {
        Some(match oid {
            16 => T::Bool,
            17 => T::Bytea,
            18 => T::InternalChar,
            19 => T::Name,
            20 => T::Int8,
            21 => T::Int2,
            23 => T::Int4,
            25 => T::Text,
            26 => T::Oid,
            22 => T::Vector(Box::new(T::Int2)),
            30 => T::Vector(Box::new(T::Oid)),
            114 => T::Json,
            3802 => T::Jsonb,
            2950 => T::Uuid,
            869 => T::Inet,
            650 => T::Cidr,
            700 => T::Float4,
            701 => T::Float8,
            1043 => T::Varchar(None),
            1042 => T::Bpchar(None),
            1082 => T::Date,
            1083 => T::Time(None),
            1114 => T::Timestamp(None),
            1184 => T::TimestampTz(None),
            1186 => T::Interval,
            1700 => T::Numeric(None),
            _ => return None,
        })
    };
    let with_mod = |t: SqlType| -> SqlType {
        match t {
            T::Varchar(None) if typmod >= 4 => T::Varchar(Some((typmod - 4) as u32)),
            T::Bpchar(None) if typmod >= 4 => T::Bpchar(Some((typmod - 4) as u32)),
            T::Numeric(None) if typmod >= 4 => {
                let m = typmod - 4;
                T::Numeric(Some(((m >> 16) as u16, (m & 0xffff) as i8)))
            }
            T::Time(None) if (0..=6).contains(&typmod) => T::Time(Some(typmod as u8)),
            T::Timestamp(None) if (0..=6).contains(&typmod) => T::Timestamp(Some(typmod as u8)),
            T::TimestampTz(None) if (0..=6).contains(&typmod) => T::TimestampTz(Some(typmod as u8)),
            t => t,
        }
    };
    if let Some(t) = base(type_oid) {
        return Some(with_mod(t).display_name());
    }
    // arrays
    for (oid, ..) in BUILTIN_TYPES {
        if array_oid(*oid) == Some(type_oid) {
            return base(*oid).map(|t| format!("{}[]", with_mod(t).display_name()));
        }
    }
    type_name(type_oid).map(|s| s.to_owned())
}

fn namespace_name(oid: u32) -> &'static str {
    match oid {
        PG_CATALOG_NAMESPACE_OID => "pg_catalog",
        INFORMATION_SCHEMA_NAMESPACE_OID => "information_schema",
        _ => "public",
    }
}

/// The I/O functions of the built-in types (`int4in`, `array_recv`, `record_out`, ...):
/// `pg_proc` lists them and `pg_type.typinput`/`typoutput`/`typreceive`/`typsend` point at
/// them, as clients expect (Npgsql finds array types by `typreceive` = `array_recv`; pgJDBC
/// by `typinput = 'array_in'::regproc`). OIDs 5000 and up, below user OIDs.
pub fn io_procs() -> &'static [(u32, String)] {
    static PROCS: std::sync::OnceLock<Vec<(u32, String)>> = std::sync::OnceLock::new();
    PROCS.get_or_init(|| {
        let mut prefixes: Vec<String> = BUILTIN_TYPES.iter().map(|t| t.1.to_owned()).collect();
        prefixes.push("array_".into());
        prefixes.push("record_".into());
        prefixes.push("enum_".into());
        let mut out = Vec::new();
        for p in prefixes {
            for suffix in ["in", "out", "recv", "send"] {
                out.push((5000 + out.len() as u32, format!("{p}{suffix}")));
            }
        }
        out
    })
}

/// The OID of an I/O function by name (0 when unknown, as Postgres' `-`).
pub fn io_proc_oid(name: &str) -> u32 {
    io_procs()
        .iter()
        .find(|(_, n)| n == name)
        .map(|(o, _)| *o)
        .unwrap_or(0)
}

/// PostgreSQL 15's default btree operator classes of Weir's types: (oid, name, input type,
/// family).
const BTREE_OPCLASSES: &[(u32, &str, u32, u32)] = &[
    (1978, "int4_ops", 23, 1976),
    (1979, "int2_ops", 21, 1976),
    (1981, "oid_ops", 26, 1989),
    (3122, "date_ops", 1082, 434),
    (3123, "float8_ops", 701, 1970),
    (3124, "int8_ops", 20, 1976),
    (3125, "numeric_ops", 1700, 1988),
    (3126, "text_ops", 25, 1994),
    (3127, "timestamptz_ops", 1184, 434),
    (3128, "timestamp_ops", 1114, 434),
    (10000, "array_ops", 2277, 397),
    (10003, "bool_ops", 16, 424),
    (10004, "bpchar_ops", 1042, 426),
    (10006, "bytea_ops", 17, 428),
    (10007, "char_ops", 18, 429),
    (10012, "float4_ops", 700, 1970),
    (10015, "inet_ops", 869, 1974),
    (10022, "interval_ops", 1186, 1982),
    (10028, "name_ops", 19, 1994),
    (10038, "time_ops", 1083, 1996),
    (10065, "uuid_ops", 2950, 2968),
    (10069, "enum_ops", 3500, 3522),
    (10088, "jsonb_ops", 3802, 4033),
];

/// The default btree operator class of a column type (0 for one without: json).
fn default_opclass(ty: &SqlType) -> u32 {
    let intype = match ty {
        SqlType::Varchar(_) => 25,
        SqlType::Cidr => 869,
        SqlType::Enum(_) => 3500,
        SqlType::Array(_) => 2277,
        other => other.oid(),
    };
    BTREE_OPCLASSES
        .iter()
        .find(|c| c.2 == intype)
        .map_or(0, |c| c.0)
}

/// Catalog tables Weir never puts rows in (no triggers, inheritance, policies...). The
/// query rewriter answers scalar subqueries over them with NULL.
pub const ALWAYS_EMPTY: &[&str] = &[
    "pg_opfamily",
    "pg_shdescription",
    "pg_inherits",
    "pg_policy",
    "pg_policies",
    "pg_statistic_ext",
    "pg_trigger",
    "pg_rewrite",
    "pg_foreign_table",
    "pg_partitioned_table",
    "pg_range",
    "pg_event_trigger",
    "pg_conversion",
];

/// A relation of `pg_catalog` or `information_schema`: listed in `pg_class` and
/// `pg_attribute` (so `\\d pg_class`, `'pg_class'::regclass` and tools browsing the system
/// schemas work) with PostgreSQL 15's OID (`pg_class` is 1259, as clients expect in
/// `pg_description.classoid` filters), its schema, and its kind: `r` a catalog, `v` a view.
#[derive(Debug, Clone, Copy)]
pub struct SystemRelation {
    pub oid: u32,
    pub namespace: u32,
    pub name: &'static str,
    pub kind: &'static str,
}

impl SystemRelation {
    const fn new(oid: u32, namespace: u32, name: &'static str, kind: &'static str) -> Self {
        SystemRelation {
            oid,
            namespace,
            name,
            kind,
        }
    }

    /// `pg_catalog` or `information_schema`.
    pub fn schema_name(&self) -> &'static str {
        namespace_name(self.namespace)
    }

    /// The name as `regclass` prints it: qualified unless its schema is searched
    /// (`pg_catalog` always is, `information_schema` is not).
    pub fn shown_name(&self) -> String {
        if self.namespace == PG_CATALOG_NAMESPACE_OID {
            self.name.to_owned()
        } else {
            format!("{}.{}", self.schema_name(), self.name)
        }
    }
}

/// Every generated relation of `pg_catalog` ([`TABLES`]) and `information_schema` (OIDs of
/// PostgreSQL 15's `initdb`; `system_relations_are_listed` checks the list is whole).
pub const SYSTEM_RELATIONS: &[SystemRelation] = &[
    SystemRelation::new(1213, PG_CATALOG_NAMESPACE_OID, "pg_tablespace", "r"),
    SystemRelation::new(1247, PG_CATALOG_NAMESPACE_OID, "pg_type", "r"),
    SystemRelation::new(1249, PG_CATALOG_NAMESPACE_OID, "pg_attribute", "r"),
    SystemRelation::new(1255, PG_CATALOG_NAMESPACE_OID, "pg_proc", "r"),
    SystemRelation::new(1259, PG_CATALOG_NAMESPACE_OID, "pg_class", "r"),
    SystemRelation::new(1260, PG_CATALOG_NAMESPACE_OID, "pg_authid", "r"),
    SystemRelation::new(1261, PG_CATALOG_NAMESPACE_OID, "pg_auth_members", "r"),
    SystemRelation::new(1262, PG_CATALOG_NAMESPACE_OID, "pg_database", "r"),
    SystemRelation::new(2224, PG_CATALOG_NAMESPACE_OID, "pg_sequence", "r"),
    SystemRelation::new(2396, PG_CATALOG_NAMESPACE_OID, "pg_shdescription", "r"),
    SystemRelation::new(2601, PG_CATALOG_NAMESPACE_OID, "pg_am", "r"),
    SystemRelation::new(2604, PG_CATALOG_NAMESPACE_OID, "pg_attrdef", "r"),
    SystemRelation::new(2606, PG_CATALOG_NAMESPACE_OID, "pg_constraint", "r"),
    SystemRelation::new(2608, PG_CATALOG_NAMESPACE_OID, "pg_depend", "r"),
    SystemRelation::new(2609, PG_CATALOG_NAMESPACE_OID, "pg_description", "r"),
    SystemRelation::new(2610, PG_CATALOG_NAMESPACE_OID, "pg_index", "r"),
    SystemRelation::new(2611, PG_CATALOG_NAMESPACE_OID, "pg_inherits", "r"),
    SystemRelation::new(2612, PG_CATALOG_NAMESPACE_OID, "pg_language", "r"),
    SystemRelation::new(2615, PG_CATALOG_NAMESPACE_OID, "pg_namespace", "r"),
    SystemRelation::new(2616, PG_CATALOG_NAMESPACE_OID, "pg_opclass", "r"),
    SystemRelation::new(2753, PG_CATALOG_NAMESPACE_OID, "pg_opfamily", "r"),
    SystemRelation::new(2618, PG_CATALOG_NAMESPACE_OID, "pg_rewrite", "r"),
    SystemRelation::new(2620, PG_CATALOG_NAMESPACE_OID, "pg_trigger", "r"),
    SystemRelation::new(3079, PG_CATALOG_NAMESPACE_OID, "pg_extension", "r"),
    SystemRelation::new(3118, PG_CATALOG_NAMESPACE_OID, "pg_foreign_table", "r"),
    SystemRelation::new(3256, PG_CATALOG_NAMESPACE_OID, "pg_policy", "r"),
    SystemRelation::new(12018, PG_CATALOG_NAMESPACE_OID, "pg_policies", "v"),
    SystemRelation::new(3350, PG_CATALOG_NAMESPACE_OID, "pg_partitioned_table", "r"),
    SystemRelation::new(3381, PG_CATALOG_NAMESPACE_OID, "pg_statistic_ext", "r"),
    SystemRelation::new(3456, PG_CATALOG_NAMESPACE_OID, "pg_collation", "r"),
    SystemRelation::new(3466, PG_CATALOG_NAMESPACE_OID, "pg_event_trigger", "r"),
    SystemRelation::new(2607, PG_CATALOG_NAMESPACE_OID, "pg_conversion", "r"),
    SystemRelation::new(3501, PG_CATALOG_NAMESPACE_OID, "pg_enum", "r"),
    SystemRelation::new(3541, PG_CATALOG_NAMESPACE_OID, "pg_range", "r"),
    SystemRelation::new(6104, PG_CATALOG_NAMESPACE_OID, "pg_publication", "r"),
    SystemRelation::new(6106, PG_CATALOG_NAMESPACE_OID, "pg_publication_rel", "r"),
    SystemRelation::new(
        6237,
        PG_CATALOG_NAMESPACE_OID,
        "pg_publication_namespace",
        "r",
    ),
    SystemRelation::new(12000, PG_CATALOG_NAMESPACE_OID, "pg_roles", "v"),
    SystemRelation::new(
        12081,
        PG_CATALOG_NAMESPACE_OID,
        "pg_available_extensions",
        "v",
    ),
    SystemRelation::new(12014, PG_CATALOG_NAMESPACE_OID, "pg_user", "v"),
    SystemRelation::new(12073, PG_CATALOG_NAMESPACE_OID, "pg_locks", "v"),
    SystemRelation::new(12266, PG_CATALOG_NAMESPACE_OID, "pg_stat_database", "v"),
    SystemRelation::new(12028, PG_CATALOG_NAMESPACE_OID, "pg_views", "v"),
    SystemRelation::new(12033, PG_CATALOG_NAMESPACE_OID, "pg_tables", "v"),
    SystemRelation::new(12038, PG_CATALOG_NAMESPACE_OID, "pg_matviews", "v"),
    SystemRelation::new(12043, PG_CATALOG_NAMESPACE_OID, "pg_indexes", "v"),
    SystemRelation::new(12048, PG_CATALOG_NAMESPACE_OID, "pg_sequences", "v"),
    SystemRelation::new(12104, PG_CATALOG_NAMESPACE_OID, "pg_settings", "v"),
    SystemRelation::new(12122, PG_CATALOG_NAMESPACE_OID, "pg_timezone_abbrevs", "v"),
    SystemRelation::new(12126, PG_CATALOG_NAMESPACE_OID, "pg_timezone_names", "v"),
    SystemRelation::new(12142, PG_CATALOG_NAMESPACE_OID, "pg_stat_all_tables", "v"),
    SystemRelation::new(12161, PG_CATALOG_NAMESPACE_OID, "pg_stat_user_tables", "v"),
    SystemRelation::new(12170, PG_CATALOG_NAMESPACE_OID, "pg_statio_all_tables", "v"),
    SystemRelation::new(
        12179,
        PG_CATALOG_NAMESPACE_OID,
        "pg_statio_user_tables",
        "v",
    ),
    SystemRelation::new(12183, PG_CATALOG_NAMESPACE_OID, "pg_stat_all_indexes", "v"),
    SystemRelation::new(12192, PG_CATALOG_NAMESPACE_OID, "pg_stat_user_indexes", "v"),
    SystemRelation::new(
        12196,
        PG_CATALOG_NAMESPACE_OID,
        "pg_statio_all_indexes",
        "v",
    ),
    SystemRelation::new(
        12205,
        PG_CATALOG_NAMESPACE_OID,
        "pg_statio_user_indexes",
        "v",
    ),
    SystemRelation::new(12227, PG_CATALOG_NAMESPACE_OID, "pg_stat_replication", "v"),
    SystemRelation::new(12257, PG_CATALOG_NAMESPACE_OID, "pg_replication_slots", "v"),
    SystemRelation::new(12289, PG_CATALOG_NAMESPACE_OID, "pg_stat_bgwriter", "v"),
    SystemRelation::new(12222, PG_CATALOG_NAMESPACE_OID, "pg_stat_activity", "v"),
    SystemRelation::new(12249, PG_CATALOG_NAMESPACE_OID, "pg_stat_ssl", "v"),
    SystemRelation::new(
        13260,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "check_constraints",
        "v",
    ),
    SystemRelation::new(13295, INFORMATION_SCHEMA_NAMESPACE_OID, "columns", "v"),
    SystemRelation::new(
        13310,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "domain_constraints",
        "v",
    ),
    SystemRelation::new(13319, INFORMATION_SCHEMA_NAMESPACE_OID, "domains", "v"),
    SystemRelation::new(
        13300,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "constraint_column_usage",
        "v",
    ),
    SystemRelation::new(
        13329,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "key_column_usage",
        "v",
    ),
    SystemRelation::new(13334, INFORMATION_SCHEMA_NAMESPACE_OID, "parameters", "v"),
    SystemRelation::new(
        13339,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "referential_constraints",
        "v",
    ),
    SystemRelation::new(13377, INFORMATION_SCHEMA_NAMESPACE_OID, "routines", "v"),
    SystemRelation::new(13382, INFORMATION_SCHEMA_NAMESPACE_OID, "schemata", "v"),
    SystemRelation::new(13386, INFORMATION_SCHEMA_NAMESPACE_OID, "sequences", "v"),
    SystemRelation::new(
        13411,
        INFORMATION_SCHEMA_NAMESPACE_OID,
        "table_constraints",
        "v",
    ),
    SystemRelation::new(13425, INFORMATION_SCHEMA_NAMESPACE_OID, "tables", "v"),
    SystemRelation::new(13483, INFORMATION_SCHEMA_NAMESPACE_OID, "views", "v"),
];

/// The columns of each system relation, as its generated table has them. Set once by the
/// query layer that knows every generated schema ([`set_system_schemas`]); until then
/// the system relations have no columns in `pg_attribute`.
static SYSTEM_SCHEMAS: std::sync::OnceLock<Vec<(u32, SchemaRef)>> = std::sync::OnceLock::new();

/// Record the system relations' columns: `schema_of(namespace, name)` builds the relation
/// without system rows (its schema does not depend on them). Only the first call counts.
pub fn set_system_schemas(schema_of: impl Fn(u32, &str) -> Option<SchemaRef>) {
    SYSTEM_SCHEMAS.get_or_init(|| {
        SYSTEM_RELATIONS
            .iter()
            .filter_map(|r| schema_of(r.namespace, r.name).map(|s| (r.oid, s)))
            .collect()
    });
}

/// Each system relation with its columns (none before [`set_system_schemas`]).
pub fn system_relations()
-> impl Iterator<Item = (&'static SystemRelation, Option<&'static SchemaRef>)> {
    let schemas = SYSTEM_SCHEMAS.get();
    SYSTEM_RELATIONS.iter().map(move |r| {
        (
            r,
            schemas.and_then(|s| s.iter().find(|(o, _)| *o == r.oid).map(|(_, s)| s)),
        )
    })
}

pub fn relation_name_of_oid(catalog: &Catalog, oid: u32) -> Option<String> {
    if let Some(r) = SYSTEM_RELATIONS.iter().find(|r| r.oid == oid) {
        return Some(r.shown_name());
    }
    catalog.entries().iter().find_map(|e| {
        if e.desc.oid == oid {
            Some(e.desc.name.clone())
        } else {
            // (an index is in its table's schema)
            e.desc
                .all_indexes()
                .into_iter()
                .find(|i| i.oid == oid)
                .map(|i| crate::sql::parser::sibling_key(&e.desc.name, &i.name))
        }
    })
}

/// A relation's OID by its name as SQL writes it (`t`, `public.t`, `"App"."T"`,
/// `pg_catalog.pg_class`, `information_schema.tables`, `weir.app.t`); an unqualified name is
/// looked up in `pg_catalog` first, then among Weir's relations, as Postgres' search path
/// does. Indexes are found by their name too.
pub fn relation_oid_of_name(catalog: &Catalog, name: &str) -> Option<u32> {
    let mut parts = name_parts(name);
    // `weir.public.t`: the database's own name may lead (TypeORM writes it so)
    if parts.len() == 3 && parts[0] == DATABASE_NAME {
        parts.remove(0);
    }
    let system = |ns: u32, rel: &str| {
        SYSTEM_RELATIONS
            .iter()
            .find(|r| r.namespace == ns && r.name == rel)
            .map(|r| r.oid)
    };
    let key = match parts.as_slice() {
        [s, r] if s == "information_schema" => {
            return system(INFORMATION_SCHEMA_NAMESPACE_OID, r);
        }
        [s, r] if s == "pg_catalog" => return system(PG_CATALOG_NAMESPACE_OID, r),
        [s, r] => crate::sql::parser::relation_key(Some(s), r),
        [r] => {
            if let Some(o) = system(PG_CATALOG_NAMESPACE_OID, r) {
                return Some(o);
            }
            r.clone()
        }
        _ => return None,
    };
    if let Some(e) = catalog.get(&key) {
        return Some(e.desc.oid);
    }
    catalog.index_by_name(&key).map(|(_, i)| i.oid)
}

pub fn namespace_oid_of_name(name: &str) -> Option<u32> {
    match name {
        "pg_catalog" => Some(PG_CATALOG_NAMESPACE_OID),
        "public" => Some(PUBLIC_NAMESPACE_OID),
        "information_schema" => Some(INFORMATION_SCHEMA_NAMESPACE_OID),
        _ => None,
    }
}

pub fn namespace_name_of_oid(oid: u32) -> Option<&'static str> {
    match oid {
        PG_CATALOG_NAMESPACE_OID | PUBLIC_NAMESPACE_OID | INFORMATION_SCHEMA_NAMESPACE_OID => {
            Some(namespace_name(oid))
        }
        _ => None,
    }
}

/// A type's or relation's name as written (`"pg_catalog"."int4"`, `pg_catalog.text`,
/// `"Mood"`, `'"public"."t"'`), without its `pg_catalog` / `public` schema and its quotes
/// (an unquoted part folded to lower case).
pub fn unqualified_name(name: &str) -> String {
    let parts = name_parts(name);
    match parts.as_slice() {
        [schema, rest] if schema == "pg_catalog" || schema == "public" => rest.clone(),
        _ => parts.join("."),
    }
}

/// The parts of a name as SQL writes it (`a.b`, `"A"."b"`, `"a.b"`): unquoted parts folded
/// to lower case, quoted ones as written.
pub fn name_parts(name: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut part = String::new();
    let mut quoted = false;
    let mut chars = name.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                part.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut part)),
            c if quoted => part.push(c),
            c => part.extend(c.to_lowercase()),
        }
    }
    parts.push(part);
    parts
}

pub fn type_oid_of_name(name: &str) -> Option<u32> {
    let plain = unqualified_name(name);
    let n = plain.as_str();
    // `text[]`, `_text`: the array type
    if let Some(element) = n.strip_suffix("[]") {
        return crate::sql::types::array_oid(type_oid_of_name(element)?);
    }
    if let Some(element) = n.strip_prefix('_')
        && let Some(o) = BUILTIN_TYPES.iter().find(|t| t.1 == element).map(|t| t.0)
    {
        return crate::sql::types::array_oid(o);
    }
    let alias = match n {
        "integer" | "int" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "boolean" => "bool",
        "real" => "float4",
        "double precision" => "float8",
        "character varying" => "varchar",
        "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        "decimal" => "numeric",
        other => other,
    };
    BUILTIN_TYPES.iter().find(|t| t.1 == alias).map(|t| t.0)
}

fn relkind(e: &Entry) -> &'static str {
    e.desc.kind.relkind()
}

fn build(table: &str, catalog: &Catalog) -> DfResult<Option<RecordBatch>> {
    // sinks are not relations clients read
    let entries: Vec<_> = catalog
        .entries()
        .into_iter()
        .filter(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
        .collect();
    if let Some(b) = super::pg_stat::build(table, &entries) {
        return b.map(Some);
    }
    let owner = || V::I(SUPERUSER_OID as i64);
    Ok(Some(match table {
        "pg_namespace" => build_table(
            &[
                ("oid", oid()),
                ("nspname", name()),
                ("nspowner", oid()),
                ("nspacl", arr(text())),
            ],
            [
                PG_CATALOG_NAMESPACE_OID,
                PUBLIC_NAMESPACE_OID,
                INFORMATION_SCHEMA_NAMESPACE_OID,
            ]
            .iter()
            .map(|o| {
                // public is pg_database_owner's, as in Postgres 15
                if *o == PUBLIC_NAMESPACE_OID {
                    let acl = catalog.schema_acl().into_iter().map(V::S).collect();
                    return vec![
                        V::from(*o),
                        namespace_name(*o).into(),
                        V::from(crate::catalog::roles::PG_DATABASE_OWNER),
                        V::A(acl),
                    ];
                }
                vec![V::from(*o), namespace_name(*o).into(), owner(), V::Null]
            })
            .chain(
                catalog
                    .user_schemas()
                    .into_iter()
                    .map(|s| vec![V::from(s.oid), s.name.into(), V::from(s.owner), V::Null]),
            )
            .collect(),
        )?,
        "pg_class" => {
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                let namespace = catalog.namespace_of_relation(&d.name);
                let mut row = class_row(
                    d.oid,
                    split_relation_name(&d.name).1,
                    d.row_type_oid(),
                    relkind(e),
                    2,
                    d.columns.len(),
                    !d.all_indexes().is_empty(),
                    e.table.as_ref().map(|t| t.row_count()).unwrap_or(0) as f64,
                );
                row[2] = namespace.into();
                row[5] = d.owner.into();
                // relchecks: psql's \d lists "Check constraints" when it is not 0
                row[18] = V::I(d.checks.len() as i64);
                // relhastriggers: Postgres keeps foreign keys by triggers on both tables, and
                // psql's \d lists "Foreign-key constraints" and "Referenced by" only then
                row[20] = (!d.foreign_keys.is_empty()
                    || entries
                        .iter()
                        .any(|o| o.desc.foreign_keys.iter().any(|f| f.ref_table == d.name)))
                .into();
                if let Some(acl) = catalog.relation_acl(d) {
                    row[28] = V::A(acl.into_iter().map(V::S).collect());
                }
                if d.is_temporary() {
                    row[15] = "t".into();
                }
                rows.push(row);
                for ix in d.all_indexes() {
                    let mut row =
                        class_row(ix.oid, &ix.name, 0, "i", 403, ix.columns.len(), false, 0.0);
                    row[2] = namespace.into();
                    row[5] = d.owner.into();
                    rows.push(row);
                }
            }
            for (r, schema) in system_relations() {
                // catalogs are heap tables (access method 2), views have none
                let am = if r.kind == "r" { 2 } else { 0 };
                let natts = schema.map_or(0, |s| s.fields().len());
                let mut row = class_row(r.oid, r.name, 0, r.kind, am, natts, false, 0.0);
                row[2] = r.namespace.into();
                rows.push(row);
            }
            build_table(
                &[
                    ("oid", oid()),
                    ("relname", name()),
                    ("relnamespace", oid()),
                    ("reltype", oid()),
                    ("reloftype", oid()),
                    ("relowner", oid()),
                    ("relam", oid()),
                    ("relfilenode", oid()),
                    ("reltablespace", oid()),
                    ("relpages", i4()),
                    ("reltuples", T::Float4),
                    ("relallvisible", i4()),
                    ("reltoastrelid", oid()),
                    ("relhasindex", b()),
                    ("relisshared", b()),
                    ("relpersistence", ch()),
                    ("relkind", ch()),
                    ("relnatts", i2()),
                    ("relchecks", i2()),
                    ("relhasrules", b()),
                    ("relhastriggers", b()),
                    ("relhassubclass", b()),
                    ("relrowsecurity", b()),
                    ("relforcerowsecurity", b()),
                    ("relispopulated", b()),
                    ("relreplident", ch()),
                    ("relispartition", b()),
                    ("relrewrite", oid()),
                    ("relacl", arr(text())),
                    ("reloptions", arr(text())),
                    ("relpartbound", text()),
                ],
                rows,
            )?
        }
        "pg_attribute" => {
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                for (i, c) in d.columns.iter().enumerate() {
                    let mut row = attribute_row(d.oid, &c.name, &c.ty, i + 1, !c.nullable);
                    // a domain's column: of the domain (its typmod is the domain's)
                    if let Some(dom) = catalog.column_type_oid(d, &c.name) {
                        row[2] = dom.into();
                        row[8] = (-1i32).into();
                    }
                    row[ATTHASDEF] = d.attrdef_text(&c.name).is_some().into();
                    if let Some(kind) = d.identity(&c.name) {
                        row[ATTIDENTITY] = kind.to_string().into();
                    }
                    if d.generation_expr(&c.name).is_some() {
                        row[ATTGENERATED] = "s".into();
                    }
                    rows.push(row);
                }
                for ix in d.all_indexes() {
                    for (i, k) in ix.columns.iter().enumerate() {
                        if let Some(c) = d.columns.iter().find(|c| &c.name == k) {
                            rows.push(attribute_row(ix.oid, &c.name, &c.ty, i + 1, ix.primary));
                        }
                    }
                }
            }
            for (r, schema) in system_relations() {
                for (i, f) in schema.iter().flat_map(|s| s.fields().iter()).enumerate() {
                    let ty = crate::sql::types::field_sql_type(f).unwrap_or(T::Text);
                    rows.push(attribute_row(r.oid, f.name(), &ty, i + 1, false));
                }
            }
            build_table(
                &[
                    ("attrelid", oid()),
                    ("attname", name()),
                    ("atttypid", oid()),
                    ("attstattarget", i4()),
                    ("attlen", i2()),
                    ("attnum", i2()),
                    ("attndims", i4()),
                    ("attcacheoff", i4()),
                    ("atttypmod", i4()),
                    ("attbyval", b()),
                    ("attalign", ch()),
                    ("attstorage", ch()),
                    ("attcompression", ch()),
                    ("attnotnull", b()),
                    ("atthasdef", b()),
                    ("atthasmissing", b()),
                    ("attidentity", ch()),
                    ("attgenerated", ch()),
                    ("attisdropped", b()),
                    ("attislocal", b()),
                    ("attinhcount", i4()),
                    ("attcollation", oid()),
                    ("attacl", arr(text())),
                    ("attoptions", arr(text())),
                    ("attfdwoptions", arr(text())),
                ],
                rows,
            )?
        }
        "pg_type" => {
            let mut rows = Vec::new();
            for (o, n, len, cat) in BUILTIN_TYPES {
                rows.push(type_row(
                    *o,
                    n,
                    *len,
                    "b",
                    cat,
                    0,
                    0,
                    array_oid(*o).unwrap_or(0),
                ));
                if let Some(a) = array_oid(*o) {
                    rows.push(type_row(a, &format!("_{n}"), -1, "b", "A", 0, *o, 0));
                }
            }
            for t in catalog.enum_types() {
                let len = t.sql_type().typlen();
                // (a type of a user schema is keyed `app.mood`)
                let (namespace, bare) = (
                    catalog.namespace_of_relation(&t.name),
                    split_relation_name(&t.name).1,
                );
                let row = type_row(t.oid, bare, len, "e", "E", 0, 0, t.array_oid());
                rows.extend(user_type_rows(row, t.oid, bare, namespace, t.owner));
            }
            for d in catalog.all_domains() {
                // a domain is its base type's kind of value: the base's length, category
                // and I/O functions
                let base_oid = d.base.oid();
                let (base_name, category) = BUILTIN_TYPES
                    .iter()
                    .find(|(o, ..)| *o == base_oid)
                    .map(|(_, n, _, c)| (*n, *c))
                    .unwrap_or(("text", "S"));
                let (namespace, bare) = (
                    catalog.namespace_of_relation(&d.name),
                    split_relation_name(&d.name).1,
                );
                let mut row = type_row(
                    d.oid,
                    bare,
                    d.base.typlen(),
                    "d",
                    category,
                    0,
                    0,
                    d.array_oid(),
                );
                for (k, f) in [(14, "in"), (15, "out"), (16, "recv"), (17, "send")] {
                    row[k] = io_proc_oid(&format!("{base_name}{f}")).into();
                }
                row[20] = d.not_null.into();
                row[21] = base_oid.into();
                row[22] = d.base.typmod().into();
                row[25] = d.default_shown().map(V::from).unwrap_or(V::Null);
                rows.extend(user_type_rows(row, d.oid, bare, namespace, d.owner));
            }
            for e in &entries {
                let mut row = type_row(
                    e.desc.row_type_oid(),
                    split_relation_name(&e.desc.name).1,
                    -1,
                    "c",
                    "C",
                    e.desc.oid,
                    0,
                    0,
                );
                row[2] = catalog.namespace_of_relation(&e.desc.name).into();
                rows.push(row);
            }
            build_table(
                &[
                    ("oid", oid()),
                    ("typname", name()),
                    ("typnamespace", oid()),
                    ("typowner", oid()),
                    ("typlen", i2()),
                    ("typbyval", b()),
                    ("typtype", ch()),
                    ("typcategory", ch()),
                    ("typispreferred", b()),
                    ("typisdefined", b()),
                    ("typdelim", ch()),
                    ("typrelid", oid()),
                    ("typelem", oid()),
                    ("typarray", oid()),
                    ("typinput", oid()),
                    ("typoutput", oid()),
                    ("typreceive", oid()),
                    ("typsend", text()),
                    ("typalign", ch()),
                    ("typstorage", ch()),
                    ("typnotnull", b()),
                    ("typbasetype", oid()),
                    ("typtypmod", i4()),
                    ("typndims", i4()),
                    ("typcollation", oid()),
                    ("typdefault", text()),
                    ("typacl", arr(text())),
                ],
                rows,
            )?
        }
        "pg_database" => build_table(
            &[
                ("oid", oid()),
                ("datname", name()),
                ("datdba", oid()),
                ("encoding", i4()),
                ("datlocprovider", ch()),
                ("datistemplate", b()),
                ("datallowconn", b()),
                ("datconnlimit", i4()),
                ("datcollate", text()),
                ("datctype", text()),
                ("daticulocale", text()),
                ("daticurules", text()),
                ("datcollversion", text()),
                ("datacl", arr(text())),
                ("dattablespace", oid()),
            ],
            vec![vec![
                DATABASE_OID.into(),
                DATABASE_NAME.into(),
                owner(),
                6i32.into(),
                "c".into(),
                false.into(),
                true.into(),
                (-1i32).into(),
                "C.UTF-8".into(),
                "C.UTF-8".into(),
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                1663u32.into(),
            ]],
        )?,
        "pg_roles" | "pg_authid" => build_table(
            &[
                ("oid", oid()),
                ("rolname", name()),
                ("rolsuper", b()),
                ("rolinherit", b()),
                ("rolcreaterole", b()),
                ("rolcreatedb", b()),
                ("rolcanlogin", b()),
                ("rolreplication", b()),
                ("rolconnlimit", i4()),
                ("rolpassword", text()),
                ("rolvaliduntil", T::TimestampTz(None)),
                ("rolbypassrls", b()),
                ("rolconfig", arr(text())),
            ],
            catalog
                .roles()
                .into_iter()
                .map(|r| {
                    vec![
                        V::I(r.oid as i64),
                        r.name.as_str().into(),
                        r.superuser.into(),
                        r.inherit.into(),
                        r.createrole.into(),
                        r.createdb.into(),
                        r.login.into(),
                        r.superuser.into(),
                        (-1i32).into(),
                        // never the verifier: pg_roles shows a mask, as in Postgres
                        if r.password.is_some() {
                            "********".into()
                        } else {
                            V::Null
                        },
                        V::Null,
                        r.superuser.into(),
                        V::Null,
                    ]
                })
                .collect(),
        )?,
        "pg_user" => build_table(
            &[
                ("usename", name()),
                ("usesysid", oid()),
                ("usecreatedb", b()),
                ("usesuper", b()),
                ("userepl", b()),
                ("usebypassrls", b()),
                ("passwd", text()),
                ("valuntil", T::TimestampTz(None)),
                ("useconfig", arr(text())),
            ],
            catalog
                .roles()
                .into_iter()
                .filter(|r| r.login)
                .map(|r| {
                    vec![
                        r.name.as_str().into(),
                        V::I(r.oid as i64),
                        r.createdb.into(),
                        r.superuser.into(),
                        r.superuser.into(),
                        r.superuser.into(),
                        if r.password.is_some() {
                            "********".into()
                        } else {
                            V::Null
                        },
                        V::Null,
                        V::Null,
                    ]
                })
                .collect(),
        )?,
        "pg_auth_members" => build_table(
            &[
                ("oid", oid()),
                ("roleid", oid()),
                ("member", oid()),
                ("grantor", oid()),
                ("admin_option", b()),
            ],
            catalog
                .roles()
                .into_iter()
                .flat_map(|r| {
                    r.member_of
                        .iter()
                        .map(|m| {
                            vec![
                                V::Null,
                                V::I(m.role as i64),
                                V::I(r.oid as i64),
                                V::I(m.grantor as i64),
                                m.admin.into(),
                            ]
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        )?,
        "pg_am" => build_table(
            &[
                ("oid", oid()),
                ("amname", name()),
                ("amhandler", text()),
                ("amtype", ch()),
            ],
            vec![
                vec![
                    2u32.into(),
                    "heap".into(),
                    "heap_tableam_handler".into(),
                    "t".into(),
                ],
                vec![
                    403u32.into(),
                    "btree".into(),
                    "bthandler".into(),
                    "i".into(),
                ],
            ],
        )?,
        "pg_index" => {
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                for ix in d.all_indexes() {
                    // an expression key is 0, its text in indexprs (Postgres keeps node trees)
                    let keys: Vec<V> = ix
                        .columns
                        .iter()
                        .enumerate()
                        .filter_map(|(i, k)| match ix.expression_keys.get(i) {
                            Some(true) => Some(0),
                            _ => d.columns.iter().position(|c| &c.name == k).map(|p| p + 1),
                        })
                        .map(|p| V::I(p as i64))
                        .collect();
                    let expressions: Vec<&str> = ix
                        .columns
                        .iter()
                        .zip(&ix.expression_keys)
                        .filter(|(_, e)| **e)
                        .map(|(c, _)| c.as_str())
                        .collect();
                    let indexprs = match expressions.is_empty() {
                        true => V::Null,
                        false => expressions.join(", ").into(),
                    };
                    let indpred = ix.predicate.clone().map(V::S).unwrap_or(V::Null);
                    rows.push(vec![
                        ix.oid.into(),
                        d.oid.into(),
                        ix.columns.len().into(),
                        ix.columns.len().into(),
                        ix.unique.into(),
                        ix.nulls_not_distinct.into(),
                        ix.primary.into(),
                        false.into(),
                        true.into(),
                        false.into(),
                        true.into(),
                        false.into(),
                        true.into(),
                        true.into(),
                        false.into(),
                        V::A(keys.clone()),
                        indexprs,
                        indpred,
                        // each key column's type's default operator class
                        V::A(
                            ix.columns
                                .iter()
                                .map(|k| {
                                    let ty = d.columns.iter().find(|c| &c.name == k).map(|c| &c.ty);
                                    V::I(ty.map_or(0, default_opclass) as i64)
                                })
                                .collect(),
                        ),
                        V::A(keys.iter().map(|_| V::I(0)).collect()),
                        V::A(keys.iter().map(|_| V::I(0)).collect()),
                    ]);
                }
            }
            build_table(
                &[
                    ("indexrelid", oid()),
                    ("indrelid", oid()),
                    ("indnatts", i2()),
                    ("indnkeyatts", i2()),
                    ("indisunique", b()),
                    ("indnullsnotdistinct", b()),
                    ("indisprimary", b()),
                    ("indisexclusion", b()),
                    ("indimmediate", b()),
                    ("indisclustered", b()),
                    ("indisvalid", b()),
                    ("indcheckxmin", b()),
                    ("indisready", b()),
                    ("indislive", b()),
                    ("indisreplident", b()),
                    ("indkey", vector(i2())),
                    ("indexprs", text()),
                    ("indpred", text()),
                    ("indclass", vector(oid())),
                    ("indcollation", vector(oid())),
                    ("indoption", vector(i2())),
                ],
                rows,
            )?
        }
        "pg_constraint" => {
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                if let (Some(con), Some(idx)) = (d.pkey_constraint_oid(), d.pkey_index_oid()) {
                    let keys = column_numbers(d, &d.primary_key);
                    rows.push(constraint_row(
                        con,
                        d.pkey_name(),
                        "p",
                        d.oid,
                        idx,
                        keys,
                        None,
                    ));
                }
                for ix in d.indexes.iter().filter(|i| i.constraint) {
                    let keys = column_numbers(d, &ix.columns);
                    rows.push(constraint_row(
                        ix.oid + 1,
                        ix.name.clone(),
                        "u",
                        d.oid,
                        ix.oid,
                        keys,
                        None,
                    ));
                }
                for (k, (name, expr)) in d.checks.iter().enumerate() {
                    // the columns the expression names
                    let keys: Vec<V> = d
                        .columns
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| check_reads(expr, &c.name))
                        .map(|(p, _)| V::I(p as i64 + 1))
                        .collect();
                    rows.push(constraint_row(
                        d.check_constraint_oid(k),
                        name.clone(),
                        "c",
                        d.oid,
                        0,
                        keys,
                        None,
                    ));
                }
                for fk in &d.foreign_keys {
                    let Some(parent) = entries.iter().find(|p| p.desc.name == fk.ref_table) else {
                        continue;
                    };
                    let p = &parent.desc;
                    // the referenced table's index that makes its columns unique
                    let index = p
                        .unique_index_over(&fk.ref_columns)
                        .map(|i| i.oid)
                        .unwrap_or(0);
                    rows.push(constraint_row(
                        fk.oid,
                        fk.name.clone(),
                        "f",
                        d.oid,
                        index,
                        column_numbers(d, &fk.columns),
                        Some(ForeignRef {
                            relid: p.oid,
                            on_update: fk.on_update.code(),
                            on_delete: fk.on_delete.code(),
                            matching: if fk.match_full { "f" } else { "s" },
                            keys: column_numbers(p, &fk.ref_columns),
                        }),
                    ));
                    // condeferrable, condeferred
                    if let Some(row) = rows.last_mut() {
                        row[4] = fk.deferrable.into();
                        row[5] = fk.initially_deferred.into();
                    }
                }
            }
            // a domain's CHECKs: of the type (contypid), no relation
            for d in catalog.all_domains() {
                for c in &d.checks {
                    let mut row = constraint_row(c.oid, c.name.clone(), "c", 0, 0, vec![], None);
                    row[2] = catalog.namespace_of_relation(&d.name).into();
                    row[6] = (!c.not_valid).into();
                    row[8] = d.oid.into();
                    row[17] = true.into();
                    row[18] = V::Null;
                    rows.push(row);
                }
            }
            // convalidated: false for a constraint added NOT VALID and not validated since
            for row in rows.iter_mut() {
                let relid = match row.get(7) {
                    Some(V::I(r)) => *r,
                    _ => continue,
                };
                // connamespace: its relation's
                if let Some(e) = entries.iter().find(|e| e.desc.oid as i64 == relid) {
                    row[2] = catalog.namespace_of_relation(&e.desc.name).into();
                }
                if let Some(V::S(name)) = row.get(1)
                    && entries
                        .iter()
                        .any(|e| e.desc.oid as i64 == relid && e.desc.not_valid.contains(name))
                {
                    row[6] = false.into();
                }
            }
            build_table(
                &[
                    ("oid", oid()),
                    ("conname", name()),
                    ("connamespace", oid()),
                    ("contype", ch()),
                    ("condeferrable", b()),
                    ("condeferred", b()),
                    ("convalidated", b()),
                    ("conrelid", oid()),
                    ("contypid", oid()),
                    ("conindid", oid()),
                    ("conparentid", oid()),
                    ("confrelid", oid()),
                    ("confupdtype", ch()),
                    ("confdeltype", ch()),
                    ("confmatchtype", ch()),
                    ("conislocal", b()),
                    ("coninhcount", i4()),
                    ("connoinherit", b()),
                    ("conkey", arr(i2())),
                    ("confkey", arr(i2())),
                    ("conbin", text()),
                ],
                rows,
            )?
        }
        "pg_tables" => build_table(
            &[
                ("schemaname", name()),
                ("tablename", name()),
                ("tableowner", name()),
                ("tablespace", name()),
                ("hasindexes", b()),
                ("hasrules", b()),
                ("hastriggers", b()),
                ("rowsecurity", b()),
            ],
            entries
                .iter()
                .filter(|e| relkind(e) == "r")
                .map(|e| {
                    vec![
                        split_relation_name(&e.desc.name).0.into(),
                        split_relation_name(&e.desc.name).1.into(),
                        catalog.role_name(e.desc.owner).unwrap_or_default().into(),
                        V::Null,
                        (!e.desc.all_indexes().is_empty()).into(),
                        false.into(),
                        false.into(),
                        false.into(),
                    ]
                })
                .collect(),
        )?,
        "pg_collation" => build_table(
            &[
                ("oid", oid()),
                ("collname", name()),
                ("collnamespace", oid()),
                ("collowner", oid()),
                ("collprovider", ch()),
                ("collisdeterministic", b()),
                ("collencoding", i4()),
                ("collcollate", text()),
                ("collctype", text()),
            ],
            vec![vec![
                100u32.into(),
                "default".into(),
                PG_CATALOG_NAMESPACE_OID.into(),
                owner(),
                "d".into(),
                true.into(),
                (-1i32).into(),
                V::Null,
                V::Null,
            ]],
        )?,
        "pg_tablespace" => build_table(
            &[("oid", oid()), ("spcname", name()), ("spcowner", oid())],
            vec![
                vec![1663u32.into(), "pg_default".into(), owner()],
                vec![1664u32.into(), "pg_global".into(), owner()],
            ],
        )?,
        "pg_settings" => build_table(
            &[
                ("name", text()),
                ("setting", text()),
                ("unit", text()),
                ("category", text()),
                ("short_desc", text()),
                ("context", text()),
                ("vartype", text()),
                ("source", text()),
                ("boot_val", text()),
                ("reset_val", text()),
            ],
            crate::server::session::DEFAULT_SETTINGS
                .iter()
                .map(|(n, v)| {
                    vec![
                        // the name as Postgres spells it (`TimeZone`); a query's `setting`
                        // is the session's (`catalog/rewrite.rs::session_views`)
                        crate::server::settings::canonical_name(n).into(),
                        crate::server::settings::in_unit(n, v).into(),
                        crate::server::settings::unit_of(n)
                            .map(V::from)
                            .unwrap_or(V::Null),
                        "Weir".into(),
                        V::Null,
                        "user".into(),
                        crate::server::settings::vartype_of(n, v).into(),
                        "default".into(),
                        crate::server::settings::in_unit(n, v).into(),
                        crate::server::settings::in_unit(n, v).into(),
                    ]
                })
                .collect(),
        )?,
        "pg_opfamily" => empty(&[
            ("oid", oid()),
            ("opfmethod", oid()),
            ("opfname", name()),
            ("opfnamespace", oid()),
            ("opfowner", oid()),
        ])?,
        // the btree operator classes of Weir's types (each index key's, `pg_index.indclass`;
        // Drizzle's index introspection joins them)
        "pg_opclass" => build_table(
            &[
                ("oid", oid()),
                ("opcmethod", oid()),
                ("opcname", name()),
                ("opcnamespace", oid()),
                ("opcowner", oid()),
                ("opcfamily", oid()),
                ("opcintype", oid()),
                ("opcdefault", b()),
                ("opckeytype", oid()),
            ],
            BTREE_OPCLASSES
                .iter()
                .map(|&(o, n, intype, family)| {
                    vec![
                        V::I(o as i64),
                        V::I(403),
                        n.into(),
                        V::I(PG_CATALOG_NAMESPACE_OID as i64),
                        V::I(10),
                        V::I(family as i64),
                        V::I(intype as i64),
                        true.into(),
                        V::I(0),
                    ]
                })
                .collect(),
        )?,
        // column defaults, as Postgres shows them (adbin holds the text pg_get_expr gives)
        "pg_attrdef" => {
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                for (i, c) in d.columns.iter().enumerate() {
                    if let Some(text) = d.attrdef_text(&c.name) {
                        rows.push(vec![
                            attrdef_oid(d.oid, i + 1).into(),
                            d.oid.into(),
                            (i as i32 + 1).into(),
                            text.into(),
                        ]);
                    }
                }
            }
            build_table(
                &[
                    ("oid", oid()),
                    ("adrelid", oid()),
                    ("adnum", i2()),
                    ("adbin", text()),
                ],
                rows,
            )?
        }
        "pg_description" => {
            // COMMENT ON a relation (objsubid 0) or its columns (their numbers)
            let mut rows = Vec::new();
            for e in &entries {
                let d = &e.desc;
                if let Some(t) = &d.comments.relation {
                    rows.push(vec![
                        d.oid.into(),
                        1259u32.into(),
                        V::I(0),
                        t.clone().into(),
                    ]);
                }
                for (col, t) in &d.comments.columns {
                    if let Some(p) = d.columns.iter().position(|c| &c.name == col) {
                        rows.push(vec![
                            d.oid.into(),
                            1259u32.into(),
                            V::I(p as i64 + 1),
                            t.clone().into(),
                        ]);
                    }
                }
                // its indexes' and constraints'
                for (class, oid, t) in d.object_comments() {
                    rows.push(vec![oid.into(), class.into(), V::I(0), t.into()]);
                }
            }
            for t in catalog.enum_types() {
                if let Some(c) = t.comment {
                    rows.push(vec![t.oid.into(), 1247u32.into(), V::I(0), c.into()]);
                }
            }
            for d in catalog.all_domains() {
                if let Some(c) = d.comment {
                    rows.push(vec![d.oid.into(), 1247u32.into(), V::I(0), c.into()]);
                }
            }
            let schemas = std::iter::once(PUBLIC_NAMESPACE_OID)
                .chain(catalog.user_schemas().into_iter().map(|s| s.oid));
            for oid in schemas {
                if let Some(c) = catalog.schema_comment(oid) {
                    rows.push(vec![oid.into(), 2615u32.into(), V::I(0), c.into()]);
                }
            }
            // installed extensions' comments (classoid pg_extension), as psql's \dx shows
            for x in catalog.installed_extensions() {
                rows.push(vec![
                    x.oid.into(),
                    3079u32.into(),
                    V::I(0),
                    x.comment.into(),
                ]);
                // plpgsql's language is described as its extension (psql's \dL)
                if x.name == "plpgsql" {
                    rows.push(vec![
                        13563u32.into(),
                        2612u32.into(),
                        V::I(0),
                        x.comment.into(),
                    ]);
                }
            }
            build_table(
                &[
                    ("objoid", oid()),
                    ("classoid", oid()),
                    ("objsubid", i4()),
                    ("description", text()),
                ],
                rows,
            )?
        }
        "pg_shdescription" => empty(&[
            ("objoid", oid()),
            ("classoid", oid()),
            ("description", text()),
        ])?,
        "pg_inherits" => empty(&[
            ("inhrelid", oid()),
            ("inhparent", oid()),
            ("inhseqno", i4()),
            ("inhdetachpending", b()),
        ])?,
        "pg_policy" => empty(&[
            ("oid", oid()),
            ("polname", name()),
            ("polrelid", oid()),
            ("polcmd", ch()),
            ("polpermissive", b()),
            ("polroles", arr(oid())),
            ("polqual", text()),
            ("polwithcheck", text()),
        ])?,
        // row-level security policies (Drizzle's introspection): Weir has none
        "pg_policies" => empty(&[
            ("schemaname", name()),
            ("tablename", name()),
            ("policyname", name()),
            ("permissive", text()),
            ("roles", arr(name())),
            ("cmd", text()),
            ("qual", text()),
            ("with_check", text()),
        ])?,
        "pg_statistic_ext" => empty(&[
            ("oid", oid()),
            ("stxrelid", oid()),
            ("stxname", name()),
            ("stxnamespace", oid()),
            ("stxowner", oid()),
            ("stxstattarget", i4()),
            ("stxkeys", arr(i2())),
            ("stxkind", arr(ch())),
        ])?,
        "pg_publication" => empty(&[
            ("oid", oid()),
            ("pubname", name()),
            ("pubowner", oid()),
            ("puballtables", b()),
            ("pubinsert", b()),
            ("pubupdate", b()),
            ("pubdelete", b()),
            ("pubtruncate", b()),
            ("pubviaroot", b()),
        ])?,
        "pg_publication_namespace" => {
            empty(&[("oid", oid()), ("pnpubid", oid()), ("pnnspid", oid())])?
        }
        "pg_publication_rel" => empty(&[
            ("oid", oid()),
            ("prpubid", oid()),
            ("prrelid", oid()),
            ("prqual", text()),
            ("prattrs", arr(i2())),
        ])?,
        // the type I/O functions (`internal`) and the SQL functions (`CREATE FUNCTION ...
        // LANGUAGE sql`), with Postgres' columns in its order
        "pg_proc" => {
            use crate::catalog::sql_functions::SqlFunction;
            let row = |oid: V,
                       name: V,
                       namespace: u32,
                       owner: V,
                       lang: u32,
                       volatile: &str,
                       ret: u32,
                       args: Vec<u32>,
                       names: V,
                       src: V,
                       nargdefaults: i64| {
                let cost = if lang == 14 { 100.0 } else { 1.0 };
                vec![
                    oid,
                    name,
                    namespace.into(),
                    owner,
                    lang.into(),
                    V::F(cost),
                    V::F(0.0),
                    0u32.into(),
                    0u32.into(),
                    "f".into(),
                    false.into(),
                    false.into(),
                    (lang != 14).into(),
                    false.into(),
                    volatile.into(),
                    "u".into(),
                    V::I(args.len() as i64),
                    V::I(nargdefaults),
                    ret.into(),
                    V::A(args.into_iter().map(|a| V::I(a as i64)).collect()),
                    V::Null,
                    V::Null,
                    names,
                    V::Null,
                    V::Null,
                    src,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                ]
            };
            build_table(
                &[
                    ("oid", oid()),
                    ("proname", name()),
                    ("pronamespace", oid()),
                    ("proowner", oid()),
                    ("prolang", oid()),
                    ("procost", T::Float4),
                    ("prorows", T::Float4),
                    ("provariadic", oid()),
                    ("prosupport", oid()),
                    ("prokind", ch()),
                    ("prosecdef", b()),
                    ("proleakproof", b()),
                    ("proisstrict", b()),
                    ("proretset", b()),
                    ("provolatile", ch()),
                    ("proparallel", ch()),
                    ("pronargs", T::Int2),
                    ("pronargdefaults", T::Int2),
                    ("prorettype", oid()),
                    ("proargtypes", vector(oid())),
                    ("proallargtypes", arr(oid())),
                    ("proargmodes", arr(ch())),
                    ("proargnames", arr(text())),
                    ("proargdefaults", T::Text),
                    ("protrftypes", arr(oid())),
                    ("prosrc", text()),
                    ("probin", text()),
                    ("prosqlbody", T::Text),
                    ("proconfig", arr(text())),
                    ("proacl", arr(text())),
                ],
                io_procs()
                    .iter()
                    .map(|(o, n)| {
                        row(
                            V::from(*o),
                            n.clone().into(),
                            PG_CATALOG_NAMESPACE_OID,
                            owner(),
                            12,
                            "i",
                            0,
                            vec![],
                            V::Null,
                            n.clone().into(),
                            0,
                        )
                    })
                    .chain(catalog.sql_functions().into_iter().map(|f| {
                        let named = f.params.iter().any(|(n, _)| n.is_some());
                        let names = if named {
                            V::A(
                                f.params
                                    .iter()
                                    .map(|(n, _)| V::S(n.clone().unwrap_or_default()))
                                    .collect(),
                            )
                        } else {
                            V::Null
                        };
                        row(
                            f.oid.into(),
                            f.name.clone().into(),
                            PUBLIC_NAMESPACE_OID,
                            V::I(f.owner as i64),
                            14,
                            f.volatility.as_deref().unwrap_or("v"),
                            SqlFunction::type_named(&f.returns).1,
                            f.params
                                .iter()
                                .map(|(_, t)| SqlFunction::type_named(t).1)
                                .collect(),
                            names,
                            f.source.clone().unwrap_or_default().into(),
                            f.defaults_count() as i64,
                        )
                    }))
                    .collect(),
            )?
        }
        "pg_views" => build_table(
            &[
                ("schemaname", name()),
                ("viewname", name()),
                ("viewowner", name()),
                ("definition", text()),
            ],
            entries
                .iter()
                .filter(|e| relkind(e) == "v")
                .map(|e| {
                    vec![
                        split_relation_name(&e.desc.name).0.into(),
                        split_relation_name(&e.desc.name).1.into(),
                        catalog.role_name(e.desc.owner).unwrap_or_default().into(),
                        e.desc.query.clone().unwrap_or_default().into(),
                    ]
                })
                .collect(),
        )?,
        "pg_indexes" => build_table(
            &[
                ("schemaname", name()),
                ("tablename", name()),
                ("indexname", name()),
                ("tablespace", name()),
                ("indexdef", text()),
            ],
            entries
                .iter()
                .flat_map(|e| {
                    e.desc.all_indexes().into_iter().map(move |ix| {
                        vec![
                            split_relation_name(&e.desc.name).0.into(),
                            split_relation_name(&e.desc.name).1.into(),
                            ix.name.clone().into(),
                            V::Null,
                            ix.definition(&e.desc.name, false).into(),
                        ]
                    })
                })
                .collect(),
        )?,
        "pg_matviews" => build_table(
            &[
                ("schemaname", name()),
                ("matviewname", name()),
                ("matviewowner", name()),
                ("tablespace", name()),
                ("hasindexes", b()),
                ("ispopulated", b()),
                ("definition", text()),
            ],
            entries
                .iter()
                .filter(|e| relkind(e) == "m")
                .map(|e| {
                    vec![
                        split_relation_name(&e.desc.name).0.into(),
                        split_relation_name(&e.desc.name).1.into(),
                        catalog.role_name(e.desc.owner).unwrap_or_default().into(),
                        V::Null,
                        (!e.desc.all_indexes().is_empty()).into(),
                        true.into(),
                        e.desc.query.clone().unwrap_or_default().into(),
                    ]
                })
                .collect(),
        )?,
        "pg_extension" => build_table(
            &[
                ("oid", oid()),
                ("extname", name()),
                ("extowner", oid()),
                ("extnamespace", oid()),
                ("extrelocatable", b()),
                ("extversion", text()),
                ("extconfig", arr(oid())),
                ("extcondition", arr(text())),
            ],
            catalog
                .installed_extensions()
                .iter()
                .map(|a| {
                    vec![
                        a.oid.into(),
                        a.name.into(),
                        owner(),
                        a.namespace.into(),
                        a.relocatable.into(),
                        a.version.into(),
                        V::Null,
                        V::Null,
                    ]
                })
                .collect(),
        )?,
        // the database's activity: connections, transactions ended and rows written and
        // returned since the server started (`metrics`); what Weir does not count (blocks
        // read and hit, temp files, deadlocks, session times) is NULL
        "pg_stat_database" => {
            let m = crate::metrics::global();
            let n = |v: u64| V::I(v as i64);
            build_table(
                &[
                    ("datid", oid()),
                    ("datname", name()),
                    ("numbackends", i4()),
                    ("xact_commit", T::Int8),
                    ("xact_rollback", T::Int8),
                    ("blks_read", T::Int8),
                    ("blks_hit", T::Int8),
                    ("tup_returned", T::Int8),
                    ("tup_fetched", T::Int8),
                    ("tup_inserted", T::Int8),
                    ("tup_updated", T::Int8),
                    ("tup_deleted", T::Int8),
                    ("conflicts", T::Int8),
                    ("temp_files", T::Int8),
                    ("temp_bytes", T::Int8),
                    ("deadlocks", T::Int8),
                    ("checksum_failures", T::Int8),
                    ("checksum_last_failure", T::TimestampTz(None)),
                    ("blk_read_time", T::Float8),
                    ("blk_write_time", T::Float8),
                    ("session_time", T::Float8),
                    ("active_time", T::Float8),
                    ("idle_in_transaction_time", T::Float8),
                    ("sessions", T::Int8),
                    ("sessions_abandoned", T::Int8),
                    ("sessions_fatal", T::Int8),
                    ("sessions_killed", T::Int8),
                    ("stats_reset", T::TimestampTz(None)),
                ],
                vec![vec![
                    DATABASE_OID.into(),
                    DATABASE_NAME.into(),
                    V::I(catalog.connections.lock().len() as i64),
                    n(m.transactions_of(true)),
                    n(m.transactions_of(false)),
                    V::Null,
                    V::Null,
                    n(m.rows_of("returned")),
                    V::Null,
                    n(m.rows_of("inserted")),
                    n(m.rows_of("updated")),
                    n(m.rows_of("deleted")),
                    // (no standby: no recovery conflicts)
                    V::I(0),
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                ]],
            )?
        }
        // the locks sessions hold: advisory locks, granted (Weir takes no row locks;
        // LOCK TABLE's writer locks and waits are not listed yet)
        "pg_locks" => build_table(
            &[
                ("locktype", text()),
                ("database", oid()),
                ("relation", oid()),
                ("page", i4()),
                ("tuple", i2()),
                ("virtualxid", text()),
                ("transactionid", T::Int8),
                ("classid", oid()),
                ("objid", oid()),
                ("objsubid", i2()),
                ("virtualtransaction", text()),
                ("pid", i4()),
                ("mode", text()),
                ("granted", b()),
                ("fastpath", b()),
                ("waitstart", T::TimestampTz(None)),
            ],
            catalog
                .held_locks()
                .into_iter()
                .map(|l| {
                    vec![
                        l.locktype.into(),
                        DATABASE_OID.into(),
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        l.key.0.into(),
                        l.key.1.into(),
                        V::I(l.key.2 as i64),
                        format!("{}/1", l.pid).into(),
                        V::I(l.pid as i64),
                        l.mode.into(),
                        true.into(),
                        false.into(),
                        V::Null,
                    ]
                })
                .collect(),
        )?,
        "pg_available_extensions" => {
            let installed = catalog.installed_extensions();
            build_table(
                &[
                    ("name", name()),
                    ("default_version", text()),
                    ("installed_version", text()),
                    ("comment", text()),
                ],
                crate::catalog::extensions::AVAILABLE
                    .iter()
                    .map(|a| {
                        vec![
                            a.name.into(),
                            a.version.into(),
                            if installed.iter().any(|i| i.name == a.name) {
                                a.version.into()
                            } else {
                                V::Null
                            },
                            a.comment.into(),
                        ]
                    })
                    .collect(),
            )?
        }
        "pg_trigger" => empty(&[
            ("oid", oid()),
            ("tgrelid", oid()),
            ("tgparentid", oid()),
            ("tgname", name()),
            ("tgfoid", oid()),
            ("tgtype", i2()),
            ("tgenabled", ch()),
            ("tgisinternal", b()),
        ])?,
        "pg_rewrite" => empty(&[
            ("oid", oid()),
            ("rulename", name()),
            ("ev_class", oid()),
            ("ev_type", ch()),
            ("ev_enabled", ch()),
            ("is_instead", b()),
        ])?,
        // a serial or identity column's sequence depends on its column (Rails reads its
        // tables' sequences here): `a` (auto) for serial, `i` (internal) for an identity
        "pg_depend" => build_table(
            &[
                ("classid", oid()),
                ("objid", oid()),
                ("objsubid", i4()),
                ("refclassid", oid()),
                ("refobjid", oid()),
                ("refobjsubid", i4()),
                ("deptype", ch()),
            ],
            entries
                .iter()
                .flat_map(|e| {
                    e.desc.columns.iter().enumerate().filter_map(|(at, c)| {
                        let seq = e.desc.owned_sequence(&c.name)?;
                        let s = entries.iter().find(|x| {
                            x.desc.name == seq
                                && x.desc.kind == crate::catalog::RelationKind::Sequence
                        })?;
                        let deptype = match e.desc.identity(&c.name) {
                            Some(_) => "i",
                            None => "a",
                        };
                        Some(vec![
                            1259u32.into(),
                            s.desc.oid.into(),
                            V::I(0),
                            1259u32.into(),
                            e.desc.oid.into(),
                            V::I(at as i64 + 1),
                            deptype.into(),
                        ])
                    })
                })
                .collect(),
        )?,
        "pg_sequences" => build_table(
            &[
                ("schemaname", name()),
                ("sequencename", name()),
                ("sequenceowner", name()),
                // (Postgres' is a regtype: its text is the same)
                ("data_type", text()),
                ("start_value", T::Int8),
                ("min_value", T::Int8),
                ("max_value", T::Int8),
                ("increment_by", T::Int8),
                ("cycle", b()),
                ("cache_size", T::Int8),
                ("last_value", T::Int8),
            ],
            catalog
                .sequences()
                .into_iter()
                .map(|(e, s)| {
                    vec![
                        split_relation_name(&e.desc.name).0.into(),
                        split_relation_name(&e.desc.name).1.into(),
                        catalog.role_name(e.desc.owner).map(V::S).unwrap_or(V::Null),
                        s.type_name().into(),
                        V::I(s.start),
                        V::I(s.min),
                        V::I(s.max),
                        V::I(s.increment),
                        s.cycle.into(),
                        V::I(1),
                        catalog
                            .sequence_last_value(e.desc.oid)
                            .map(V::I)
                            .unwrap_or(V::Null),
                    ]
                })
                .collect(),
        )?,
        "pg_sequence" => build_table(
            &[
                ("seqrelid", oid()),
                ("seqtypid", oid()),
                ("seqstart", T::Int8),
                ("seqincrement", T::Int8),
                ("seqmax", T::Int8),
                ("seqmin", T::Int8),
                ("seqcache", T::Int8),
                ("seqcycle", b()),
            ],
            catalog
                .sequences()
                .into_iter()
                .map(|(e, s)| {
                    vec![
                        e.desc.oid.into(),
                        V::I(if s.type_name() == "integer" { 23 } else { 20 }),
                        V::I(s.start),
                        V::I(s.increment),
                        V::I(s.max),
                        V::I(s.min),
                        V::I(1),
                        s.cycle.into(),
                    ]
                })
                .collect(),
        )?,
        "pg_foreign_table" => empty(&[
            ("ftrelid", oid()),
            ("ftserver", oid()),
            ("ftoptions", arr(text())),
        ])?,
        "pg_partitioned_table" => empty(&[
            ("partrelid", oid()),
            ("partstrat", ch()),
            ("partnatts", i2()),
        ])?,
        "pg_enum" => build_table(
            &[
                ("oid", oid()),
                ("enumtypid", oid()),
                ("enumsortorder", T::Float4),
                ("enumlabel", name()),
            ],
            catalog
                .enum_types()
                .into_iter()
                .flat_map(|t| {
                    t.labels.into_iter().map(move |l| {
                        vec![
                            l.oid.into(),
                            t.oid.into(),
                            V::F(l.sort_order as f64),
                            l.label.into(),
                        ]
                    })
                })
                .collect(),
        )?,
        "pg_range" => empty(&[
            ("rngtypid", oid()),
            ("rngsubtype", oid()),
            ("rngmultitypid", oid()),
        ])?,
        "pg_event_trigger" => empty(&[
            ("oid", oid()),
            ("evtname", name()),
            ("evtevent", name()),
            ("evtowner", oid()),
            ("evtfoid", oid()),
            ("evtenabled", ch()),
            ("evttags", arr(text())),
        ])?,
        // encoding conversions: Weir speaks UTF8 only (psql's \dc)
        "pg_conversion" => empty(&[
            ("oid", oid()),
            ("conname", name()),
            ("connamespace", oid()),
            ("conowner", oid()),
            ("conforencoding", i4()),
            ("contoencoding", i4()),
            ("conproc", oid()),
            ("condefault", b()),
        ])?,
        "pg_language" => build_table(
            &[
                ("oid", oid()),
                ("lanname", name()),
                ("lanowner", oid()),
                ("lanispl", b()),
                ("lanpltrusted", b()),
                ("lanplcallfoid", oid()),
                ("laninline", oid()),
                ("lanvalidator", oid()),
                ("lanacl", arr(text())),
            ],
            // Postgres' rows, with its handler and validator function OIDs
            [
                (12u32, "internal", false, 2246u32),
                (13, "c", false, 2247),
                (14, "sql", true, 2248),
            ]
            .into_iter()
            .map(|(o, n, trusted, validator)| {
                vec![
                    o.into(),
                    n.into(),
                    owner(),
                    false.into(),
                    trusted.into(),
                    0u32.into(),
                    0u32.into(),
                    validator.into(),
                    V::Null,
                ]
            })
            // the language of an installed plpgsql (which Weir lists and does not run:
            // `LANGUAGE plpgsql` functions are 0A000)
            .chain(
                catalog
                    .installed_extensions()
                    .iter()
                    .filter(|a| a.name == "plpgsql")
                    .map(|_| {
                        vec![
                            13563u32.into(),
                            "plpgsql".into(),
                            owner(),
                            true.into(),
                            true.into(),
                            13560u32.into(),
                            13561u32.into(),
                            13562u32.into(),
                            V::Null,
                        ]
                    }),
            )
            .collect(),
        )?,
        "pg_stat_ssl" => build_table(
            &[
                ("pid", i4()),
                ("ssl", b()),
                ("version", text()),
                ("cipher", text()),
                ("bits", i4()),
                ("client_dn", text()),
                ("client_serial", text()),
                ("issuer_dn", text()),
            ],
            catalog
                .connections
                .lock()
                .iter()
                .map(|(pid, c)| match &c.tls {
                    None => vec![
                        V::I(*pid as i64),
                        false.into(),
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                    ],
                    Some(t) => vec![
                        V::I(*pid as i64),
                        true.into(),
                        t.version.as_str().into(),
                        t.cipher.as_str().into(),
                        V::I(t.bits as i64),
                        t.client_dn.clone().map(V::S).unwrap_or(V::Null),
                        V::Null,
                        t.issuer_dn.clone().map(V::S).unwrap_or(V::Null),
                    ],
                })
                .collect(),
        )?,
        "pg_stat_activity" => {
            let ts = || T::TimestampTz(None);
            let micros = |t: Option<i64>| t.map(V::I).unwrap_or(V::Null);
            build_table(
                &[
                    ("datid", oid()),
                    ("datname", name()),
                    ("pid", i4()),
                    ("leader_pid", i4()),
                    ("usesysid", oid()),
                    ("usename", name()),
                    ("application_name", text()),
                    ("client_addr", text()),
                    ("client_hostname", text()),
                    ("client_port", i4()),
                    ("backend_start", ts()),
                    ("xact_start", ts()),
                    ("query_start", ts()),
                    ("state_change", ts()),
                    ("wait_event_type", text()),
                    ("wait_event", text()),
                    ("state", text()),
                    ("backend_xid", T::Int8),
                    ("backend_xmin", T::Int8),
                    ("query_id", T::Int8),
                    ("query", text()),
                    ("backend_type", text()),
                ],
                // (copied out first: no catalog lock is taken under the connections' lock)
                catalog
                    .connections
                    .lock()
                    .iter()
                    .map(|(pid, c)| (*pid, c.clone()))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|(pid, c)| {
                        let a = &c.activity;
                        vec![
                            V::I(DATABASE_OID as i64),
                            DATABASE_NAME.into(),
                            V::I(*pid as i64),
                            V::Null,
                            catalog
                                .role(&c.user)
                                .map(|r| V::I(r.oid as i64))
                                .unwrap_or(V::Null),
                            c.user.as_str().into(),
                            a.application_name.as_str().into(),
                            c.client
                                .map(|s| V::S(s.ip().to_string()))
                                .unwrap_or(V::Null),
                            V::Null,
                            c.client.map(|s| V::I(s.port() as i64)).unwrap_or(V::Null),
                            V::I(c.backend_start),
                            micros(a.xact_start),
                            micros(a.query_start),
                            V::I(a.state_change),
                            V::Null,
                            V::Null,
                            a.state.into(),
                            V::Null,
                            V::Null,
                            V::Null,
                            a.query
                                .as_deref()
                                .map(|q| V::S(q.to_owned()))
                                .unwrap_or(V::Null),
                            "client backend".into(),
                        ]
                    })
                    .collect(),
            )?
        }
        _ => return Ok(None),
    }))
}

fn empty(columns: &[(&str, T)]) -> DfResult<RecordBatch> {
    build_table(columns, Vec::new())
}

#[allow(clippy::too_many_arguments)]
fn class_row(
    oid: u32,
    relname: &str,
    reltype: u32,
    relkind: &str,
    relam: u32,
    natts: usize,
    hasindex: bool,
    tuples: f64,
) -> Vec<V> {
    vec![
        oid.into(),
        relname.into(),
        PUBLIC_NAMESPACE_OID.into(),
        reltype.into(),
        0u32.into(),
        SUPERUSER_OID.into(),
        relam.into(),
        oid.into(),
        0u32.into(),
        0i32.into(),
        V::F(tuples),
        0i32.into(),
        0u32.into(),
        hasindex.into(),
        false.into(),
        "p".into(),
        relkind.into(),
        natts.into(),
        0i32.into(),
        false.into(),
        false.into(),
        false.into(),
        false.into(),
        false.into(),
        true.into(),
        "d".into(),
        false.into(),
        0u32.into(),
        V::Null,
        V::Null,
        V::Null,
    ]
}

/// Positions in [`attribute_row`]'s row.
const ATTHASDEF: usize = 14;
const ATTIDENTITY: usize = 16;
const ATTGENERATED: usize = 17;

/// A `pg_attrdef` row's OID: one per relation and column, stable while both exist.
fn attrdef_oid(relid: u32, attnum: usize) -> u32 {
    relid
        .wrapping_mul(1601)
        .wrapping_add(attnum as u32)
        .max(crate::catalog::FIRST_USER_OID)
}

fn attribute_row(relid: u32, name: &str, ty: &SqlType, num: usize, notnull: bool) -> Vec<V> {
    let len: i64 = match ty {
        T::Bool | T::InternalChar => 1,
        T::Int2 => 2,
        T::Int4 | T::Float4 | T::Date | T::Oid => 4,
        T::Int8 | T::Float8 | T::Timestamp(_) | T::TimestampTz(_) | T::Time(_) => 8,
        T::Interval => 16,
        T::Name => 64,
        _ => -1,
    };
    let collation: u32 = match ty {
        T::Text | T::Varchar(_) | T::Name => 100,
        _ => 0,
    };
    vec![
        relid.into(),
        name.into(),
        ty.oid().into(),
        (-1i32).into(),
        V::I(len),
        num.into(),
        (matches!(ty, T::Array(_) | T::Vector(_)) as i32).into(),
        (-1i32).into(),
        ty.typmod().into(),
        (len > 0 && len <= 8).into(),
        "i".into(),
        storage(len, ty.oid()).into(),
        "".into(),
        notnull.into(),
        false.into(),
        false.into(),
        "".into(),
        "".into(),
        false.into(),
        true.into(),
        0i32.into(),
        collation.into(),
        V::Null,
        V::Null,
        V::Null,
    ]
}

/// A user type's `pg_type` row (`row`, from [`type_row`]) in its schema with its owner, and
/// its array type's row (`_name`, OID + 1).
fn user_type_rows(
    mut row: Vec<V>,
    oid: u32,
    bare: &str,
    namespace: u32,
    owner: u32,
) -> [Vec<V>; 2] {
    let mut array = type_row(oid + 1, &format!("_{bare}"), -1, "b", "A", 0, oid, 0);
    for r in [&mut row, &mut array] {
        r[2] = namespace.into();
        r[3] = owner.into();
    }
    [row, array]
}

#[allow(clippy::too_many_arguments)]
fn type_row(
    oid: u32,
    typname: &str,
    len: i16,
    typtype: &str,
    category: &str,
    relid: u32,
    elem: u32,
    array: u32,
) -> Vec<V> {
    // the I/O functions' prefix, as Postgres names them (clients test `typinput =
    // 'array_in'::regproc` to find array types)
    let io = match (typtype, category) {
        (_, "A") => "array_",
        ("c", _) => "record_",
        ("e", _) => "enum_",
        _ => typname,
    };
    let collation: u32 = if matches!(oid, 25 | 1043 | 19 | 1042) {
        100
    } else {
        0
    };
    vec![
        oid.into(),
        typname.into(),
        if relid == 0 {
            PG_CATALOG_NAMESPACE_OID
        } else {
            PUBLIC_NAMESPACE_OID
        }
        .into(),
        SUPERUSER_OID.into(),
        V::I(len as i64),
        (len > 0 && len <= 8).into(),
        typtype.into(),
        category.into(),
        false.into(),
        true.into(),
        ",".into(),
        relid.into(),
        elem.into(),
        array.into(),
        io_proc_oid(&format!("{io}in")).into(),
        io_proc_oid(&format!("{io}out")).into(),
        io_proc_oid(&format!("{io}recv")).into(),
        io_proc_oid(&format!("{io}send")).into(),
        "i".into(),
        storage(len as i64, oid).into(),
        false.into(),
        0u32.into(),
        (-1i32).into(),
        0i32.into(),
        collation.into(),
        V::Null,
        V::Null,
    ]
}

/// Postgres' `typstorage` / `attstorage`: plain for fixed-length types, main for `numeric`,
/// extended for the other variable-length ones.
fn storage(len: i64, oid: u32) -> &'static str {
    if len > 0 {
        "p"
    } else if oid == 1700 {
        "m"
    } else {
        "x"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every generated relation of `pg_catalog` is listed (once) among the system relations,
    /// and their OIDs are distinct and below the first user OID.
    #[test]
    fn system_relations_are_listed() {
        for t in TABLES {
            let n = SYSTEM_RELATIONS
                .iter()
                .filter(|r| r.namespace == PG_CATALOG_NAMESPACE_OID && r.name == *t)
                .count();
            assert_eq!(n, 1, "pg_catalog.{t} listed {n} times");
        }
        for (i, r) in SYSTEM_RELATIONS.iter().enumerate() {
            assert!(r.oid < crate::catalog::FIRST_USER_OID, "{}", r.name);
            assert!(r.kind == "r" || r.kind == "v", "{}", r.name);
            assert!(
                SYSTEM_RELATIONS[..i].iter().all(|o| o.oid != r.oid),
                "{} has another's OID",
                r.name
            );
        }
    }

    /// The rewriter answers subqueries over these with NULL: they must really be empty
    /// (but `pg_sequence`, see [`ALWAYS_EMPTY`]).
    #[test]
    fn always_empty_tables_have_no_rows() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = crate::state::fjall_store::FjallStore::open(dir.path()).expect("store");
        let catalog = Catalog::open(Arc::new(store)).expect("catalog");
        for t in ALWAYS_EMPTY {
            assert!(TABLES.contains(t), "{t} is not a catalog table");
            let b = build(t, &catalog).expect("build").expect("table");
            assert_eq!(b.num_rows(), 0, "{t} has rows");
        }
    }
}
