//! `information_schema`: the SQL-standard views BI tools and editors read (Grafana's table
//! and column pickers, Metabase, DBeaver), generated from the catalog with Postgres' column
//! names and values (`data_type` = `integer`, `is_nullable` = `YES`/`NO`, 1-based
//! `ordinal_position`).
//!
//! One deliberate difference: materialized views are listed in `tables` (as `VIEW`) and
//! `views`, because they are what Weir users query; Postgres lists them in neither.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result as DfResult;

use crate::catalog::pg_catalog::{GeneratedSchema, V, build_table, system_relations};
use crate::catalog::schemas::split_relation_name;
use crate::catalog::{Catalog, DATABASE_NAME, Entry, RelationKind};
use crate::sql::types::SqlType as T;

const TABLES: &[&str] = &[
    "schemata",
    "tables",
    "columns",
    "views",
    "sequences",
    "table_constraints",
    "key_column_usage",
    "referential_constraints",
    "constraint_column_usage",
    "check_constraints",
    "domains",
    "domain_constraints",
    "routines",
    "parameters",
];

/// The `information_schema` schema provider.
pub fn schema(catalog: Arc<Catalog>) -> GeneratedSchema {
    GeneratedSchema::new("information_schema", catalog, TABLES, build)
}

/// The relations clients see as tables and views (sinks are not relations; sequences are
/// not in `information_schema.tables` or `columns`, as in Postgres).
fn relations(catalog: &Catalog) -> Vec<Arc<Entry>> {
    let mut v: Vec<_> = catalog
        .entries()
        .into_iter()
        .filter(|e| !matches!(e.desc.kind, RelationKind::Sink | RelationKind::Sequence))
        .collect();
    v.sort_by(|a, b| a.desc.name.cmp(&b.desc.name));
    v
}

fn yes_no(b: bool) -> V {
    if b { "YES".into() } else { "NO".into() }
}

/// A relation's primary key and UNIQUE constraints: (name, constraint_type, columns).
fn key_constraints(d: &crate::catalog::RelationDesc) -> Vec<(String, &'static str, Vec<String>)> {
    let pk =
        (!d.primary_key.is_empty()).then(|| (d.pkey_name(), "PRIMARY KEY", d.primary_key.clone()));
    pk.into_iter()
        .chain(
            d.indexes
                .iter()
                .filter(|i| i.constraint)
                .map(|i| (i.name.clone(), "UNIQUE", i.columns.clone())),
        )
        .collect()
}

/// A foreign key, its table, and the referenced key constraint's name and columns.
type ForeignConstraint<'a> = (
    &'a crate::catalog::RelationDesc,
    &'a crate::catalog::ForeignKeyDesc,
    Option<(String, Vec<String>)>,
);

/// Each foreign key of the relations with the key constraint it references (its name and
/// columns: the referenced table's primary key or unique index over those columns).
fn foreign_constraints(
    rels: &[std::sync::Arc<crate::catalog::Entry>],
) -> Vec<ForeignConstraint<'_>> {
    let mut out = Vec::new();
    for e in rels {
        for fk in &e.desc.foreign_keys {
            let target = rels
                .iter()
                .find(|p| p.desc.name == fk.ref_table)
                .and_then(|p| p.desc.unique_index_over(&fk.ref_columns))
                .map(|i| (i.name, i.columns));
            out.push((&e.desc, fk, target));
        }
    }
    out
}

/// `data_type` as the standard spells it, and the `udt_name` (Postgres' type name).
fn data_type(t: &T) -> (String, String) {
    let udt = match t {
        T::Bool => "bool",
        T::Int2 => "int2",
        T::Int4 => "int4",
        T::Int8 => "int8",
        T::Float4 => "float4",
        T::Float8 => "float8",
        T::Numeric(_) => "numeric",
        T::Text => "text",
        T::Varchar(_) => "varchar",
        T::Bpchar(_) => "bpchar",
        T::Date => "date",
        T::Time(_) => "time",
        T::Timestamp(_) => "timestamp",
        T::TimestampTz(_) => "timestamptz",
        T::Interval => "interval",
        T::Bytea => "bytea",
        T::Jsonb => "jsonb",
        T::Json => "json",
        T::Uuid => "uuid",
        T::Inet => "inet",
        T::Cidr => "cidr",
        T::Oid => "oid",
        T::Name => "name",
        T::InternalChar => "char",
        T::Void => "void",
        T::Array(inner) => return ("ARRAY".into(), format!("_{}", data_type(inner).1)),
        T::Vector(_) => return ("ARRAY".into(), t.display_name()),
        // (a type of a user schema is keyed `app.mood`: its udt_name is `mood`)
        T::Enum(e) => return ("USER-DEFINED".into(), split_relation_name(&e.name).1.into()),
    };
    let dt = match t {
        T::Varchar(_) => "character varying".to_owned(),
        T::Bpchar(_) => "character".to_owned(),
        T::Numeric(_) => "numeric".to_owned(),
        T::InternalChar => "\"char\"".to_owned(),
        // the precision is in datetime_precision
        T::Time(_) => T::Time(None).display_name(),
        T::Timestamp(_) => T::Timestamp(None).display_name(),
        T::TimestampTz(_) => T::TimestampTz(None).display_name(),
        other => other.display_name(),
    };
    (dt, udt.to_owned())
}

/// Positions in [`column_row`]'s row of `information_schema.columns` (Postgres' columns, in
/// its order: [`COLUMNS_COLUMNS`]).
const COLUMN_DEFAULT: usize = 5;
const DOMAIN_NAME: usize = 24;
const UDT_SCHEMA: usize = 26;
const DTD_IDENTIFIER: usize = 32;
const IS_IDENTITY: usize = 34;
const IDENTITY_GENERATION: usize = 35;
const IS_GENERATED: usize = 41;
const GENERATION_EXPRESSION: usize = 42;
const IS_UPDATABLE: usize = 43;

/// `information_schema.domains`' columns, as PostgreSQL 15 has them.
const DOMAINS_COLUMNS: &[(&str, T)] = &[
    ("domain_catalog", T::Name),
    ("domain_schema", T::Name),
    ("domain_name", T::Name),
    ("data_type", T::Text),
    ("character_maximum_length", T::Int4),
    ("character_octet_length", T::Int4),
    ("character_set_catalog", T::Name),
    ("character_set_schema", T::Name),
    ("character_set_name", T::Name),
    ("collation_catalog", T::Name),
    ("collation_schema", T::Name),
    ("collation_name", T::Name),
    ("numeric_precision", T::Int4),
    ("numeric_precision_radix", T::Int4),
    ("numeric_scale", T::Int4),
    ("datetime_precision", T::Int4),
    ("interval_type", T::Text),
    ("interval_precision", T::Int4),
    ("domain_default", T::Text),
    ("udt_catalog", T::Name),
    ("udt_schema", T::Name),
    ("udt_name", T::Name),
    ("scope_catalog", T::Name),
    ("scope_schema", T::Name),
    ("scope_name", T::Name),
    ("maximum_cardinality", T::Int4),
    ("dtd_identifier", T::Name),
];

/// `information_schema.columns`' columns, as PostgreSQL 15 has them.
const COLUMNS_COLUMNS: &[(&str, T)] = &[
    ("table_catalog", T::Name),
    ("table_schema", T::Name),
    ("table_name", T::Name),
    ("column_name", T::Name),
    ("ordinal_position", T::Int4),
    ("column_default", T::Text),
    ("is_nullable", T::Text),
    ("data_type", T::Text),
    ("character_maximum_length", T::Int4),
    ("character_octet_length", T::Int4),
    ("numeric_precision", T::Int4),
    ("numeric_precision_radix", T::Int4),
    ("numeric_scale", T::Int4),
    ("datetime_precision", T::Int4),
    ("interval_type", T::Text),
    ("interval_precision", T::Int4),
    ("character_set_catalog", T::Name),
    ("character_set_schema", T::Name),
    ("character_set_name", T::Name),
    ("collation_catalog", T::Name),
    ("collation_schema", T::Name),
    ("collation_name", T::Name),
    ("domain_catalog", T::Name),
    ("domain_schema", T::Name),
    ("domain_name", T::Name),
    ("udt_catalog", T::Name),
    ("udt_schema", T::Name),
    ("udt_name", T::Name),
    ("scope_catalog", T::Name),
    ("scope_schema", T::Name),
    ("scope_name", T::Name),
    ("maximum_cardinality", T::Int4),
    ("dtd_identifier", T::Name),
    ("is_self_referencing", T::Text),
    ("is_identity", T::Text),
    ("identity_generation", T::Text),
    ("identity_start", T::Text),
    ("identity_increment", T::Text),
    ("identity_maximum", T::Text),
    ("identity_minimum", T::Text),
    ("identity_cycle", T::Text),
    ("is_generated", T::Text),
    ("generation_expression", T::Text),
    ("is_updatable", T::Text),
];

/// A row of `information_schema.columns` for a column of a type: no default, not an
/// identity, not generated, not updatable (the caller sets those).
fn column_row(
    schema: V,
    table: &str,
    column: &str,
    position: usize,
    ty: &T,
    nullable: bool,
) -> Vec<V> {
    let (dt, udt) = data_type(ty);
    let (char_len, precision, radix, scale, dt_precision) = match ty {
        T::Varchar(n) | T::Bpchar(n) => (n.map(|n| n as i64), None, None, None, None),
        T::Int2 => (None, Some(16), Some(2), Some(0), None),
        T::Int4 => (None, Some(32), Some(2), Some(0), None),
        T::Int8 => (None, Some(64), Some(2), Some(0), None),
        T::Float4 => (None, Some(24), Some(2), None, None),
        T::Float8 => (None, Some(53), Some(2), None, None),
        T::Numeric(Some((p, s))) => (None, Some(*p as i64), Some(10), Some(*s as i64), None),
        T::Numeric(None) => (None, None, Some(10), None, None),
        T::Timestamp(p) | T::TimestampTz(p) | T::Time(p) => {
            (None, None, None, None, Some(p.unwrap_or(6) as i64))
        }
        T::Interval => (None, None, None, None, Some(6)),
        T::Date => (None, None, None, None, Some(0)),
        _ => (None, None, None, None, None),
    };
    let opt = |v: Option<i64>| v.map(V::I).unwrap_or(V::Null);
    // (the schema of an enum type, or of an array's element enum)
    let user_type = match ty {
        T::Enum(e) => Some(split_relation_name(&e.name).0),
        T::Array(inner) => match inner.as_ref() {
            T::Enum(e) => Some(split_relation_name(&e.name).0),
            _ => None,
        },
        _ => None,
    };
    let row = vec![
        V::from(DATABASE_NAME),
        schema,
        table.into(),
        column.into(),
        V::I(position as i64),
        V::Null,
        yes_no(nullable),
        dt.into(),
        opt(char_len),
        // (text of unlimited length: Postgres' 1 GB in bytes)
        opt(char_len.map(|n| n * 4).or(
            matches!(ty, T::Text | T::Varchar(None) | T::Bpchar(None)).then_some(1_073_741_824)
        )),
        opt(precision),
        opt(radix),
        opt(scale),
        opt(dt_precision),
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
        V::from(DATABASE_NAME),
        user_type.unwrap_or("pg_catalog").into(),
        udt.into(),
        V::Null,
        V::Null,
        V::Null,
        V::Null,
        V::from(position.to_string()),
        "NO".into(),
        "NO".into(),
        V::Null,
        V::Null,
        V::Null,
        V::Null,
        V::Null,
        "NO".into(),
        "NEVER".into(),
        V::Null,
        "NO".into(),
    ];
    debug_assert_eq!(row.len(), COLUMNS_COLUMNS.len());
    debug_assert_eq!(COLUMNS_COLUMNS[UDT_SCHEMA].0, "udt_schema");
    debug_assert_eq!(COLUMNS_COLUMNS[DOMAIN_NAME].0, "domain_name");
    debug_assert_eq!(COLUMNS_COLUMNS[DTD_IDENTIFIER].0, "dtd_identifier");
    row
}

fn table_type(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::MaterializedView | RelationKind::View => "VIEW",
        _ => "BASE TABLE",
    }
}

fn build(name: &str, catalog: &Catalog) -> DfResult<Option<RecordBatch>> {
    let rels = relations(catalog);
    let db = || V::from(DATABASE_NAME);
    // a relation's schema and bare name (`catalog/schemas.rs`)
    let schema_of = |key: &str| V::from(split_relation_name(key).0);
    let bare = |key: &str| V::from(split_relation_name(key).1);
    Ok(Some(match name {
        "schemata" => build_table(
            &[
                ("catalog_name", T::Name),
                ("schema_name", T::Name),
                ("schema_owner", T::Name),
                ("default_character_set_catalog", T::Name),
                ("default_character_set_schema", T::Name),
                ("default_character_set_name", T::Name),
                ("sql_path", T::Text),
            ],
            ["information_schema", "pg_catalog", "public"]
                .iter()
                .map(|s| ((*s).to_owned(), catalog.superuser_name()))
                .chain(catalog.user_schemas().into_iter().map(|s| {
                    let owner = catalog.role_name(s.owner).unwrap_or_default();
                    (s.name, owner)
                }))
                .map(|(s, owner)| {
                    vec![
                        db(),
                        s.into(),
                        owner.into(),
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                    ]
                })
                .collect(),
        )?,
        "tables" => build_table(
            &[
                ("table_catalog", T::Name),
                ("table_schema", T::Name),
                ("table_name", T::Name),
                ("table_type", T::Text),
                ("self_referencing_column_name", T::Name),
                ("reference_generation", T::Text),
                ("user_defined_type_catalog", T::Name),
                ("user_defined_type_schema", T::Name),
                ("user_defined_type_name", T::Name),
                ("is_insertable_into", T::Text),
                ("is_typed", T::Text),
                ("commit_action", T::Text),
            ],
            rels.iter()
                .map(|e| {
                    let d = &e.desc;
                    vec![
                        db(),
                        schema_of(&d.name),
                        bare(&d.name),
                        table_type(d.kind).into(),
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        yes_no(e.table.is_some()),
                        "NO".into(),
                        V::Null,
                    ]
                })
                .chain(system_relations().map(|(r, _)| {
                    let table = r.kind == "r";
                    vec![
                        db(),
                        r.schema_name().into(),
                        r.name.into(),
                        if table { "BASE TABLE" } else { "VIEW" }.into(),
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        V::Null,
                        yes_no(table),
                        "NO".into(),
                        V::Null,
                    ]
                }))
                .collect(),
        )?,
        "columns" => {
            let sequences = catalog.sequences();
            let mut rows = Vec::new();
            for e in &rels {
                let d = &e.desc;
                for (i, c) in d.columns.iter().enumerate() {
                    let nullable = c.nullable && !d.primary_key.contains(&c.name);
                    let mut row = column_row(
                        schema_of(&d.name),
                        split_relation_name(&d.name).1,
                        &c.name,
                        i + 1,
                        &c.ty,
                        nullable,
                    );
                    row[COLUMN_DEFAULT] = d.column_default(&c.name).map(V::from).unwrap_or(V::Null);
                    // a domain's column names its domain
                    if let Some(dom) = catalog
                        .column_type_oid(d, &c.name)
                        .and_then(|o| catalog.domain_by_oid(o))
                    {
                        row[DOMAIN_NAME - 2] = db();
                        row[DOMAIN_NAME - 1] = schema_of(&dom.name);
                        row[DOMAIN_NAME] = bare(&dom.name);
                    }
                    if let Some(kind) = d.identity(&c.name) {
                        row[IS_IDENTITY] = "YES".into();
                        row[IDENTITY_GENERATION] =
                            if kind == 'a' { "ALWAYS" } else { "BY DEFAULT" }.into();
                        // start, increment, maximum, minimum, cycle: its sequence's
                        if let Some(seq) = d.owned_sequence(&c.name)
                            && let Some((_, spec)) =
                                sequences.iter().find(|(e, _)| e.desc.name == seq)
                        {
                            row[IDENTITY_GENERATION + 1] = spec.start.to_string().into();
                            row[IDENTITY_GENERATION + 2] = spec.increment.to_string().into();
                            row[IDENTITY_GENERATION + 3] = spec.max.to_string().into();
                            row[IDENTITY_GENERATION + 4] = spec.min.to_string().into();
                            row[IDENTITY_GENERATION + 5] = yes_no(spec.cycle);
                        }
                    }
                    if let Some(g) = d.generation_expr(&c.name) {
                        row[IS_GENERATED] = "ALWAYS".into();
                        row[GENERATION_EXPRESSION] =
                            crate::sql::parser::shown_expr_deparsed(g).into();
                    }
                    row[IS_UPDATABLE] = yes_no(e.table.is_some());
                    rows.push(row);
                }
            }
            for (r, schema) in system_relations() {
                for (i, f) in schema.iter().flat_map(|s| s.fields().iter()).enumerate() {
                    let ty = crate::sql::types::field_sql_type(f).unwrap_or(T::Text);
                    let schema = r.schema_name().into();
                    let mut row = column_row(schema, r.name, f.name(), i + 1, &ty, true);
                    row[IS_UPDATABLE] = yes_no(r.kind == "r");
                    rows.push(row);
                }
            }
            build_table(COLUMNS_COLUMNS, rows)?
        }
        "views" => build_table(
            &[
                ("table_catalog", T::Name),
                ("table_schema", T::Name),
                ("table_name", T::Name),
                ("view_definition", T::Text),
                ("check_option", T::Text),
                ("is_updatable", T::Text),
                ("is_insertable_into", T::Text),
                ("is_trigger_updatable", T::Text),
                ("is_trigger_deletable", T::Text),
                ("is_trigger_insertable_into", T::Text),
            ],
            // (plain views, as in Postgres, and the materialized views, which are Weir's
            // views: a BI tool listing views finds them)
            rels.iter()
                .filter(|e| {
                    matches!(
                        e.desc.kind,
                        RelationKind::MaterializedView | RelationKind::View
                    )
                })
                .map(|e| {
                    vec![
                        db(),
                        schema_of(&e.desc.name),
                        bare(&e.desc.name),
                        e.desc
                            .query
                            .clone()
                            .map(|q| format!(" {q};"))
                            .map(V::S)
                            .unwrap_or(V::Null),
                        "NONE".into(),
                        "NO".into(),
                        "NO".into(),
                        "NO".into(),
                        "NO".into(),
                        "NO".into(),
                    ]
                })
                .collect(),
        )?,
        "sequences" => build_table(
            &[
                ("sequence_catalog", T::Name),
                ("sequence_schema", T::Name),
                ("sequence_name", T::Name),
                ("data_type", T::Text),
                ("numeric_precision", T::Int4),
                ("numeric_precision_radix", T::Int4),
                ("numeric_scale", T::Int4),
                ("start_value", T::Text),
                ("minimum_value", T::Text),
                ("maximum_value", T::Text),
                ("increment", T::Text),
                ("cycle_option", T::Text),
            ],
            {
                catalog
                    .sequences()
                    .into_iter()
                    .map(|(e, s)| {
                        let t = s.type_name();
                        vec![
                            db(),
                            schema_of(&e.desc.name),
                            bare(&e.desc.name),
                            t.into(),
                            V::I(if t == "integer" { 32 } else { 64 }),
                            V::I(2),
                            V::I(0),
                            s.start.to_string().into(),
                            s.min.to_string().into(),
                            s.max.to_string().into(),
                            s.increment.to_string().into(),
                            yes_no(s.cycle),
                        ]
                    })
                    .collect()
            },
        )?,
        "table_constraints" => build_table(
            &[
                ("constraint_catalog", T::Name),
                ("constraint_schema", T::Name),
                ("constraint_name", T::Name),
                ("table_catalog", T::Name),
                ("table_schema", T::Name),
                ("table_name", T::Name),
                ("constraint_type", T::Text),
                ("is_deferrable", T::Text),
                ("initially_deferred", T::Text),
                ("enforced", T::Text),
            ],
            rels.iter()
                .flat_map(|e| {
                    let checks = e
                        .desc
                        .checks
                        .iter()
                        .map(|(n, _)| (n.clone(), "CHECK"))
                        .chain(
                            not_null_checks(&e.desc)
                                .into_iter()
                                .map(|(n, _)| (n, "CHECK")),
                        );
                    let foreign = e.desc.foreign_keys.iter().map(|f| {
                        (
                            f.name.clone(),
                            "FOREIGN KEY",
                            (f.deferrable, f.initially_deferred),
                        )
                    });
                    key_constraints(&e.desc)
                        .into_iter()
                        .map(|(n, kind, _)| (n, kind, (false, false)))
                        .chain(checks.map(|(n, kind)| (n, kind, (false, false))))
                        .chain(foreign)
                        .map(|(n, kind, (deferrable, deferred))| {
                            vec![
                                db(),
                                schema_of(&e.desc.name),
                                n.into(),
                                db(),
                                schema_of(&e.desc.name),
                                bare(&e.desc.name),
                                kind.into(),
                                yes_no(deferrable),
                                yes_no(deferred),
                                "YES".into(),
                            ]
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        )?,
        "key_column_usage" | "constraint_column_usage" => {
            let mut rows = Vec::new();
            for e in rels.iter() {
                for (constraint, k, col) in
                    key_constraints(&e.desc)
                        .into_iter()
                        .flat_map(|(n, _, cols)| {
                            cols.into_iter()
                                .enumerate()
                                .map(move |(k, c)| (n.clone(), k, c))
                        })
                {
                    let mut row = vec![
                        db(),
                        schema_of(&e.desc.name),
                        constraint.into(),
                        db(),
                        schema_of(&e.desc.name),
                        bare(&e.desc.name),
                        col.clone().into(),
                    ];
                    if name == "key_column_usage" {
                        row.push(V::I(k as i64 + 1));
                        row.push(V::Null);
                    }
                    rows.push(row);
                }
            }
            // a foreign key: its own columns (key_column_usage, with their place in the
            // referenced key) or the referenced ones (constraint_column_usage)
            for (d, fk, target) in foreign_constraints(&rels) {
                for (k, (col, rcol)) in fk.columns.iter().zip(&fk.ref_columns).enumerate() {
                    let (table, column) = match name {
                        "key_column_usage" => (&d.name, col),
                        _ => (&fk.ref_table, rcol),
                    };
                    let mut row = vec![
                        db(),
                        schema_of(&d.name),
                        fk.name.clone().into(),
                        db(),
                        schema_of(table),
                        bare(table),
                        column.clone().into(),
                    ];
                    if name == "key_column_usage" {
                        row.push(V::I(k as i64 + 1));
                        row.push(
                            target
                                .as_ref()
                                .and_then(|(_, cols)| cols.iter().position(|c| c == rcol))
                                .map(|p| V::I(p as i64 + 1))
                                .unwrap_or(V::Null),
                        );
                    }
                    rows.push(row);
                }
            }
            let mut cols = vec![
                ("constraint_catalog", T::Name),
                ("constraint_schema", T::Name),
                ("constraint_name", T::Name),
                ("table_catalog", T::Name),
                ("table_schema", T::Name),
                ("table_name", T::Name),
                ("column_name", T::Name),
            ];
            if name == "key_column_usage" {
                cols.push(("ordinal_position", T::Int4));
                cols.push(("position_in_unique_constraint", T::Int4));
            }
            build_table(&cols, rows)?
        }
        "referential_constraints" => build_table(
            &[
                ("constraint_catalog", T::Name),
                ("constraint_schema", T::Name),
                ("constraint_name", T::Name),
                ("unique_constraint_catalog", T::Name),
                ("unique_constraint_schema", T::Name),
                ("unique_constraint_name", T::Name),
                ("match_option", T::Text),
                ("update_rule", T::Text),
                ("delete_rule", T::Text),
            ],
            foreign_constraints(&rels)
                .into_iter()
                .map(|(d, fk, target)| {
                    vec![
                        db(),
                        schema_of(&d.name),
                        fk.name.clone().into(),
                        db(),
                        schema_of(&fk.ref_table),
                        target.map(|(n, _)| V::S(n)).unwrap_or(V::Null),
                        if fk.match_full { "FULL" } else { "NONE" }.into(),
                        fk.on_update.sql().into(),
                        fk.on_delete.sql().into(),
                    ]
                })
                .collect(),
        )?,
        "check_constraints" => build_table(
            &[
                ("constraint_catalog", T::Name),
                ("constraint_schema", T::Name),
                ("constraint_name", T::Name),
                ("check_clause", T::Text),
            ],
            rels.iter()
                .flat_map(|e| {
                    e.desc
                        .checks
                        .iter()
                        .map(|(n, expr)| {
                            (
                                n.clone(),
                                format!("(({}))", crate::sql::parser::user_text(expr)),
                            )
                        })
                        .chain(not_null_checks(&e.desc))
                        .map(|(n, clause)| {
                            vec![db(), schema_of(&e.desc.name), n.into(), clause.into()]
                        })
                        .collect::<Vec<_>>()
                })
                // (a domain's CHECKs too, as Postgres lists them)
                .chain(catalog.all_domains().iter().flat_map(|d| {
                    d.checks
                        .iter()
                        .map(|c| {
                            vec![
                                db(),
                                schema_of(&d.name),
                                c.name.clone().into(),
                                format!("(({}))", crate::sql::parser::user_text(&c.expr)).into(),
                            ]
                        })
                        .collect::<Vec<_>>()
                }))
                .collect(),
        )?,
        "domains" => build_table(
            DOMAINS_COLUMNS,
            catalog
                .all_domains()
                .iter()
                .map(|d| {
                    // the base type's description, as a column of it has it
                    let c = column_row(V::Null, "", "", 1, &d.base, true);
                    let mut row = vec![db(), schema_of(&d.name), bare(&d.name)];
                    row.extend(c[7..10].iter().cloned()); // data_type, lengths
                    row.extend(c[16..22].iter().cloned()); // character set, collation
                    row.extend(c[10..16].iter().cloned()); // numeric, datetime, interval
                    row.push(d.default_shown().map(V::from).unwrap_or(V::Null));
                    row.extend(c[25..32].iter().cloned()); // udt, scope, cardinality
                    row.push(V::from("1"));
                    row
                })
                .collect(),
        )?,
        "domain_constraints" => build_table(
            &[
                ("constraint_catalog", T::Name),
                ("constraint_schema", T::Name),
                ("constraint_name", T::Name),
                ("domain_catalog", T::Name),
                ("domain_schema", T::Name),
                ("domain_name", T::Name),
                ("is_deferrable", T::Text),
                ("initially_deferred", T::Text),
            ],
            catalog
                .all_domains()
                .iter()
                .flat_map(|d| {
                    d.checks
                        .iter()
                        .map(|c| {
                            vec![
                                db(),
                                schema_of(&d.name),
                                c.name.clone().into(),
                                db(),
                                schema_of(&d.name),
                                bare(&d.name),
                                "NO".into(),
                                "NO".into(),
                            ]
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        )?,
        "routines" => build_table(
            &[
                ("specific_catalog", T::Name),
                ("specific_schema", T::Name),
                ("specific_name", T::Name),
                ("routine_catalog", T::Name),
                ("routine_schema", T::Name),
                ("routine_name", T::Name),
                ("routine_type", T::Text),
                ("data_type", T::Text),
            ],
            // the SQL functions (`specific_name` is the name and OID, as in Postgres)
            catalog
                .sql_functions()
                .into_iter()
                .map(|f| {
                    let specific = format!("{}_{}", f.name, f.oid);
                    vec![
                        db(),
                        "public".into(),
                        specific.into(),
                        db(),
                        "public".into(),
                        f.name.clone().into(),
                        "FUNCTION".into(),
                        crate::catalog::sql_functions::SqlFunction::type_named(&f.returns)
                            .0
                            .into(),
                    ]
                })
                .collect(),
        )?,
        "parameters" => build_table(
            &[
                ("specific_catalog", T::Name),
                ("specific_schema", T::Name),
                ("specific_name", T::Name),
                ("ordinal_position", T::Int4),
                ("parameter_mode", T::Text),
                ("parameter_name", T::Name),
                ("data_type", T::Text),
                ("parameter_default", T::Text),
            ],
            catalog
                .sql_functions()
                .into_iter()
                .flat_map(|f| {
                    let specific = format!("{}_{}", f.name, f.oid);
                    f.params
                        .iter()
                        .enumerate()
                        .map(|(i, (name, ty))| {
                            vec![
                                db(),
                                "public".into(),
                                specific.clone().into(),
                                V::I(i as i64 + 1),
                                "IN".into(),
                                name.clone().map(V::S).unwrap_or(V::Null),
                                crate::catalog::sql_functions::SqlFunction::type_named(ty)
                                    .0
                                    .into(),
                                f.default_shown(i).map(V::S).unwrap_or(V::Null),
                            ]
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        )?,
        _ => return Ok(None),
    }))
}

/// A table's NOT NULL columns as Postgres 15 lists them among the CHECK constraints
/// (`table_constraints`, `check_constraints`): named `{namespace}_{table}_{attnum}_not_null`,
/// clause `col IS NOT NULL`. Only tables (a view's columns have no constraints).
fn not_null_checks(d: &crate::catalog::RelationDesc) -> Vec<(String, String)> {
    if !d.kind.is_table() {
        return vec![];
    }
    d.columns
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.nullable || d.primary_key.contains(&c.name))
        .map(|(i, c)| {
            (
                format!(
                    "{}_{}_{}_not_null",
                    crate::catalog::PUBLIC_NAMESPACE_OID,
                    d.oid,
                    i + 1
                ),
                format!("{} IS NOT NULL", crate::sql::pg_text::quote_ident(&c.name)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::pg_catalog::SYSTEM_RELATIONS;

    /// Every generated view of `information_schema` is listed (once) among the system
    /// relations (so it is in `pg_class`).
    #[test]
    fn views_are_system_relations() {
        for t in TABLES {
            let n = SYSTEM_RELATIONS
                .iter()
                .filter(|r| {
                    r.namespace == crate::catalog::INFORMATION_SCHEMA_NAMESPACE_OID && r.name == *t
                })
                .count();
            assert_eq!(n, 1, "information_schema.{t} listed {n} times");
        }
    }
}
