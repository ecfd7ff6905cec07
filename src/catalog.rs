//! The catalog: every relation Weir knows (tables, sources, materialized views), with stable
//! OIDs, persisted in the store under `C{oid}` as JSON so it survives restarts. The
//! `pg_catalog` tables clients query are built from it ([`pg_catalog`]).

pub mod domains;
pub mod extensions;
pub mod float_over_numeric;
pub mod functions;
pub mod information_schema;
pub mod matched_types;
pub mod pg_catalog;
pub mod pg_semantics;
pub mod pg_stat;
pub mod rewrite;
pub mod roles;
pub mod schemas;
pub mod scram;
pub mod secrets;
pub mod sequences;
pub mod side_effects;
pub mod sql_functions;
pub mod system;
pub mod table_exprs;
pub mod user_types;
pub mod value_limits;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError, sqlstate};
use crate::sql::types::{SqlType, schema_of};
use crate::state::store::{Durability, Store, WriteBatch};
use crate::state::table::{TableKind, TableStore};

/// First OID handed to user objects, as in Postgres (FirstNormalObjectId).
pub const FIRST_USER_OID: u32 = 16384;
/// OIDs of the built-in namespaces and objects, as in Postgres.
pub const PG_CATALOG_NAMESPACE_OID: u32 = 11;
pub const PUBLIC_NAMESPACE_OID: u32 = 2200;
pub const INFORMATION_SCHEMA_NAMESPACE_OID: u32 = 13000;
pub const DATABASE_OID: u32 = 16383;
pub const SUPERUSER_OID: u32 = 10;
pub const DATABASE_NAME: &str = "weir";
pub const SUPERUSER_NAME: &str = "weir";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ColumnDesc {
    pub name: String,
    #[serde(deserialize_with = "crate::sql::types::deserialize_stored")]
    pub ty: SqlType,
    pub nullable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WatermarkDesc {
    pub column: String,
    /// SQL text of the watermark expression.
    pub expr: String,
    /// The watermark trails the largest event time seen by this much.
    #[serde(default)]
    pub delay_us: i64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum RelationKind {
    Table,
    AppendOnlyTable,
    MaterializedView,
    /// A connector's stream (`CREATE SOURCE`): no storage; each view reading it runs its
    /// own instance of the connector.
    Source,
    /// `CREATE SINK`: writes a view's changes to an external system. Not a relation
    /// clients can read (not in pg_class); one with `AS SELECT` runs its query as a view of
    /// its own under its OID.
    Sink,
    /// `CREATE VIEW`: a named query, expanded where it is used (no storage, no dataflow).
    View,
    /// `CREATE SEQUENCE` (also made by `serial` and identity columns): a counter.
    Sequence,
}

impl RelationKind {
    /// `pg_class.relkind`.
    pub fn relkind(&self) -> &'static str {
        match self {
            RelationKind::Table | RelationKind::AppendOnlyTable => "r",
            RelationKind::MaterializedView => "m",
            // an ordinary relation to clients, so psql's \d and BI tools can describe its
            // columns ('f', foreign table, would be truer, but psql's \d of one needs
            // pg_foreign_table and a lateral pg_options_to_table)
            RelationKind::Source => "r",
            RelationKind::Sink => "",
            RelationKind::View => "v",
            RelationKind::Sequence => "S",
        }
    }

    pub fn is_table(&self) -> bool {
        matches!(self, RelationKind::Table | RelationKind::AppendOnlyTable)
    }

    /// How error messages name it.
    pub fn noun(&self) -> &'static str {
        match self {
            RelationKind::Table | RelationKind::AppendOnlyTable => "table",
            RelationKind::MaterializedView => "materialized view",
            RelationKind::Source => "source",
            RelationKind::Sink => "sink",
            RelationKind::View => "view",
            RelationKind::Sequence => "sequence",
        }
    }
}

/// What the catalog persists about a relation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelationDesc {
    pub oid: u32,
    pub name: String,
    pub kind: RelationKind,
    pub columns: Vec<ColumnDesc>,
    pub primary_key: Vec<String>,
    pub watermark: Option<WatermarkDesc>,
    /// The statement that created it.
    pub definition: String,
    /// A view's query (SQL), as planned at creation.
    #[serde(default)]
    pub query: Option<String>,
    /// Relations a view reads (OIDs).
    #[serde(default)]
    pub dependencies: Vec<u32>,
    /// `WITH (...)` options of a view or source.
    #[serde(default)]
    pub options: Vec<(String, String)>,
    /// `EMIT ON WINDOW CLOSE`.
    #[serde(default)]
    pub emit_on_window_close: bool,
    /// The relation's rows are only ever inserted (append-only tables, sources, views
    /// whose output never retracts): FORMAT PLAIN sinks need it.
    #[serde(default)]
    pub append_only: bool,
    /// The role that created it (`relowner`); relations from before roles existed belong
    /// to the bootstrap superuser.
    #[serde(default = "bootstrap_owner")]
    pub owner: u32,
    /// Granted privileges (`relacl`); None: the owner's default, everything to the owner.
    #[serde(default)]
    pub acl: Option<Vec<roles::AclItem>>,
    /// Column `DEFAULT` expressions (column name, SQL text), used by INSERT.
    #[serde(default)]
    pub defaults: Vec<(String, String)>,
    /// `CREATE INDEX`es of a table.
    #[serde(default)]
    pub indexes: Vec<IndexDesc>,
    /// A table's CHECK constraints: (name, expression text over its columns), checked on
    /// every row an INSERT, UPDATE or COPY writes.
    #[serde(default)]
    pub checks: Vec<(String, String)>,
    /// A table's FOREIGN KEY constraints (`engine/foreign_keys.rs`).
    #[serde(default)]
    pub foreign_keys: Vec<ForeignKeyDesc>,
    /// `COMMENT ON` the relation and its columns (`pg_description`, `obj_description`).
    #[serde(default)]
    pub comments: Comments,
    /// Constraints added `NOT VALID` (CHECK, FOREIGN KEY): the rows already there were not
    /// checked, until `ALTER TABLE ... VALIDATE CONSTRAINT`.
    #[serde(default)]
    pub not_valid: Vec<String>,
    /// A table's stored generated columns (`GENERATED ALWAYS AS (expr) STORED`): (column
    /// name, expression text over its other columns), computed on every row written
    /// (`engine/generated.rs`).
    #[serde(default)]
    pub generated: Vec<(String, String)>,
    /// A materialized view's (or a sink query's) session TimeZone when it was created, where
    /// it was not UTC: its plan reads and shows `timestamptz` there, also after a restart
    /// (as [`crate::sql::time_zone::Zone::arg_text`] names it).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// The columns of a domain type (`catalog/domains.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<domains::ColumnDomain>,
    /// A materialized view's or sink's checkpoint restores it also under one of these
    /// fingerprint digests (`dataflow::checkpoint::fingerprint_digest`): the graph it ran
    /// when a relation it reads was renamed or moved. Only names changed then, not the
    /// graph's state, but the fingerprint names the relations and holds the query text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restores_from: Vec<String>,
}

/// A relation's comment and its columns' (by column name).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Comments {
    pub relation: Option<String>,
    pub columns: Vec<(String, String)>,
    /// `COMMENT ON INDEX` of the relation's indexes, by index name.
    #[serde(default)]
    pub indexes: Vec<(String, String)>,
    /// `COMMENT ON CONSTRAINT name ON table`, by constraint name.
    #[serde(default)]
    pub constraints: Vec<(String, String)>,
}

/// A FOREIGN KEY constraint of a table: its `columns` (a value of them, when none is NULL,
/// must be a row's `ref_columns` in table `ref_table`, a primary key or unique index there).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ForeignKeyDesc {
    /// Its `pg_constraint` OID.
    pub oid: u32,
    pub name: String,
    pub columns: Vec<String>,
    /// The referenced table, by name (followed by RENAME TO; a table rewritten by ALTER
    /// TABLE changes OID, not name).
    pub ref_table: String,
    pub ref_columns: Vec<String>,
    pub on_delete: FkAction,
    pub on_update: FkAction,
    /// MATCH FULL: all of `columns` NULL or none (else MATCH SIMPLE: any NULL passes).
    #[serde(default)]
    pub match_full: bool,
    /// DEFERRABLE: in a transaction block its checks may wait for COMMIT (SET CONSTRAINTS).
    #[serde(default)]
    pub deferrable: bool,
    /// INITIALLY DEFERRED: they do unless SET CONSTRAINTS says IMMEDIATE.
    #[serde(default)]
    pub initially_deferred: bool,
}

/// What happens to referencing rows when the referenced row goes or its key changes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum FkAction {
    NoAction,
    Restrict,
    Cascade,
    SetNull,
}

impl FkAction {
    /// `pg_constraint.confupdtype`/`confdeltype`.
    pub fn code(self) -> &'static str {
        match self {
            FkAction::NoAction => "a",
            FkAction::Restrict => "r",
            FkAction::Cascade => "c",
            FkAction::SetNull => "n",
        }
    }

    /// As SQL writes it (`pg_get_constraintdef`, information_schema).
    pub fn sql(self) -> &'static str {
        match self {
            FkAction::NoAction => "NO ACTION",
            FkAction::Restrict => "RESTRICT",
            FkAction::Cascade => "CASCADE",
            FkAction::SetNull => "SET NULL",
        }
    }
}

impl ForeignKeyDesc {
    /// Its definition as `pg_get_constraintdef` gives it.
    pub fn definition(&self) -> String {
        let q = |cols: &[String]| {
            cols.iter()
                .map(|c| crate::sql::pg_text::quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = format!(
            "FOREIGN KEY ({}) REFERENCES {}({})",
            q(&self.columns),
            schemas::quote_relation(&self.ref_table),
            q(&self.ref_columns)
        );
        if self.match_full {
            s.push_str(" MATCH FULL");
        }
        if self.on_update != FkAction::NoAction {
            s.push_str(" ON UPDATE ");
            s.push_str(self.on_update.sql());
        }
        if self.on_delete != FkAction::NoAction {
            s.push_str(" ON DELETE ");
            s.push_str(self.on_delete.sql());
        }
        if self.deferrable {
            s.push_str(" DEFERRABLE");
        }
        if self.initially_deferred {
            s.push_str(" INITIALLY DEFERRED");
        }
        s
    }
}

/// A secondary index (`CREATE [UNIQUE] INDEX name ON table (columns)`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IndexDesc {
    pub oid: u32,
    pub name: String,
    /// Per key: the column's name, or for an expression key its text (as `expressions`).
    pub columns: Vec<String>,
    pub unique: bool,
    /// Per key, when some key is an expression (`lower(email)`): Some(its SQL text), None
    /// for a column. Empty: every key is a column.
    #[serde(default)]
    pub expressions: Vec<Option<String>>,
    /// A partial index's predicate (`WHERE NOT deleted`), its SQL text.
    #[serde(default)]
    pub predicate: Option<String>,
    /// The index keeps a UNIQUE constraint of the same name (listed in `pg_constraint`, its
    /// OID the index's plus one; dropped with ALTER TABLE ... DROP CONSTRAINT).
    #[serde(default)]
    pub constraint: bool,
    /// `NULLS NOT DISTINCT` (a UNIQUE index's NULLs conflict).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nulls_not_distinct: bool,
}

impl IndexDesc {
    /// Whether the index's keys are computed (an expression key, or a partial index's
    /// predicate): point queries, ON CONFLICT targets and foreign keys do not use it.
    pub fn derived(&self) -> bool {
        self.expressions.iter().any(Option::is_some) || self.predicate.is_some()
    }

    /// Key `k` as the catalog keeps it.
    fn key(&self, k: usize) -> crate::catalog::table_exprs::KeyText<'_> {
        use crate::catalog::table_exprs::KeyText;
        match self.expressions.get(k) {
            Some(Some(e)) => KeyText::Expression(e),
            _ => KeyText::Column(&self.columns[k]),
        }
    }
}

/// An index as `pg_class`/`pg_index` show it: the primary key's or a secondary one.
pub struct IndexInfo {
    pub oid: u32,
    pub name: String,
    /// Per key: a column's name, or an expression's text.
    pub columns: Vec<String>,
    /// Which keys are expressions (`pg_index.indkey` is 0 for them).
    pub expression_keys: Vec<bool>,
    pub predicate: Option<String>,
    pub unique: bool,
    pub primary: bool,
    /// `NULLS NOT DISTINCT`.
    pub nulls_not_distinct: bool,
}

impl IndexInfo {
    /// Its `CREATE INDEX` statement as `pg_get_indexdef` and `pg_indexes` give it (`pretty`:
    /// as psql shows it, the predicate without parentheses).
    pub fn definition(&self, relation: &str, pretty: bool) -> String {
        let keys: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(k, c)| match self.expression_keys.get(k) {
                Some(true) => crate::catalog::table_exprs::shown_key(c),
                _ => c.clone(),
            })
            .collect();
        format!(
            "CREATE {}INDEX {} ON {}.{} USING btree ({}){}{}",
            if self.unique { "UNIQUE " } else { "" },
            self.name,
            schemas::split_relation_name(relation).0,
            schemas::split_relation_name(relation).1,
            keys.join(", "),
            if self.nulls_not_distinct {
                " NULLS NOT DISTINCT"
            } else {
                ""
            },
            self.predicate
                .as_ref()
                .map(|p| match pretty {
                    true => format!(" WHERE {p}"),
                    false => format!(" WHERE ({p})"),
                })
                .unwrap_or_default()
        )
    }

    /// Whether a key is an expression or the index is partial.
    pub fn derived(&self) -> bool {
        self.expression_keys.iter().any(|e| *e) || self.predicate.is_some()
    }
}

/// A type's name without its modifiers (`character varying` of `varchar(10)`): what a
/// default's constant is shown cast to (`'ab'::character varying`).
pub(crate) fn type_without_modifiers(ty: &crate::sql::types::SqlType) -> String {
    let ty = ty.display_name();
    match (ty.find('('), ty.find(')')) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &ty[..a], &ty[b + 1..]),
        _ => ty,
    }
}

/// A `DEFAULT` expression (a column's, a function parameter's) as Postgres shows it: a
/// quoted constant with the type it is the default of (`'x'::text`; `ty` without
/// modifiers), a negative number with its own ([`negative_constant`]), anything else as
/// written.
pub(crate) fn default_shown(text: &str, ty: Option<&str>) -> String {
    let text = text.trim();
    let quoted = text.len() >= 2
        && text.starts_with('\'')
        && text.ends_with('\'')
        && !text[1..text.len() - 1].replace("''", "").contains('\'');
    match ty {
        Some(ty) if quoted => format!("{text}::{ty}"),
        _ => negative_constant(text).unwrap_or_else(|| crate::sql::parser::shown_expr(text)),
    }
}

/// A negative number constant (`-3`, `(-1.5)`, `- 4`) as Postgres shows it in a default:
/// quoted, with the constant's own type (`'-3'::integer`, `'-1.5'::numeric`).
fn negative_constant(text: &str) -> Option<String> {
    let mut t = text.trim();
    while let Some(inner) = t.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        t = inner.trim();
    }
    let written = t.strip_prefix('-')?.trim_start();
    let (int, frac) = written.split_once('.').unwrap_or((written, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let digits = match written.contains('.') {
        true => format!("{int}.{frac}"),
        false => int.to_owned(),
    };
    let ty = if written.contains('.') {
        "numeric"
    } else if format!("-{digits}").parse::<i32>().is_ok() {
        "integer"
    } else if format!("-{digits}").parse::<i64>().is_ok() {
        "bigint"
    } else {
        "numeric"
    };
    Some(format!("'-{digits}'::{ty}"))
}

fn bootstrap_owner() -> u32 {
    SUPERUSER_OID
}

impl RelationDesc {
    /// A column's `DEFAULT` as Postgres shows it (`pg_attrdef`, `information_schema`,
    /// psql's `\d`): a quoted constant with its column's type (`'x'::text`), a sequence's
    /// `nextval('t_id_seq'::regclass)`, anything else as written. None without a default,
    /// and for a `GENERATED ALWAYS AS IDENTITY` column (an identity, not a default).
    pub fn column_default(&self, column: &str) -> Option<String> {
        if self.identity(column).is_some() {
            return None;
        }
        // (a domain's default is the domain's, not the column's: `pg_type.typdefault`)
        if self.domains.iter().any(|d| d.column == column && d.default) {
            return None;
        }
        let (_, text) = self.defaults.iter().find(|(c, _)| c == column)?;
        let text = text.trim();
        if let Some(seq) = crate::catalog::sequences::sequence_of_default(text) {
            return Some(format!(
                "nextval('{}'::regclass)",
                schemas::quote_relation(&seq).replace('\'', "''")
            ));
        }
        let ty = self
            .columns
            .iter()
            .find(|c| c.name == column)
            .map(|c| type_without_modifiers(&c.ty));
        Some(default_shown(text, ty.as_deref()))
    }

    /// The sequence a serial or identity column owns (`t_id_seq`), by the name Weir gives
    /// it (`{table}_{column}_seq`); None for other columns.
    pub fn owned_sequence(&self, column: &str) -> Option<String> {
        let seq = format!("{}_{column}_seq", self.name);
        self.options
            .iter()
            .any(|(k, v)| k == "weir.owned_sequence" && *v == seq)
            .then_some(seq)
    }

    /// A stored generated column's expression (as written).
    pub fn generation_expr(&self, column: &str) -> Option<&str> {
        self.generated
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, e)| e.as_str())
    }

    /// What `pg_attrdef.adbin` holds for a column, as `pg_get_expr` shows it: its DEFAULT,
    /// or a generated column's expression (`(a * 2)`).
    pub fn attrdef_text(&self, column: &str) -> Option<String> {
        match self.generation_expr(column) {
            Some(e) => Some(crate::sql::parser::shown_expr_deparsed(e)),
            None => self.column_default(column),
        }
    }

    /// An identity column's kind, as `pg_attribute.attidentity`: `a` for `GENERATED ALWAYS
    /// AS IDENTITY`, `d` for `BY DEFAULT` (a serial column is not one).
    pub fn identity(&self, column: &str) -> Option<char> {
        if self.is_identity_always(column) {
            return Some('a');
        }
        self.options
            .iter()
            .any(|(k, v)| k == "weir.identity_by_default" && v == column)
            .then_some('d')
    }

    /// `GENERATED ALWAYS AS IDENTITY`.
    pub fn is_identity_always(&self, column: &str) -> bool {
        self.options
            .iter()
            .any(|(k, v)| k == "weir.identity_always" && v == column)
    }

    pub fn schema(&self) -> SchemaRef {
        schema_of(
            self.columns
                .iter()
                .map(|c| (c.name.as_str(), &c.ty, c.nullable)),
        )
    }

    /// The primary key constraint's (and its index's) name: as declared (`CONSTRAINT name
    /// PRIMARY KEY`, kept through a RENAME of the table as in Postgres), else `<table>_pkey`.
    pub fn pkey_name(&self) -> String {
        self.options
            .iter()
            .find(|(k, _)| k == "weir.pkey_name")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| format!("{}_pkey", schemas::split_relation_name(&self.name).1))
    }

    /// OID of the primary key's index (a relation of its own in `pg_class`).
    pub fn pkey_index_oid(&self) -> Option<u32> {
        (!self.primary_key.is_empty()).then_some(self.oid + 1)
    }

    /// OID of the primary key constraint.
    pub fn pkey_constraint_oid(&self) -> Option<u32> {
        (!self.primary_key.is_empty()).then_some(self.oid + 2)
    }

    /// `CREATE TEMP TABLE`: dropped when its session ends (and at start, after a crash).
    pub fn is_temporary(&self) -> bool {
        self.options.iter().any(|(k, _)| k == TEMPORARY_OPTION)
    }

    /// Every constraint's `pg_constraint` OID and name: the primary key, UNIQUE
    /// constraints, CHECKs, foreign keys.
    pub fn constraint_oids(&self) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        if let Some(o) = self.pkey_constraint_oid() {
            out.push((o, self.pkey_name()));
        }
        for ix in self.indexes.iter().filter(|i| i.constraint) {
            out.push((ix.oid + 1, ix.name.clone()));
        }
        for (k, (name, _)) in self.checks.iter().enumerate() {
            out.push((self.check_constraint_oid(k), name.clone()));
        }
        for fk in &self.foreign_keys {
            out.push((fk.oid, fk.name.clone()));
        }
        out
    }

    /// The comments on this relation's indexes and constraints: (`pg_description.classoid`
    /// — pg_class or pg_constraint —, object OID, text).
    pub fn object_comments(&self) -> Vec<(u32, u32, String)> {
        let mut out = Vec::new();
        for ix in self.all_indexes() {
            if let Some((_, t)) = self.comments.indexes.iter().find(|(n, _)| *n == ix.name) {
                out.push((1259, ix.oid, t.clone()));
            }
        }
        for (oid, name) in self.constraint_oids() {
            if let Some((_, t)) = self.comments.constraints.iter().find(|(n, _)| *n == name) {
                out.push((2606, oid, t.clone()));
            }
        }
        out
    }

    /// Every index of the relation: the primary key's, then the secondary ones.
    pub fn all_indexes(&self) -> Vec<IndexInfo> {
        let pkey = self.pkey_index_oid().map(|oid| IndexInfo {
            oid,
            name: self.pkey_name(),
            columns: self.primary_key.clone(),
            expression_keys: Vec::new(),
            predicate: None,
            unique: true,
            primary: true,
            nulls_not_distinct: false,
        });
        pkey.into_iter()
            .chain(self.indexes.iter().map(|i| IndexInfo {
                oid: i.oid,
                name: i.name.clone(),
                columns: i.columns.clone(),
                expression_keys: i.expressions.iter().map(Option::is_some).collect(),
                predicate: i.predicate.clone(),
                unique: i.unique,
                primary: false,
                nulls_not_distinct: i.nulls_not_distinct,
            }))
            .collect()
    }

    /// A unique index (the primary key's or a secondary one) over exactly these columns, in
    /// any order: what a foreign key referencing them rests on (not a partial or
    /// expression index, as in Postgres).
    pub fn unique_index_over(&self, columns: &[String]) -> Option<IndexInfo> {
        self.all_indexes().into_iter().find(|i| {
            i.unique
                && !i.derived()
                && i.columns.len() == columns.len()
                && i.columns.iter().all(|c| columns.contains(c))
        })
    }

    /// The table layer's view of the secondary indexes (columns by position; an
    /// expression or partial index's keys planned, `catalog::table_exprs`).
    pub fn index_specs(&self) -> Result<Vec<crate::state::table_index::IndexSpec>> {
        self.indexes.iter().map(|i| self.index_spec(i)).collect()
    }

    /// The table layer's view of one index of this relation.
    pub fn index_spec(&self, i: &IndexDesc) -> Result<crate::state::table_index::IndexSpec> {
        let derived: Option<Arc<dyn crate::state::table_index::DerivedKeys>> = match i.derived() {
            true => {
                let keys: Vec<_> = (0..i.columns.len()).map(|k| i.key(k)).collect();
                Some(Arc::new(crate::catalog::table_exprs::IndexExprs::plan(
                    &self.name,
                    &self.schema(),
                    &keys,
                    i.predicate.as_deref(),
                )?))
            }
            false => None,
        };
        Ok(crate::state::table_index::IndexSpec {
            oid: i.oid,
            name: i.name.clone(),
            columns: match derived {
                Some(_) => Vec::new(),
                None => i
                    .columns
                    .iter()
                    .filter_map(|c| self.columns.iter().position(|d| &d.name == c))
                    .collect(),
            },
            unique: i.unique,
            nulls_not_distinct: i.nulls_not_distinct,
            derived,
        })
    }

    /// OID of the relation's `k`th CHECK constraint (a range of its own: a relation's four
    /// OIDs are taken; at most [`MAX_CHECKS`] a table).
    pub fn check_constraint_oid(&self, k: usize) -> u32 {
        CHECK_OID_BASE
            .wrapping_add(self.oid.wrapping_mul(MAX_CHECKS as u32))
            .wrapping_add(k as u32)
    }

    /// OID of the relation's row type in `pg_type`.
    pub fn row_type_oid(&self) -> u32 {
        self.oid + 3
    }

    pub fn table_kind(&self) -> TableKind {
        match self.kind {
            RelationKind::AppendOnlyTable | RelationKind::Source => TableKind::AppendOnly,
            RelationKind::Sink | RelationKind::View | RelationKind::Sequence => TableKind::Multiset,
            RelationKind::Table | RelationKind::MaterializedView if self.primary_key.is_empty() => {
                TableKind::Multiset
            }
            RelationKind::Table | RelationKind::MaterializedView => TableKind::Keyed {
                pk: self
                    .primary_key
                    .iter()
                    .map(|k| {
                        self.columns
                            .iter()
                            .position(|c| &c.name == k)
                            .expect("primary key columns are validated at CREATE")
                    })
                    .collect(),
            },
        }
    }
}

/// What `pg_cancel_backend` and `pg_terminate_backend` do to a connection (the server's
/// interrupt of it).
pub trait BackendSignals: Send + Sync {
    /// Cancel the statement it runs (57014), as a cancel request does.
    fn cancel(&self);
    /// Stop what it runs and close it (FATAL 57P01).
    fn terminate(&self);
}

/// A lock a connection holds, as `pg_locks` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The holding connection's backend pid.
    pub pid: i32,
    /// `advisory` (the only kind listed yet).
    pub locktype: &'static str,
    /// An advisory lock's key as Postgres shows it: (classid, objid, objsubid) — a bigint
    /// key is its high and low halves with objsubid 1, two integers are themselves with 2.
    pub key: (u32, u32, i16),
    /// `ExclusiveLock` or `ShareLock`.
    pub mode: &'static str,
}

/// The locks the server's sessions hold (the server's advisory locks), for `pg_locks`:
/// set by the server so that the catalog never names it.
pub trait LockListing: Send + Sync {
    fn held(&self) -> Vec<HeldLock>;
}

/// A client connection as `pg_stat_ssl` and `pg_stat_activity` show it.
#[derive(Clone)]
pub struct ConnectionInfo {
    /// Reaches the connection (None in tests that list connections only).
    pub signals: Option<Arc<dyn BackendSignals>>,
    pub user: String,
    /// None for a plain connection.
    pub tls: Option<TlsInfo>,
    /// The client's address and port.
    pub client: Option<std::net::SocketAddr>,
    /// The server's address and port the client connected to (`inet_server_addr()`).
    pub server: Option<std::net::SocketAddr>,
    /// When the connection logged in (microseconds since the epoch).
    pub backend_start: i64,
    pub activity: Activity,
}

/// What a connection is doing, as `pg_stat_activity` shows it: updated by the server when
/// a statement starts and when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Activity {
    /// `active`, `idle`, `idle in transaction`, `idle in transaction (aborted)`.
    pub state: &'static str,
    /// The statement running, or the last one run.
    pub query: Option<Arc<str>>,
    pub application_name: String,
    /// Microseconds since the epoch.
    pub query_start: Option<i64>,
    pub xact_start: Option<i64>,
    pub state_change: i64,
}

/// What a TLS connection negotiated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    pub version: String,
    pub cipher: String,
    pub bits: i32,
    /// The verified client certificate's subject and issuer, OpenSSL's one-line form.
    pub client_dn: Option<String>,
    pub issuer_dn: Option<String>,
}

/// The option that marks a temporary table.
pub const TEMPORARY_OPTION: &str = "weir.temporary";

/// OIDs are handed out in steps so a relation's index, constraint and row type get their own.
pub(crate) const OID_STEP: u32 = 4;
/// CHECK constraints' OIDs start here (see [`RelationDesc::check_constraint_oid`]).
const CHECK_OID_BASE: u32 = 1 << 31;
/// The CHECK constraints a table may have.
pub const MAX_CHECKS: usize = 64;

/// A relation and the runtime object holding its data.
pub struct Entry {
    pub desc: RelationDesc,
    pub table: Option<Arc<TableStore>>,
}

struct State {
    by_name: BTreeMap<String, Arc<Entry>>,
    /// Relations a transaction block dropped, by oid: gone from `by_name` (no statement
    /// sees them) but still stored, until the block commits ([`Catalog::finish_drop`]) or
    /// rolls back ([`Catalog::reattach_relation`]); a crash before the commit finds them
    /// stored, as the block never happened.
    detached: BTreeMap<u32, Arc<Entry>>,
    /// Tables a transaction block rewrote (DROP COLUMN, ALTER COLUMN TYPE, ...), by their
    /// old oid: the old entry, its rows still stored, until the block commits
    /// ([`Catalog::finish_rewrite`]) or rolls back ([`Catalog::undo_rewrite`]). Their
    /// rows are listed under [`purge_key`] in the store, so a crash before either purges
    /// them at the next open (the rewrite, a completed statement, stays).
    rewritten: BTreeMap<u32, Arc<Entry>>,
    next_oid: u32,
    /// Bumped on every DDL; lets caches of catalog-derived data know when to rebuild.
    version: u64,
    roles: roles::Roles,
    secrets: BTreeMap<String, secrets::SecretDesc>,
}

pub struct Catalog {
    store: Arc<dyn Store>,
    state: RwLock<State>,
    /// Client connections and their TLS state, for `pg_stat_ssl` (by backend pid).
    pub connections: parking_lot::Mutex<BTreeMap<i32, ConnectionInfo>>,
    /// Opens secrets (set by [`Catalog::open_secrets`]).
    secrets_key: RwLock<secrets::KeySlot>,
    /// Sequences' counters.
    sequences: sequences::Sequences,
    /// SQL-bodied functions.
    sql_functions: sql_functions::SqlFunctions,
    /// Installed extensions.
    extensions: extensions::Extensions,
    /// What lists the locks sessions hold (`pg_locks`), once the server set it.
    lock_listing: RwLock<Option<Arc<dyn LockListing>>>,
    /// Enum types.
    user_types: user_types::UserTypes,
    /// User schemas.
    schemas: schemas::Schemas,
    /// Domains.
    domains: domains::Domains,
}

/// Every catalog object stored as JSON under `prefix` (relations `C`, functions `F`, types
/// `Y`), in key order; `what` names them when one does not decode.
pub(crate) fn load_json<T: serde::de::DeserializeOwned>(
    store: &dyn Store,
    prefix: &[u8],
    what: &str,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    store.scan_prefix(prefix, &mut |_, v| {
        out.push(
            serde_json::from_slice(v).map_err(|e| {
                WeirError::internal(format!("a stored {what} does not decode: {e}"))
            })?,
        );
        Ok(())
    })?;
    Ok(out)
}

/// 42701 for a table column named like one of Postgres' system columns (`tableoid`,
/// `ctid`, `xmin`, ...), as Postgres refuses it: `tableoid` reads as the relation's OID.
pub fn check_column_name(name: &str) -> Result<()> {
    const SYSTEM_COLUMNS: &[&str] = &["tableoid", "cmax", "xmax", "cmin", "xmin", "ctid"];
    if SYSTEM_COLUMNS.contains(&name) {
        return Err(WeirError::new(
            sqlstate::DUPLICATE_COLUMN,
            format!("column name \"{name}\" conflicts with a system column name"),
        ));
    }
    Ok(())
}

pub(crate) fn catalog_key(oid: u32) -> Vec<u8> {
    let mut k = b"C".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

/// The key that lists a relation's stored rows as to be purged: rows no catalog entry
/// reaches any more but kept until a transaction block ends (a table's rows before the
/// block rewrote it). [`Catalog::open`] purges what is listed.
fn purge_key(oid: u32) -> Vec<u8> {
    let mut k = b"P".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

impl Catalog {
    /// Load the catalog and open every table.
    pub fn open(store: Arc<dyn Store>) -> Result<Catalog> {
        // rows a transaction block kept for its rollback when the server stopped in it
        let mut to_purge = Vec::new();
        store.scan_prefix(b"P", &mut |k, _| {
            to_purge.push(k.to_vec());
            Ok(())
        })?;
        for key in to_purge {
            let oid = key
                .get(1..5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| WeirError::internal("a stored purge key is malformed"))?;
            TableStore::purge(store.as_ref(), oid)?;
            let mut wb = WriteBatch::default();
            wb.delete(key);
            store.commit(wb, Durability::Sync)?;
        }
        let descs: Vec<RelationDesc> = load_json(store.as_ref(), b"C", "catalog entry")?;
        let roles = roles::Roles::load(store.as_ref())?;
        let sql_functions = sql_functions::SqlFunctions::load(store.as_ref())?;
        let extensions = extensions::Extensions::load(store.as_ref())?;
        let user_types = user_types::UserTypes::load(store.as_ref())?;
        let schemas = schemas::Schemas::load(store.as_ref())?;
        let domains = domains::Domains::load(store.as_ref())?;
        let mut by_name = BTreeMap::new();
        let mut next_oid = FIRST_USER_OID;
        for r in roles.by_oid.keys() {
            next_oid = next_oid.max(r + OID_STEP);
        }
        if let Some(o) = user_types.max_oid() {
            next_oid = next_oid.max(o + OID_STEP);
        }
        if let Some(o) = schemas.max_oid() {
            next_oid = next_oid.max(o + OID_STEP);
        }
        if let Some(o) = domains.max_oid() {
            next_oid = next_oid.max(o + OID_STEP);
        }
        if let Some(o) = sql_functions.max_oid() {
            next_oid = next_oid.max(o + OID_STEP);
        }
        for desc in descs {
            next_oid = next_oid.max(desc.oid + OID_STEP);
            // indexes have OIDs of their own, handed out from the same counter
            for i in &desc.indexes {
                next_oid = next_oid.max(i.oid + OID_STEP);
            }
            let table = Self::open_table(&store, &desc)?;
            by_name.insert(desc.name.clone(), Arc::new(Entry { desc, table }));
        }
        let catalog = Catalog {
            store,
            state: RwLock::new(State {
                by_name,
                detached: BTreeMap::new(),
                rewritten: BTreeMap::new(),
                next_oid,
                version: 0,
                roles,
                secrets: BTreeMap::new(),
            }),
            secrets_key: RwLock::new(secrets::KeySlot::default()),
            connections: parking_lot::Mutex::new(BTreeMap::new()),
            sequences: sequences::Sequences::default(),
            sql_functions,
            extensions,
            lock_listing: RwLock::new(None),
            user_types,
            schemas,
            domains,
        };
        catalog.number_sql_functions(|| catalog.reserve_oid());
        Ok(catalog)
    }

    fn open_table(store: &Arc<dyn Store>, desc: &RelationDesc) -> Result<Option<Arc<TableStore>>> {
        if !desc.kind.is_table() {
            return Ok(None);
        }
        let watermark = desc.watermark.as_ref().and_then(|w| {
            desc.columns
                .iter()
                .position(|c| c.name == w.column)
                .map(|i| (i, w.delay_us))
        });
        Ok(Some(Arc::new(TableStore::open(
            desc.oid,
            &desc.name,
            crate::state::table::TableLayout {
                schema: desc.schema(),
                column_types: desc.columns.iter().map(|c| c.ty.clone()).collect(),
                kind: desc.table_kind(),
                watermark,
                indexes: desc.index_specs()?,
                pkey_name: desc.pkey_name(),
            },
            store.clone(),
        )?)))
    }

    /// The server's locks, for `pg_locks`.
    pub fn set_lock_listing(&self, listing: Arc<dyn LockListing>) {
        *self.lock_listing.write() = Some(listing);
    }

    /// The locks sessions hold now (none before the server set its listing).
    pub fn held_locks(&self) -> Vec<HeldLock> {
        self.lock_listing
            .read()
            .as_ref()
            .map(|l| l.held())
            .unwrap_or_default()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn get(&self, name: &str) -> Option<Arc<Entry>> {
        self.state.read().by_name.get(name).cloned()
    }

    /// Whether some relation is of this kind (no copy of the catalog: asked per statement).
    pub fn has_kind(&self, kind: RelationKind) -> bool {
        self.state
            .read()
            .by_name
            .values()
            .any(|e| e.desc.kind == kind)
    }

    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.state.read().by_name.values().cloned().collect()
    }

    pub fn get_by_oid(&self, oid: u32) -> Option<Arc<Entry>> {
        self.state
            .read()
            .by_name
            .values()
            .find(|e| e.desc.oid == oid)
            .cloned()
    }

    /// The table an index (secondary or a primary key's) belongs to, and the index, by the
    /// index's name keyed as a relation's (`idx` of public, `app.idx` of schema app: an
    /// index is in its table's schema, where its name is unique).
    pub fn index_by_name(&self, key: &str) -> Option<(Arc<Entry>, IndexInfo)> {
        let (schema, name) = schemas::split_relation_name(key);
        let st = self.state.read();
        st.by_name
            .values()
            .filter(|e| schemas::split_relation_name(&e.desc.name).0 == schema)
            .find_map(|e| {
                e.desc
                    .all_indexes()
                    .into_iter()
                    .find(|i| i.name == name)
                    .map(|i| (e.clone(), i))
            })
    }

    /// Whether a relation or an index has this name, keyed as a relation's (they share
    /// Postgres' namespace, one per schema).
    pub fn name_in_use(&self, name: &str) -> bool {
        self.get(name).is_some() || self.index_by_name(name).is_some()
    }

    /// An OID for an object that is not a relation of its own entry (an index).
    pub fn reserve_oid(&self) -> u32 {
        let mut st = self.state.write();
        let oid = st.next_oid;
        st.next_oid += OID_STEP;
        oid
    }

    /// Replace a relation's description (ALTER TABLE, renames), under its new name. With
    /// `rows` (a table's rows in a new layout) the rows are written under a fresh OID
    /// first and one commit then switches the catalog to it, so a crash at any point
    /// leaves either the old table or the new one, whole (a crash before the switch leaves
    /// the new OID's rows behind; `create` purges an OID before reusing it). The caller
    /// holds the table's writer lock. `dependents` gives, from the relation's OID after the
    /// change, the new descriptions of the views that read it (their dependencies and
    /// stored queries follow it), written in the same commit. With `in_block` (a
    /// transaction block rewrites the rows) the old rows stay stored until the block ends:
    /// [`finish_rewrite`](Self::finish_rewrite) or [`undo_rewrite`](Self::undo_rewrite).
    pub fn replace_table(
        &self,
        old_name: &str,
        mut desc: RelationDesc,
        rows: Option<Vec<datafusion::arrow::record_batch::RecordBatch>>,
        in_block: bool,
        dependents: impl FnOnce(u32) -> Vec<RelationDesc>,
    ) -> Result<()> {
        let mut st = self.state.write();
        if !st.by_name.contains_key(old_name) {
            return Err(WeirError::undefined_table(old_name));
        }
        if desc.name != old_name && st.by_name.contains_key(&desc.name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", desc.name),
            ));
        }
        let old_oid = desc.oid;
        if let Some(rows) = rows {
            desc.oid = st.next_oid;
            st.next_oid += OID_STEP;
            TableStore::purge(self.store.as_ref(), desc.oid)?;
            if let Some(t) = Self::open_table(&self.store, &desc)? {
                let rows: Vec<_> = rows.into_iter().filter(|b| b.num_rows() > 0).collect();
                if !rows.is_empty()
                    && let Err(e) = t.apply(crate::state::table::Change::Insert(rows))
                {
                    // (a duplicate key after ALTER COLUMN TYPE): the old table stays, the
                    // new rows go
                    drop(t);
                    let _ = TableStore::purge(self.store.as_ref(), desc.oid);
                    return Err(e);
                }
            }
        }
        let mut wb = WriteBatch::default();
        let keep_old = in_block && desc.oid != old_oid;
        if desc.oid != old_oid {
            wb.delete(catalog_key(old_oid));
        }
        if keep_old {
            wb.put(purge_key(old_oid), Vec::new());
        }
        wb.put(catalog_key(desc.oid), roles::json(&desc)?);
        let dependents = dependents(desc.oid);
        for d in &dependents {
            if !st.by_name.contains_key(&d.name) {
                return Err(WeirError::undefined_table(&d.name));
            }
            wb.put(catalog_key(d.oid), roles::json(d)?);
        }
        self.store.commit(wb, Durability::Sync)?;
        for d in dependents {
            let table = st.by_name.get(&d.name).and_then(|e| e.table.clone());
            st.by_name
                .insert(d.name.clone(), Arc::new(Entry { desc: d, table }));
        }
        if keep_old {
            if let Some(old) = st.by_name.get(old_name).cloned() {
                st.rewritten.insert(old_oid, old);
            }
        } else if desc.oid != old_oid
            && let Err(e) = TableStore::purge(self.store.as_ref(), old_oid)
        {
            tracing::warn!(relation = %old_name, error = %e, "could not purge a rewritten table's old rows");
        }
        let table = Self::open_table(&self.store, &desc)?;
        st.by_name.remove(old_name);
        st.by_name
            .insert(desc.name.clone(), Arc::new(Entry { desc, table }));
        st.version += 1;
        Ok(())
    }

    /// Rename relations (`renames`: each one's key now and its description under the new
    /// key; OIDs and storage stay) and store the changed descriptions of others that follow
    /// them (`others`, under their keys), with `extra` (a schema's own entry), in one
    /// commit: a crash leaves all of it or none. What `ALTER ... RENAME TO`, `SET SCHEMA`
    /// and `ALTER SCHEMA ... RENAME` of relations come to.
    pub fn rename_relations(
        &self,
        renames: Vec<(String, RelationDesc)>,
        others: Vec<RelationDesc>,
        mut extra: WriteBatch,
    ) -> Result<()> {
        let mut st = self.state.write();
        for (old, desc) in &renames {
            if !st.by_name.contains_key(old) {
                return Err(WeirError::undefined_table(old));
            }
            let freed = renames.iter().any(|(o, _)| *o == desc.name);
            if desc.name != *old && !freed && st.by_name.contains_key(&desc.name) {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_TABLE,
                    format!("relation \"{}\" already exists", desc.name),
                ));
            }
        }
        for d in &others {
            if !st.by_name.contains_key(&d.name) {
                return Err(WeirError::undefined_table(&d.name));
            }
        }
        for d in renames.iter().map(|(_, d)| d).chain(&others) {
            extra.put(catalog_key(d.oid), roles::json(d)?);
        }
        self.store.commit(extra, Durability::Sync)?;
        let moved: Vec<(Option<Arc<Entry>>, RelationDesc)> = renames
            .into_iter()
            .map(|(old, desc)| (st.by_name.remove(&old), desc))
            .collect();
        for (was, desc) in moved {
            let table = was.and_then(|e| e.table.clone());
            if let Some(t) = &table {
                t.set_name(&desc.name);
            }
            st.by_name
                .insert(desc.name.clone(), Arc::new(Entry { desc, table }));
        }
        for d in others {
            let table = st.by_name.get(&d.name).and_then(|e| e.table.clone());
            st.by_name
                .insert(d.name.clone(), Arc::new(Entry { desc: d, table }));
        }
        st.version += 1;
        Ok(())
    }

    pub fn dependents(&self, oid: u32) -> Vec<Arc<Entry>> {
        self.state
            .read()
            .by_name
            .values()
            .filter(|e| e.desc.dependencies.contains(&oid))
            .cloned()
            .collect()
    }

    pub fn version(&self) -> u64 {
        self.state.read().version
    }

    /// A DDL that changed no relation (a type) still changes what planning sees.
    pub(crate) fn bump_version(&self) {
        self.state.write().version += 1;
    }

    /// Create a relation: assigns its OID, persists it (fsynced) and opens its storage.
    /// `build` receives the OID and returns the description to store.
    pub fn create(
        &self,
        name: &str,
        if_not_exists: bool,
        build: impl FnOnce(u32) -> Result<RelationDesc>,
    ) -> Result<bool> {
        self.check_schema_of(name)?;
        let mut st = self.state.write();
        // (an index of a table of the same schema: they share its namespace)
        let (schema, bare) = schemas::split_relation_name(name);
        let index_named = st.by_name.values().any(|e| {
            schemas::split_relation_name(&e.desc.name).0 == schema
                && e.desc.all_indexes().iter().any(|i| i.name == bare)
        });
        if st.by_name.contains_key(name) || index_named {
            if if_not_exists {
                return Ok(false);
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{name}\" already exists"),
            ));
        }
        let oid = st.next_oid;
        let desc = build(oid)?;
        // a view (materialized, plain) or a sink outlives the session of a temporary table
        if !desc.kind.is_table()
            && let Some(t) = st
                .by_name
                .values()
                .find(|e| e.desc.is_temporary() && desc.dependencies.contains(&e.desc.oid))
        {
            if desc.kind == RelationKind::MaterializedView {
                return Err(WeirError::not_supported(
                    "materialized views must not use temporary tables or views",
                ));
            }
            return Err(WeirError::not_supported(format!(
                "{} \"{name}\" cannot read temporary table \"{}\": it would outlive the session",
                desc.kind.noun(),
                t.desc.name
            )));
        }
        // a relation dropped under this oid may have left data (a crash before its purge)
        TableStore::purge(self.store.as_ref(), oid)?;
        let mut wb = WriteBatch::default();
        wb.put(
            catalog_key(oid),
            serde_json::to_vec(&desc).map_err(|e| WeirError::internal(e.to_string()))?,
        );
        self.store.commit(wb, Durability::Sync)?;
        let table = Self::open_table(&self.store, &desc)?;
        st.next_oid = oid + OID_STEP;
        st.version += 1;
        st.by_name
            .insert(name.to_owned(), Arc::new(Entry { desc, table }));
        Ok(true)
    }

    /// Drop a relation in a transaction block: it is no longer seen, but its catalog entry
    /// and data stay until [`finish_drop`](Self::finish_drop) (the block commits) or
    /// [`reattach_relation`](Self::reattach_relation) (it rolls back). False when it did
    /// not exist.
    pub fn detach_relation(&self, name: &str) -> bool {
        let mut st = self.state.write();
        let Some(entry) = st.by_name.remove(name) else {
            return false;
        };
        st.detached.insert(entry.desc.oid, entry);
        st.version += 1;
        true
    }

    /// Whether a transaction block dropped this relation and has not ended yet.
    pub fn is_detached(&self, oid: u32) -> bool {
        self.state.read().detached.contains_key(&oid)
    }

    /// Bring back a relation a transaction block dropped (its ROLLBACK). Fails when a
    /// relation of its name was made meanwhile (by another session); it stays detached.
    pub fn reattach_relation(&self, oid: u32) -> Result<()> {
        let mut st = self.state.write();
        let Some(entry) = st.detached.get(&oid).cloned() else {
            return Ok(());
        };
        if st.by_name.contains_key(&entry.desc.name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!(
                    "cannot restore the dropped relation \"{}\": another of that name was made meanwhile",
                    entry.desc.name
                ),
            ));
        }
        st.detached.remove(&oid);
        st.by_name.insert(entry.desc.name.clone(), entry);
        st.version += 1;
        Ok(())
    }

    /// Whether a transaction block rewrote the table of this (old) oid and has not ended.
    pub fn is_rewritten(&self, oid: u32) -> bool {
        self.state.read().rewritten.contains_key(&oid)
    }

    /// A block that rewrote a table committed: the table's old rows go.
    pub fn finish_rewrite(&self, old_oid: u32) -> Result<()> {
        let Some(entry) = self.state.write().rewritten.remove(&old_oid) else {
            return Ok(());
        };
        TableStore::purge(self.store.as_ref(), old_oid)?;
        let mut wb = WriteBatch::default();
        wb.delete(purge_key(old_oid));
        self.store.commit(wb, Durability::Sync)?;
        tracing::debug!(relation = %entry.desc.name, "a rewritten table's old rows purged");
        Ok(())
    }

    /// A block that rewrote a table rolled back: the table as it was before (its old
    /// entry, its rows still stored) takes the place of the rewritten one (`new_oid`),
    /// and the relations the rewrite changed (`others`: views following the table,
    /// tables whose foreign keys named it) get their descriptions from before, in one
    /// commit; then the rewritten rows are purged. The caller holds the table's writer
    /// lock and has stopped the materialized views over it. Fails, keeping the rewrite,
    /// when the rewritten table is gone or another relation took the old name (another
    /// session, meanwhile).
    pub fn undo_rewrite(&self, old_oid: u32, new_oid: u32, others: &[RelationDesc]) -> Result<()> {
        let mut st = self.state.write();
        let Some(old) = st.rewritten.get(&old_oid).cloned() else {
            return Ok(());
        };
        let Some(new_name) = st
            .by_name
            .values()
            .find(|e| e.desc.oid == new_oid)
            .map(|e| e.desc.name.clone())
        else {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_TABLE,
                format!(
                    "cannot restore table \"{}\": the rewritten table is gone",
                    old.desc.name
                ),
            ));
        };
        if new_name != old.desc.name && st.by_name.contains_key(&old.desc.name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!(
                    "cannot restore table \"{}\": another relation of that name was made meanwhile",
                    old.desc.name
                ),
            ));
        }
        let mut wb = WriteBatch::default();
        wb.delete(catalog_key(new_oid));
        wb.put(catalog_key(old_oid), roles::json(&old.desc)?);
        wb.delete(purge_key(old_oid));
        wb.put(purge_key(new_oid), Vec::new());
        let others: Vec<&RelationDesc> = others
            .iter()
            .filter(|d| st.by_name.values().any(|e| e.desc.oid == d.oid))
            .collect();
        for d in &others {
            wb.put(catalog_key(d.oid), roles::json(d)?);
        }
        self.store.commit(wb, Durability::Sync)?;
        st.rewritten.remove(&old_oid);
        st.by_name.remove(&new_name);
        for d in others {
            let current = st
                .by_name
                .iter()
                .find(|(_, e)| e.desc.oid == d.oid)
                .map(|(n, e)| (n.clone(), e.table.clone()));
            if let Some((name, table)) = current {
                st.by_name.remove(&name);
                st.by_name.insert(
                    d.name.clone(),
                    Arc::new(Entry {
                        desc: d.clone(),
                        table,
                    }),
                );
            }
        }
        st.by_name.insert(old.desc.name.clone(), old);
        st.version += 1;
        drop(st);
        TableStore::purge(self.store.as_ref(), new_oid)?;
        let mut wb = WriteBatch::default();
        wb.delete(purge_key(new_oid));
        self.store.commit(wb, Durability::Sync)?;
        Ok(())
    }

    /// Finish dropping a relation a transaction block dropped (its COMMIT): as
    /// [`drop_relation`](Self::drop_relation), and a sequence's counter goes too.
    pub fn finish_drop(&self, oid: u32) -> Result<()> {
        let Some(entry) = self.state.read().detached.get(&oid).cloned() else {
            return Ok(());
        };
        let mut wb = WriteBatch::default();
        wb.delete(catalog_key(oid));
        self.store.commit(wb, Durability::Sync)?;
        self.state.write().detached.remove(&oid);
        if entry.desc.kind == RelationKind::Sequence {
            self.drop_sequence_state(oid)?;
        }
        if let Err(e) = TableStore::purge(self.store.as_ref(), oid) {
            tracing::warn!(relation = %entry.desc.name, error = %e, "could not purge a dropped relation's data");
        }
        Ok(())
    }

    /// Drop a relation: its catalog entry goes in one commit, then its data is purged in
    /// chunks (a crash in between leaves data no relation reaches, purged before the oid
    /// is used again). Returns false when it did not exist.
    pub fn drop_relation(&self, name: &str) -> Result<bool> {
        let mut st = self.state.write();
        let Some(entry) = st.by_name.get(name).cloned() else {
            return Ok(false);
        };
        let mut wb = WriteBatch::default();
        wb.delete(catalog_key(entry.desc.oid));
        self.store.commit(wb, Durability::Sync)?;
        st.by_name.remove(name);
        st.version += 1;
        drop(st);
        if let Err(e) = TableStore::purge(self.store.as_ref(), entry.desc.oid) {
            tracing::warn!(relation = %name, error = %e, "could not purge a dropped relation's data");
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::store::keys_with_prefix;
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::arrow::record_batch::RecordBatch;

    fn column(name: &str, ty: SqlType) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            ty,
            nullable: true,
        }
    }

    /// A table `t (id int, a text)` with two rows, and its rewrite without `a`.
    fn table_and_rewrite(c: &Catalog) -> (RelationDesc, Vec<RecordBatch>) {
        let json = serde_json::json!({
            "oid": 0, "name": "t", "kind": "Table", "primary_key": [], "watermark": null,
            "definition": "", "columns": [],
        });
        let mut desc: RelationDesc = serde_json::from_value(json).expect("desc");
        desc.columns = vec![column("id", SqlType::Int4), column("a", SqlType::Text)];
        c.create("t", false, |oid| {
            let mut d = desc.clone();
            d.oid = oid;
            Ok(d)
        })
        .expect("create");
        let entry = c.get("t").expect("t");
        let rows = RecordBatch::try_new(
            entry.desc.schema(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["x", "y"])),
            ],
        )
        .expect("rows");
        let table = entry.table.clone().expect("storage");
        table
            .apply(crate::state::table::Change::Insert(vec![rows]))
            .expect("insert");
        let mut narrow = entry.desc.clone();
        narrow.columns.truncate(1);
        let rows = RecordBatch::try_new(
            narrow.schema(),
            vec![Arc::new(Int32Array::from(vec![1, 2]))],
        )
        .expect("rows");
        (narrow, vec![rows])
    }

    fn stored(store: &dyn Store, oid: u32) -> bool {
        !keys_with_prefix(store, &crate::state::table::table_prefix(oid))
            .expect("keys")
            .is_empty()
    }

    /// A table rewritten in a transaction block keeps its old rows until the block ends:
    /// the rollback brings the old table back and purges the new rows, the commit purges
    /// the old rows, and a catalog opened after a stop in the block purges them too.
    #[test]
    fn a_rewrite_in_a_block_keeps_the_old_rows_until_its_end() {
        let dir = tempfile::tempdir().expect("temp dir");
        let open = || {
            let store: Arc<dyn Store> =
                Arc::new(crate::state::fjall_store::FjallStore::open(dir.path()).expect("store"));
            (Catalog::open(store.clone()).expect("catalog"), store)
        };
        let (c, store) = open();
        let (narrow, rows) = table_and_rewrite(&c);
        let old = c.get("t").expect("t").desc.oid;
        // rolled back
        c.replace_table("t", narrow.clone(), Some(rows.clone()), true, |_| vec![])
            .expect("rewrite");
        let new = c.get("t").expect("t").desc.oid;
        assert_ne!(old, new);
        assert!(c.is_rewritten(old) && stored(store.as_ref(), old));
        c.undo_rewrite(old, new, &[]).expect("undo");
        let back = c.get("t").expect("t back");
        assert_eq!((back.desc.oid, back.desc.columns.len()), (old, 2));
        assert_eq!(back.table.as_ref().expect("storage").row_count(), 2);
        drop(back);
        assert!(!c.is_rewritten(old) && !stored(store.as_ref(), new));
        // committed
        c.replace_table("t", narrow.clone(), Some(rows.clone()), true, |_| vec![])
            .expect("rewrite");
        let new = c.get("t").expect("t").desc.oid;
        c.finish_rewrite(old).expect("commit");
        assert!(!stored(store.as_ref(), old) && stored(store.as_ref(), new));
        // stopped inside the block: the rewrite stays, the old rows go at the next open
        let (mut narrower, rows) = (narrow.clone(), rows);
        narrower.oid = new;
        narrower.name = "t".into();
        narrower.columns[0].name = "k".into();
        let rows = vec![
            RecordBatch::try_new(narrower.schema(), rows[0].columns().to_vec()).expect("rows"),
        ];
        c.replace_table("t", narrower, Some(rows), true, |_| vec![])
            .expect("rewrite");
        let newest = c.get("t").expect("t").desc.oid;
        assert!(stored(store.as_ref(), new));
        drop((c, store));
        let (c, store) = open();
        let t = c.get("t").expect("t");
        assert_eq!((t.desc.oid, t.desc.columns[0].name.as_str()), (newest, "k"));
        assert!(!stored(store.as_ref(), new) && stored(store.as_ref(), newest));
        assert!(
            keys_with_prefix(store.as_ref(), b"P")
                .expect("keys")
                .is_empty()
        );
    }
}
