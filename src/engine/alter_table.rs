//! `ALTER TABLE name` with `ADD COLUMN [IF NOT EXISTS] col type [DEFAULT expr] [NOT NULL]`,
//! `DROP COLUMN [IF EXISTS] col`, `RENAME COLUMN a TO b`, `RENAME TO new`, `ALTER COLUMN
//! col SET NOT NULL | DROP NOT NULL | SET DEFAULT expr | DROP DEFAULT | [SET DATA] TYPE t
//! [USING expr]`, `ADD [CONSTRAINT name] PRIMARY KEY (cols)`, `DROP CONSTRAINT <primary
//! key>`, several at once (a type change not with ADD or DROP COLUMN).
//!
//! Adding or dropping a column or the primary key (rows are stored by their key: the rows
//! are checked for a duplicate or NULL key first, as Postgres' index build does), or
//! changing a column's type (each row's value cast, or
//! USING's, by one query over the table: [`Engine::retyped_rows`]), rewrites the table's rows in the new layout (existing rows
//! get the default, evaluated once, or NULL) under a new OID, switched to in one commit
//! (`Catalog::replace_table`: a crash leaves the old table or the new one), under the
//! table's writer lock; the rest changes only the catalog.
//!
//! Under views (materialized and plain, transitively), as in Postgres: a column a view reads
//! cannot be dropped (2BP01; "reads" is what the view's planned query refers to, as
//! Postgres records it, bounded by the names its text uses); added columns are not seen
//! by the views (a view that selected `*` or uses an added column's name reads the table
//! through a derived table of its columns before the statement). `RENAME TO` and `SET
//! SCHEMA` change only the catalog key ([`Engine::rename_relation`]): the views' stored
//! queries follow the new name and keep running. The materialized views over the table stop while
//! it changes and are rebuilt from their inputs after, as at CREATE (subscriptions to them
//! end). A column a view reads keeps its type (0A000, as Postgres); renamed, the view reads
//! the table through a derived table giving the column its old name (views are stored as
//! text, and a column reference is not resolved to its table outside the planner), refused
//! (2BP01) where the table is a window function's argument, temporally joined or shadowed
//! by a WITH query of its name. Any other change under a sink is refused (2BP01: a rebuilt
//! sink would write its output again). Column defaults change in the catalog entry in place,
//! views untouched.

use datafusion::arrow::array::{ArrayRef, new_null_array};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast;

use crate::catalog::{ColumnDesc, RelationKind};
use crate::engine::{Engine, Output, lock_writer};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{normalize_ident, relation_name};
use crate::sql::types::SqlType;

impl Engine {
    /// `ALTER TABLE t ALTER [COLUMN] c SET STATISTICS n | STORAGE s | COMPRESSION m`
    /// (pg_dump writes them): Weir keeps no planner statistics and stores rows its own way,
    /// so each is checked as Postgres checks it and changes nothing.
    /// `ALTER TABLE | INDEX | MATERIALIZED VIEW name SET (...) | RESET (...)`: Postgres'
    /// storage parameters, checked and ignored (`sql/storage_parameters.rs`); the relation
    /// must exist (IF EXISTS: a notice).
    pub(crate) fn storage_parameters(
        &self,
        relation: &str,
        kind: &str,
        if_exists: bool,
        set: Option<&[(String, Option<String>)]>,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        use crate::sql::storage_parameters::{Of, check};
        let index = kind == "INDEX";
        let tag = format!("ALTER {kind}");
        let tag = tag.as_str();
        let exists = match index {
            true => self.catalog.index_by_name(relation).is_some(),
            false => self.catalog.get(relation).is_some(),
        };
        if !exists {
            return crate::engine::missing_relation(relation, if_exists, notices, tag);
        }
        if let Some(params) = set {
            check(if index { Of::Index } else { Of::Table }, params)?;
        }
        Ok(Output::Command(tag.into()))
    }

    pub(crate) fn alter_column_setting(
        &self,
        table: &str,
        if_exists: bool,
        column: &str,
        what: &str,
        value: &str,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let Some(entry) = self.catalog.get(table) else {
            return crate::engine::missing_relation(table, if_exists, notices, "ALTER TABLE");
        };
        let col = entry
            .desc
            .columns
            .iter()
            .find(|c| c.name == column)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{column}\" of relation \"{table}\" does not exist"),
                )
            })?;
        match what {
            "drop expression" => {
                if entry.desc.generation_expr(column).is_none() {
                    let message = format!(
                        "column \"{column}\" of relation \"{table}\" is not a stored generated column"
                    );
                    if value == "if exists" {
                        if let Some(tx) = notices {
                            let _ = tx.send(format!("{message}, skipping"));
                        }
                        return Ok(Output::Command("ALTER TABLE".into()));
                    }
                    return Err(WeirError::new(
                        sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        message,
                    ));
                }
                // the values stay as they were computed; later writes keep what they bring
                self.catalog.alter_relation(table, |d| {
                    d.generated.retain(|(c, _)| c != column);
                    Ok(())
                })?;
            }
            "statistics" => {
                let n: i64 = value.parse().unwrap_or(i64::MAX);
                if n < -1 {
                    return Err(WeirError::invalid_parameter(format!(
                        "statistics target {n} is too low"
                    )));
                }
                if n > 10_000
                    && let Some(tx) = notices
                {
                    let _ = tx.send("WARNING: lowering statistics target to 10000".to_owned());
                }
            }
            "storage" => {
                if !["plain", "external", "extended", "main", "default"].contains(&value) {
                    return Err(WeirError::invalid_parameter(format!(
                        "invalid storage type \"{value}\""
                    )));
                }
                if col.ty.typlen() > 0 && !matches!(value, "plain" | "default") {
                    return Err(WeirError::not_supported(format!(
                        "column data type {} can only have storage PLAIN",
                        col.ty.display_name()
                    )));
                }
            }
            _ => {
                if !["pglz", "lz4", "default"].contains(&value) {
                    return Err(WeirError::invalid_parameter(format!(
                        "invalid compression method \"{value}\""
                    )));
                }
            }
        }
        Ok(Output::Command("ALTER TABLE".into()))
    }

    /// `ALTER TABLE t ADD [CONSTRAINT name] CHECK (expr) [NOT VALID] | UNIQUE (cols)` and
    /// `DROP CONSTRAINT [IF EXISTS] name`, one after another: a CHECK is checked against
    /// the rows already there (unless NOT VALID) and kept in the catalog entry, a UNIQUE is a
    /// unique index (built over the rows, refusing duplicates), a dropped UNIQUE drops its
    /// index. The primary key is neither added nor dropped here (`alter_table` rewrites
    /// the table for it).
    async fn alter_constraints(
        &self,
        session: &Session,
        name: &str,
        operations: &[ast::AlterTableOperation],
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        for op in operations {
            let Some(entry) = self.catalog.get(name) else {
                return Err(WeirError::undefined_table(name));
            };
            let desc = &entry.desc;
            let exists = |n: &str| {
                desc.checks.iter().any(|(c, _)| c == n)
                    || desc.indexes.iter().any(|i| i.name == n)
                    || desc.foreign_keys.iter().any(|f| f.name == n)
                    || (!desc.primary_key.is_empty() && n == desc.pkey_name())
            };
            match op {
                ast::AlterTableOperation::AddConstraint {
                    constraint: ast::TableConstraint::Check(c),
                    not_valid,
                } => {
                    let expr = c.expr.to_string();
                    let check = match &c.name {
                        Some(n) => normalize_ident(n),
                        None => {
                            let cols: Vec<&str> = desc
                                .columns
                                .iter()
                                .filter(|col| {
                                    crate::catalog::pg_catalog::check_reads(&expr, &col.name)
                                })
                                .map(|col| col.name.as_str())
                                .collect();
                            let base = match cols.as_slice() {
                                [one] => format!(
                                    "{}_{one}_check",
                                    crate::sql::parser::bare_relation_name(name)
                                ),
                                _ => format!(
                                    "{}_check",
                                    crate::sql::parser::bare_relation_name(name)
                                ),
                            };
                            crate::sql::parser::free_name(&base, exists)
                        }
                    };
                    if exists(&check) {
                        return Err(WeirError::new(
                            "42710",
                            format!(
                                "constraint \"{check}\" for relation \"{name}\" already exists"
                            ),
                        ));
                    }
                    if desc.checks.len() >= crate::catalog::MAX_CHECKS {
                        return Err(WeirError::new(
                            sqlstate::PROGRAM_LIMIT_EXCEEDED,
                            format!(
                                "a table can have at most {} CHECK constraints",
                                crate::catalog::MAX_CHECKS
                            ),
                        ));
                    }
                    let new = vec![(check.clone(), expr.clone())];
                    super::checks::compile(&session.ctx, name, &desc.schema(), &new)?;
                    if !not_valid {
                        self.check_existing_rows(session, name, &check, &expr)
                            .await?;
                    }
                    self.catalog.alter_relation(name, |d| {
                        d.checks.push((check.clone(), expr.clone()));
                        if *not_valid {
                            d.not_valid.push(check.clone());
                        }
                        Ok(())
                    })?;
                }
                ast::AlterTableOperation::AddConstraint {
                    constraint: ast::TableConstraint::Unique(u),
                    ..
                } => {
                    let cols = crate::sql::parser::constraint_columns(&u.columns, "UNIQUE")?;
                    let index = match &u.name {
                        Some(n) => normalize_ident(n),
                        None => crate::sql::parser::free_name(
                            &format!(
                                "{}_{}_key",
                                crate::sql::parser::bare_relation_name(name),
                                cols.join("_")
                            ),
                            |n| {
                                self.catalog
                                    .name_in_use(&crate::sql::parser::sibling_key(name, n))
                            },
                        ),
                    };
                    if exists(&index) {
                        return Err(WeirError::new(
                            "42710",
                            format!(
                                "constraint \"{index}\" for relation \"{name}\" already exists"
                            ),
                        ));
                    }
                    let ci = crate::sql::parser::CreateIndex {
                        name: Some(index),
                        table: name.to_owned(),
                        columns: cols,
                        expressions: Vec::new(),
                        predicate: None,
                        unique: true,
                        if_not_exists: false,
                        constraint: true,
                        nulls_not_distinct: u.nulls_distinct
                            == ast::NullsDistinctOption::NotDistinct,
                    };
                    Box::pin(self.create_index(session, &ci, notices)).await?;
                }
                ast::AlterTableOperation::AddConstraint {
                    constraint: ast::TableConstraint::ForeignKey(fk),
                    not_valid,
                } => {
                    let spec = crate::sql::parser::ForeignKeySpec::from_ast(fk, None, None)?;
                    self.add_foreign_key(session, name, &spec, *not_valid, exists)
                        .await?;
                }
                ast::AlterTableOperation::ValidateConstraint { name: constraint } => {
                    // the rows already there checked now; then it is like any other
                    let c = normalize_ident(constraint);
                    if let Some((_, expr)) = desc.checks.iter().find(|(n, _)| *n == c) {
                        if desc.not_valid.contains(&c) {
                            self.check_existing_rows(session, name, &c, expr).await?;
                        }
                    } else if let Some(fk) = desc.foreign_keys.iter().find(|f| f.name == c) {
                        if desc.not_valid.contains(&c) {
                            self.validate_foreign_key(session, desc, fk).await?;
                        }
                    } else if !exists(&c) {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("constraint \"{c}\" of relation \"{name}\" does not exist"),
                        ));
                    } else {
                        return Err(WeirError::new(
                            sqlstate::WRONG_OBJECT_TYPE,
                            format!(
                                "constraint \"{c}\" of relation \"{name}\" is not a foreign key or check constraint"
                            ),
                        ));
                    }
                    self.catalog.alter_relation(name, |d| {
                        d.not_valid.retain(|n| *n != c);
                        Ok(())
                    })?;
                }
                ast::AlterTableOperation::DropConstraint {
                    if_exists,
                    name: constraint,
                    ..
                } => {
                    let c = normalize_ident(constraint);
                    if let Some(ix) = desc.indexes.iter().find(|i| i.name == c && i.unique)
                        && let Some((child, fk)) =
                            self.foreign_key_needing_index(desc, &c, &ix.columns)
                    {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!(
                                "cannot drop constraint {c} on table {name} because other objects depend on it"
                            ),
                        )
                        .with_detail(format!(
                            "constraint {fk} on table {child} depends on index {c}"
                        ))
                        .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                    }
                    if desc.foreign_keys.iter().any(|f| f.name == c) {
                        self.catalog.alter_relation(name, |d| {
                            d.foreign_keys.retain(|f| f.name != c);
                            d.not_valid.retain(|n| *n != c);
                            Ok(())
                        })?;
                    } else if desc.checks.iter().any(|(n, _)| *n == c) {
                        self.catalog.alter_relation(name, |d| {
                            d.checks.retain(|(n, _)| *n != c);
                            d.not_valid.retain(|n| *n != c);
                            Ok(())
                        })?;
                    } else if desc.indexes.iter().any(|i| i.name == c && i.unique) {
                        Box::pin(self.drop_indexes(
                            session,
                            std::slice::from_ref(&c),
                            false,
                            notices,
                        ))
                        .await?;
                    } else if *if_exists {
                        if let Some(p) = notices {
                            let _ = p.send(format!(
                                "constraint \"{c}\" of relation \"{name}\" does not exist, skipping"
                            ));
                        }
                    } else {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("constraint \"{c}\" of relation \"{name}\" does not exist"),
                        ));
                    }
                }
                // `RENAME CONSTRAINT old TO new`: a CHECK, a FOREIGN KEY, or a UNIQUE or
                // PRIMARY KEY constraint (with its index, as in Postgres); its comment and
                // NOT VALID mark follow it
                ast::AlterTableOperation::RenameConstraint { old_name, new_name } => {
                    let (from, to) = (normalize_ident(old_name), normalize_ident(new_name));
                    let d = self
                        .catalog
                        .get(name)
                        .map(|e| e.desc.clone())
                        .ok_or_else(|| WeirError::undefined_table(name))?;
                    let pkey = (!d.primary_key.is_empty()).then(|| d.pkey_name());
                    let names: Vec<String> = d
                        .foreign_keys
                        .iter()
                        .map(|f| f.name.clone())
                        .chain(d.checks.iter().map(|(n, _)| n.clone()))
                        .chain(
                            d.indexes
                                .iter()
                                .filter(|i| i.unique)
                                .map(|i| i.name.clone()),
                        )
                        .chain(pkey.clone())
                        .collect();
                    if !names.contains(&from) {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("constraint \"{from}\" for table \"{name}\" does not exist"),
                        ));
                    }
                    if from == to {
                        continue;
                    }
                    if names.contains(&to) {
                        return Err(WeirError::new(
                            sqlstate::DUPLICATE_OBJECT,
                            format!("constraint \"{to}\" for relation \"{name}\" already exists"),
                        ));
                    }
                    let is_index = pkey.as_deref() == Some(from.as_str())
                        || d.indexes.iter().any(|i| i.unique && i.name == from);
                    if is_index {
                        self.rename_index(&from, &to)?;
                    }
                    self.catalog.alter_relation(name, |d| {
                        for f in d.foreign_keys.iter_mut().filter(|f| f.name == from) {
                            f.name = to.clone();
                        }
                        for (n, _) in d.checks.iter_mut().filter(|(n, _)| *n == from) {
                            *n = to.clone();
                        }
                        for n in d.not_valid.iter_mut().filter(|n| **n == from) {
                            *n = to.clone();
                        }
                        for (n, _) in d
                            .comments
                            .constraints
                            .iter_mut()
                            .filter(|(n, _)| *n == from)
                        {
                            *n = to.clone();
                        }
                        Ok(())
                    })?;
                }
                other => {
                    return Err(WeirError::not_supported(format!(
                        "ALTER TABLE ... {other} is not supported (constraints: CHECK, UNIQUE and FOREIGN KEY)"
                    )));
                }
            }
        }
        Ok(Output::Command("ALTER TABLE".into()))
    }

    /// The rows of table `name` may take `cols` as their primary key: no two share a key
    /// (23505 as Postgres' index build words it) and no key column is NULL (23502).
    async fn check_primary_key_rows(
        &self,
        session: &Session,
        name: &str,
        cols: &[String],
        pk_name: &str,
    ) -> Result<()> {
        let list = cols
            .iter()
            .map(|c| quoted(c))
            .collect::<Vec<_>>()
            .join(", ");
        let key_text = cols
            .iter()
            .map(|c| format!("coalesce(CAST({} AS text), 'null')", quoted(c)))
            .collect::<Vec<_>>()
            .join(" || ', ' || ");
        let sql = format!(
            "SELECT min(k) FROM (SELECT {key_text} AS k FROM {} GROUP BY {list} HAVING count(*) > 1) d",
            quoted(name)
        );
        let dup = self.run_scalar(session, &sql).await?;
        if let datafusion::common::ScalarValue::Utf8(Some(key))
        | datafusion::common::ScalarValue::Utf8View(Some(key)) =
            datafusion::common::ScalarValue::try_from_array(&dup, 0)?
        {
            return Err(WeirError::new(
                sqlstate::UNIQUE_VIOLATION,
                format!("could not create unique index \"{pk_name}\""),
            )
            .with_detail(format!("Key ({})=({key}) is duplicated.", cols.join(", "))));
        }
        for c in cols {
            let sql = format!(
                "SELECT count(*) FROM {} WHERE {} IS NULL",
                quoted(name),
                quoted(c)
            );
            let nulls = self.run_scalar(session, &sql).await?;
            let n = datafusion::common::ScalarValue::try_from_array(&nulls, 0)?;
            if n != datafusion::common::ScalarValue::Int64(Some(0)) {
                return Err(WeirError::new(
                    sqlstate::NOT_NULL_VIOLATION,
                    format!("column \"{c}\" of relation \"{name}\" contains null values"),
                ));
            }
        }
        Ok(())
    }

    /// The rows of table `name` pass CHECK constraint `check` (`expr`; NULL passes), or
    /// 23514 as Postgres words it.
    async fn check_existing_rows(
        &self,
        session: &Session,
        name: &str,
        check: &str,
        expr: &str,
    ) -> Result<()> {
        let q = format!(
            "SELECT count(*) FROM {} WHERE NOT ({expr})",
            crate::sql::pg_text::quote_ident(name)
        );
        let batches = session.ctx.sql(&q).await?.collect().await?;
        let failing = batches
            .first()
            .filter(|b| b.num_rows() > 0)
            .and_then(|b| {
                datafusion::arrow::array::AsArray::as_primitive_opt::<
                    datafusion::arrow::datatypes::Int64Type,
                >(b.column(0))
                .map(|a| a.value(0))
            })
            .unwrap_or(0);
        if failing > 0 {
            return Err(WeirError::new(
                "23514",
                format!(
                    "check constraint \"{check}\" of relation \"{name}\" is violated by some row"
                ),
            ));
        }
        Ok(())
    }

    pub(crate) async fn alter_table(
        &self,
        session: &Session,
        alter: &ast::AlterTable,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let name = relation_name(&alter.name)?;
        // `RENAME TO new` (alone, as Postgres' grammar has it): the one rename path
        if let [ast::AlterTableOperation::RenameTable { table_name }] = alter.operations.as_slice()
        {
            let (ast::RenameTableNameKind::To(n) | ast::RenameTableNameKind::As(n)) = table_name;
            // (the relation stays in its schema)
            let to = crate::sql::parser::sibling_key(
                &name,
                &crate::sql::parser::unresolved_relation_name(n)?,
            );
            return self.rename_relation(
                crate::sql::parser::DropKind::Table,
                &name,
                &to,
                alter.if_exists,
                notices,
            );
        }
        if alter
            .operations
            .iter()
            .any(|op| matches!(op, ast::AlterTableOperation::RenameTable { .. }))
        {
            return Err(WeirError::syntax(
                "RENAME TO cannot be combined with other ALTER TABLE actions",
            ));
        }
        let Some(entry) = self.catalog.get(&name) else {
            return crate::engine::missing_relation(&name, alter.if_exists, notices, "ALTER TABLE");
        };
        if !entry.desc.kind.is_table() {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a table"),
            ));
        }
        if entry.desc.options.iter().any(|(k, _)| k == "connector") {
            return Err(WeirError::not_supported(format!(
                "cannot alter table \"{name}\": it is fed by a connector"
            )));
        }
        // constraints: the catalog entry and an index, never the table's rows or its views
        // (but the primary key: the rows are stored by it, so the table is rewritten)
        let pkey_name = entry.desc.pkey_name();
        let primary_key_op = |op: &ast::AlterTableOperation| match op {
            ast::AlterTableOperation::AddConstraint {
                constraint: ast::TableConstraint::PrimaryKey(_),
                ..
            } => true,
            ast::AlterTableOperation::DropConstraint { name: c, .. } => {
                !entry.desc.primary_key.is_empty() && normalize_ident(c) == pkey_name
            }
            _ => false,
        };
        if !alter.operations.is_empty()
            && alter.operations.iter().all(|op| {
                matches!(
                    op,
                    ast::AlterTableOperation::AddConstraint { .. }
                        | ast::AlterTableOperation::DropConstraint { .. }
                        | ast::AlterTableOperation::ValidateConstraint { .. }
                        | ast::AlterTableOperation::RenameConstraint { .. }
                ) && !primary_key_op(op)
            })
        {
            return self
                .alter_constraints(session, &name, &alter.operations, notices)
                .await;
        }
        // a column's default is the table's alone (views never see it): changed in the
        // catalog entry in place, the table's storage and the views over it untouched
        let defaults_only = alter.operations.iter().all(|op| {
            matches!(
                op,
                ast::AlterTableOperation::AlterColumn {
                    op: ast::AlterColumnOperation::SetDefault { .. }
                        | ast::AlterColumnOperation::DropDefault,
                    ..
                }
            )
        });
        // the views over the table, transitively (none when only defaults change)
        let dependents = match defaults_only {
            true => Vec::new(),
            false => self.views_over(entry.desc.oid),
        };
        // a sink over the table (directly or through views) is not carried through: a
        // rebuilt sink would write its output again
        let blocker = dependents
            .iter()
            .find(|d| d.desc.kind == RelationKind::Sink);
        if let Some(d) = blocker {
            return Err(depended_on(&format!("alter table \"{name}\""), d, &format!("table \"{name}\""))
            .with_hint("A sink over the table cannot be rebuilt under it: drop the sink first, and create it again after."));
        }
        let table = entry
            .table
            .clone()
            .ok_or_else(|| WeirError::internal("a table without storage"))?;
        let _writer = lock_writer(session, &table).await?;
        let mut desc = entry.desc.clone();
        // columns of the new layout: Some(old position) or None (added, with its value)
        let mut layout: Vec<Option<usize>> = (0..desc.columns.len()).map(Some).collect();
        let mut added: Vec<ArrayRef> = Vec::new();
        // added generated columns declared NOT NULL (checked once computed)
        let mut generated_not_null: Vec<String> = Vec::new();
        let mut rewrite = false;
        // columns whose type changes: (position, the SQL of the value each row gets)
        let mut retyped: Vec<(usize, String)> = Vec::new();
        // what the views over the table see change (added: `!added.is_empty()`)
        let mut dropped: Vec<String> = Vec::new();
        let mut renamed: Vec<(String, String)> = Vec::new();
        let rows_now = table.row_count();
        let col_pos = |desc: &crate::catalog::RelationDesc, c: &str| {
            desc.columns.iter().position(|x| x.name == c)
        };
        for op in &alter.operations {
            match op {
                ast::AlterTableOperation::AddColumn {
                    if_not_exists,
                    column_def,
                    ..
                } => {
                    let col = normalize_ident(&column_def.name);
                    crate::catalog::check_column_name(&col)?;
                    if col_pos(&desc, &col).is_some() {
                        if *if_not_exists {
                            if let Some(tx) = notices {
                                let _ = tx.send(format!(
                                    "column \"{col}\" of relation \"{name}\" already exists, skipping"
                                ));
                            }
                            continue;
                        }
                        return Err(WeirError::new(
                            sqlstate::DUPLICATE_COLUMN,
                            format!("column \"{col}\" of relation \"{name}\" already exists"),
                        ));
                    }
                    let ty = self.catalog.resolve_type(&column_def.data_type)?;
                    // a domain's column: its default unless the column has one, its
                    // constraints met by the value the existing rows get
                    let domain = match &column_def.data_type {
                        ast::DataType::Custom(n, a) if a.is_empty() => self
                            .catalog
                            .domain(&crate::catalog::user_types::user_type_name(n)),
                        _ => None,
                    };
                    let mut not_null = false;
                    let mut default = None;
                    let mut generation = None;
                    for o in &column_def.options {
                        match &o.option {
                            ast::ColumnOption::NotNull => not_null = true,
                            ast::ColumnOption::Null => not_null = false,
                            ast::ColumnOption::Default(e) => default = Some(e.to_string()),
                            ast::ColumnOption::Generated {
                                generated_as: ast::GeneratedAs::ExpStored,
                                generated_keyword: true,
                                generation_expr: Some(e),
                                generation_expr_mode: Some(ast::GeneratedExpressionMode::Stored),
                                ..
                            } if default.is_none() => generation = Some(e.to_string()),
                            other => {
                                return Err(WeirError::not_supported(format!(
                                    "ADD COLUMN with {other} is not supported"
                                )));
                            }
                        }
                    }
                    let inherits = default.is_none()
                        && generation.is_none()
                        && domain.as_ref().is_some_and(|d| d.default.is_some());
                    if inherits && let Some(d) = &domain {
                        default.clone_from(&d.default);
                    }
                    if generation.is_some() && default.is_some() {
                        return Err(WeirError::syntax(format!(
                            "both default and generation expression specified for column \"{col}\" of table \"{name}\""
                        )));
                    }
                    if let Some(g) = &generation {
                        // planned over the table as it will be (refusals as at CREATE TABLE)
                        let mut columns = desc.columns.clone();
                        columns.push(ColumnDesc {
                            name: col.clone(),
                            ty: ty.clone(),
                            nullable: true,
                        });
                        let mut all = desc.generated.clone();
                        all.push((col.clone(), g.clone()));
                        super::generated::compile(&session.ctx, &name, &columns, &all)?;
                    }
                    // the value existing rows get: the default, evaluated once, or NULL (a
                    // generated column's is computed over each row as it is rewritten)
                    let value = match &default {
                        Some(d) => {
                            self.check_default(session, d, &ty).await?;
                            let sql = format!("SELECT CAST(({d}) AS {})", ty.display_name());
                            let out = self.run_scalar(session, &sql).await?;
                            datafusion::common::ScalarValue::try_from_array(&out, 0)?
                                .to_array_of_size(rows_now)?
                        }
                        None => new_null_array(&ty.arrow_type(), rows_now),
                    };
                    if let Some(d) = &domain
                        && generation.is_none()
                    {
                        crate::catalog::domains::check_values(d, &value)?;
                        desc.domains.push(crate::catalog::domains::ColumnDomain {
                            column: col.clone(),
                            oid: d.oid,
                            default: inherits,
                        });
                    }
                    if not_null && generation.is_none() && value.null_count() > 0 {
                        return Err(WeirError::new(
                            sqlstate::NOT_NULL_VIOLATION,
                            format!("column \"{col}\" of relation \"{name}\" contains null values"),
                        ));
                    }
                    desc.columns.push(ColumnDesc {
                        name: col.clone(),
                        ty,
                        nullable: !not_null,
                    });
                    if let Some(d) = default {
                        desc.defaults.push((col.clone(), d));
                    }
                    if let Some(g) = generation {
                        if not_null {
                            generated_not_null.push(col.clone());
                        }
                        desc.generated.push((col, g));
                    }
                    layout.push(None);
                    added.push(value);
                    rewrite = true;
                }
                ast::AlterTableOperation::DropColumn {
                    column_names,
                    if_exists,
                    drop_behavior,
                    ..
                } => {
                    let mut column_names: Vec<String> =
                        column_names.iter().map(normalize_ident).collect();
                    // a generated column reading a dropped one: refused, or dropped too
                    // (CASCADE), as Postgres' dependencies have it
                    let mut cascaded: Vec<String> = Vec::new();
                    let mut k = 0;
                    while k < column_names.len() {
                        let col = column_names[k].clone();
                        k += 1;
                        let readers: Vec<String> = desc
                            .generated
                            .iter()
                            .filter(|(g, e)| {
                                *g != col
                                    && !column_names.contains(g)
                                    && crate::catalog::pg_catalog::check_reads(e, &col)
                            })
                            .map(|(g, _)| g.clone())
                            .collect();
                        for g in readers {
                            if !matches!(drop_behavior, Some(ast::DropBehavior::Cascade)) {
                                return Err(WeirError::new(
                                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                                    format!(
                                        "cannot drop column {col} of table {name} because other objects depend on it"
                                    ),
                                )
                                .with_detail(format!(
                                    "column {g} of table {name} depends on column {col} of table {name}"
                                ))
                                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                            }
                            cascaded.push(format!("drop cascades to column {g} of table {name}"));
                            column_names.push(g);
                        }
                    }
                    // one NOTICE, listing them in its detail when there are several
                    crate::engine::cascade_notice(notices, cascaded);
                    for col in column_names {
                        let Some(at) = col_pos(&desc, &col) else {
                            if *if_exists {
                                if let Some(tx) = notices {
                                    let _ = tx.send(format!(
                                        "column \"{col}\" of relation \"{name}\" does not exist, skipping"
                                    ));
                                }
                                continue;
                            }
                            return Err(WeirError::new(
                                sqlstate::UNDEFINED_COLUMN,
                                format!("column \"{col}\" of relation \"{name}\" does not exist"),
                            ));
                        };
                        if desc.primary_key.contains(&col) {
                            return Err(WeirError::new(
                                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                                format!(
                                    "cannot drop column {col} of table {name} because other objects depend on it"
                                ),
                            )
                            .with_detail(format!(
                                "constraint {} on table {name} depends on column {col} of table {name}",
                                desc.pkey_name()
                            )));
                        }
                        // a unique index on it that another table's foreign key needs
                        for ix in desc.indexes.iter().filter(|i| i.columns.contains(&col)) {
                            if let Some((child, fk)) =
                                self.foreign_key_needing_index(&desc, &ix.name, &ix.columns)
                                && child != name
                            {
                                return Err(WeirError::new(
                                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                                    format!(
                                        "cannot drop column {col} of table {name} because other objects depend on it"
                                    ),
                                )
                                .with_detail(format!(
                                    "constraint {fk} on table {child} depends on column {col} of table {}",
                                    desc.name
                                ))
                                .with_hint(
                                    "Use DROP ... CASCADE to drop the dependent objects too.",
                                ));
                            }
                        }
                        if desc.columns.len() == 1 {
                            return Err(WeirError::not_supported(
                                "a table must keep at least one column",
                            ));
                        }
                        // as in Postgres, a foreign key over the column goes with it
                        desc.foreign_keys.retain(|f| {
                            !(f.columns.contains(&col)
                                || f.ref_table == name && f.ref_columns.contains(&col))
                        });
                        desc.columns.remove(at);
                        desc.defaults.retain(|(d, _)| *d != col);
                        desc.domains.retain(|d| d.column != col);
                        desc.generated.retain(|(g, _)| *g != col);
                        desc.comments.columns.retain(|(c, _)| *c != col);
                        // as in Postgres, an index on the column goes with it (an expression
                        // or predicate that reads it too)
                        desc.indexes.retain(|i| {
                            let reads =
                                |t: &String| crate::catalog::pg_catalog::check_reads(t, &col);
                            !(i.columns.contains(&col)
                                || i.expressions.iter().flatten().any(reads)
                                || i.predicate.as_ref().is_some_and(reads))
                        });
                        // and so does a CHECK constraint that reads it
                        desc.checks
                            .retain(|(_, e)| !crate::catalog::pg_catalog::check_reads(e, &col));
                        layout.remove(at);
                        rewrite = true;
                        dropped.push(col);
                    }
                }
                ast::AlterTableOperation::RenameColumn {
                    old_column_name,
                    new_column_name,
                } => {
                    let (old, new) = (
                        normalize_ident(old_column_name),
                        normalize_ident(new_column_name),
                    );
                    let Some(at) = col_pos(&desc, &old) else {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_COLUMN,
                            format!("column \"{old}\" does not exist"),
                        ));
                    };
                    if desc.kind.is_table() {
                        crate::catalog::check_column_name(&new)?;
                    }
                    if col_pos(&desc, &new).is_some() {
                        return Err(WeirError::new(
                            sqlstate::DUPLICATE_COLUMN,
                            format!("column \"{new}\" of relation \"{name}\" already exists"),
                        ));
                    }
                    desc.columns[at].name = new.clone();
                    match renamed.iter_mut().find(|(now, _)| *now == old) {
                        Some(o) => o.0 = new.clone(),
                        None => renamed.push((new.clone(), old.clone())),
                    }
                    for k in desc.primary_key.iter_mut() {
                        if *k == old {
                            *k = new.clone();
                        }
                    }
                    for (c, _) in desc.defaults.iter_mut() {
                        if *c == old {
                            *c = new.clone();
                        }
                    }
                    for d in desc.domains.iter_mut() {
                        if d.column == old {
                            d.column = new.clone();
                        }
                    }
                    // a CHECK constraint and a generated column read the column under its
                    // new name
                    for (_, e) in desc.checks.iter_mut().chain(desc.generated.iter_mut()) {
                        rename_column_in(e, &old, &new);
                    }
                    for (c, _) in desc.generated.iter_mut() {
                        if *c == old {
                            *c = new.clone();
                        }
                    }
                    for ix in desc.indexes.iter_mut() {
                        for (k, c) in ix.columns.iter_mut().enumerate() {
                            match ix.expressions.get_mut(k) {
                                // an expression key's text, kept in both places
                                Some(Some(e)) => {
                                    rename_column_in(e, &old, &new);
                                    *c = e.clone();
                                }
                                _ if *c == old => *c = new.clone(),
                                _ => {}
                            }
                        }
                        if let Some(p) = ix.predicate.as_mut() {
                            rename_column_in(p, &old, &new);
                        }
                    }
                    for c in desc
                        .foreign_keys
                        .iter_mut()
                        .flat_map(|f| f.columns.iter_mut())
                    {
                        if *c == old {
                            *c = new.clone();
                        }
                    }
                    for (c, _) in desc.comments.columns.iter_mut() {
                        if *c == old {
                            *c = new.clone();
                        }
                    }
                    if let Some(w) = desc.watermark.as_mut()
                        && w.column == old
                    {
                        return Err(WeirError::not_supported(
                            "cannot rename the column a WATERMARK is declared on",
                        ));
                    }
                }
                ast::AlterTableOperation::AddConstraint {
                    constraint: ast::TableConstraint::PrimaryKey(pk),
                    ..
                } => {
                    if !desc.primary_key.is_empty() {
                        return Err(WeirError::new(
                            sqlstate::INVALID_TABLE_DEFINITION,
                            format!("multiple primary keys for table \"{name}\" are not allowed"),
                        ));
                    }
                    let cols = crate::sql::parser::constraint_columns(&pk.columns, "PRIMARY KEY")?;
                    let mut at = Vec::new();
                    for c in &cols {
                        // the rows are checked as stored: a column added by the same
                        // statement is not there yet
                        match col_pos(&entry.desc, c).filter(|_| col_pos(&desc, c).is_some()) {
                            Some(i) => at.push(i),
                            None => {
                                return Err(WeirError::new(
                                    sqlstate::UNDEFINED_COLUMN,
                                    format!("column \"{c}\" of relation \"{name}\" does not exist"),
                                ));
                            }
                        }
                    }
                    let pk_name = match &pk.name {
                        Some(n) => normalize_ident(n),
                        None => format!(
                            "{}_pkey",
                            crate::sql::parser::bare_relation_name(&desc.name)
                        ),
                    };
                    if self
                        .catalog
                        .name_in_use(&crate::sql::parser::sibling_key(&desc.name, &pk_name))
                    {
                        return Err(WeirError::new(
                            sqlstate::DUPLICATE_TABLE,
                            format!("relation \"{pk_name}\" already exists"),
                        ));
                    }
                    self.check_primary_key_rows(session, &name, &cols, &pk_name)
                        .await?;
                    for c in &cols {
                        if let Some(i) = col_pos(&desc, c) {
                            desc.columns[i].nullable = false;
                        }
                    }
                    desc.primary_key = cols;
                    desc.options.retain(|(k, _)| k != "weir.pkey_name");
                    if pk_name
                        != format!(
                            "{}_pkey",
                            crate::sql::parser::bare_relation_name(&desc.name)
                        )
                    {
                        desc.options.push(("weir.pkey_name".into(), pk_name));
                    }
                    rewrite = true;
                }
                op @ ast::AlterTableOperation::DropConstraint { .. } if primary_key_op(op) => {
                    if let Some((child, fk)) =
                        self.foreign_key_needing_index(&entry.desc, &pkey_name, &desc.primary_key)
                    {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!(
                                "cannot drop constraint {pkey_name} on table {name} because other objects depend on it"
                            ),
                        )
                        .with_detail(format!(
                            "constraint {fk} on table {child} depends on index {pkey_name}"
                        ))
                        .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                    }
                    // the columns stay NOT NULL, as in Postgres
                    desc.primary_key.clear();
                    desc.options.retain(|(k, _)| k != "weir.pkey_name");
                    rewrite = true;
                }
                ast::AlterTableOperation::AlterColumn { column_name, op } => {
                    let col = normalize_ident(column_name);
                    let Some(at) = col_pos(&desc, &col) else {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_COLUMN,
                            format!("column \"{col}\" of relation \"{name}\" does not exist"),
                        ));
                    };
                    match op {
                        ast::AlterColumnOperation::SetNotNull => {
                            let sql =
                                format!("SELECT count(*) FROM \"{name}\" WHERE \"{col}\" IS NULL");
                            let nulls = self.run_scalar(session, &sql).await?;
                            let n = datafusion::common::ScalarValue::try_from_array(&nulls, 0)?;
                            if n != datafusion::common::ScalarValue::Int64(Some(0)) {
                                return Err(WeirError::new(
                                    sqlstate::NOT_NULL_VIOLATION,
                                    format!(
                                        "column \"{col}\" of relation \"{name}\" contains null values"
                                    ),
                                ));
                            }
                            desc.columns[at].nullable = false;
                        }
                        ast::AlterColumnOperation::DropNotNull => {
                            if desc.primary_key.contains(&col) {
                                return Err(WeirError::new(
                                    sqlstate::INVALID_TABLE_DEFINITION,
                                    format!("column \"{col}\" is in a primary key"),
                                ));
                            }
                            desc.columns[at].nullable = true;
                        }
                        ast::AlterColumnOperation::SetDefault { .. }
                        | ast::AlterColumnOperation::DropDefault
                            if desc.generation_expr(&col).is_some() =>
                        {
                            let e = WeirError::syntax(format!(
                                "column \"{col}\" of relation \"{name}\" is a generated column"
                            ));
                            return Err(match op {
                                ast::AlterColumnOperation::DropDefault => e.with_hint(
                                    "Use ALTER TABLE ... ALTER COLUMN ... DROP EXPRESSION instead.",
                                ),
                                _ => e,
                            });
                        }
                        ast::AlterColumnOperation::SetDefault { value } => {
                            let ty = desc.columns[at].ty.clone();
                            self.check_default(session, &value.to_string(), &ty).await?;
                            // (the column's own now, not its domain's)
                            for d in desc.domains.iter_mut().filter(|d| d.column == col) {
                                d.default = false;
                            }
                            desc.defaults.retain(|(c, _)| *c != col);
                            desc.defaults.push((col, value.to_string()));
                        }
                        ast::AlterColumnOperation::DropDefault => {
                            for d in desc.domains.iter_mut().filter(|d| d.column == col) {
                                d.default = false;
                            }
                            desc.defaults.retain(|(c, _)| *c != col);
                        }
                        ast::AlterColumnOperation::SetDataType {
                            data_type, using, ..
                        } => {
                            let ty = self.catalog.resolve_type(data_type)?;
                            // of a domain now (its values checked as the rows are
                            // rewritten), or of none
                            desc.domains.retain(|d| d.column != col);
                            if let ast::DataType::Custom(n, a) = data_type
                                && a.is_empty()
                                && let Some(d) = self
                                    .catalog
                                    .domain(&crate::catalog::user_types::user_type_name(n))
                            {
                                desc.domains.push(crate::catalog::domains::ColumnDomain {
                                    column: col.clone(),
                                    oid: d.oid,
                                    default: false,
                                });
                            }
                            if let Some((g, _)) = desc.generated.iter().find(|(g, e)| {
                                *g != col && crate::catalog::pg_catalog::check_reads(e, &col)
                            }) {
                                return Err(WeirError::not_supported(
                                    "cannot alter type of a column used by a generated column",
                                )
                                .with_detail(format!(
                                    "Column \"{col}\" is used by generated column \"{g}\"."
                                )));
                            }
                            if let Some(w) = desc.watermark.as_ref()
                                && w.column == col
                            {
                                return Err(WeirError::not_supported(
                                    "cannot change the type of the column a WATERMARK is declared on",
                                ));
                            }
                            // the value each row gets: USING's, or the column cast (only
                            // where Postgres casts on assignment: no text -> integer)
                            let from = match using {
                                Some(u) => format!("({u})"),
                                None => {
                                    let old_ty = &desc.columns[at].ty;
                                    if !assignment_cast(old_ty, &ty) {
                                        let t = ty.display_name();
                                        return Err(WeirError::new(
                                            sqlstate::DATATYPE_MISMATCH,
                                            format!(
                                                "column \"{col}\" cannot be cast automatically to type {t}"
                                            ),
                                        )
                                        .with_hint(format!(
                                            "You might need to specify \"USING {col}::{t}\"."
                                        )));
                                    }
                                    quoted(&entry.desc.columns[at].name)
                                }
                            };
                            self.check_foreign_key_types(&desc, &col, &ty)?;
                            // the column's default is cast to the new type on assignment,
                            // as Postgres does; a quoted constant keeps its old type where
                            // Postgres shows it (`'x'::text` in a varchar column)
                            let old_ty = desc.columns[at].ty.clone();
                            let shown = desc.column_default(&col);
                            if let Some(i) = desc.defaults.iter().position(|(c, _)| *c == col)
                                && desc.identity(&col).is_none()
                            {
                                if !assignment_cast(&old_ty, &ty) {
                                    return Err(WeirError::new(
                                        sqlstate::DATATYPE_MISMATCH,
                                        format!(
                                            "default for column \"{col}\" cannot be cast automatically to type {}",
                                            ty.display_name()
                                        ),
                                    ));
                                }
                                if let Some(shown) = shown.filter(|d| d.starts_with('\'')) {
                                    desc.defaults[i].1 = shown;
                                }
                            }
                            desc.columns[at].ty = ty;
                            retyped.retain(|(p, _)| *p != at);
                            retyped.push((at, from));
                        }
                        other => {
                            return Err(WeirError::not_supported(format!(
                                "ALTER COLUMN ... {other} is not supported"
                            )));
                        }
                    }
                }
                other => {
                    return Err(WeirError::not_supported(format!(
                        "ALTER TABLE ... {other} is not supported"
                    )));
                }
            }
        }
        if entry.desc.kind == RelationKind::AppendOnlyTable && (rewrite || !retyped.is_empty()) {
            return Err(WeirError::not_supported(format!(
                "cannot add or drop columns or change column types of APPEND ONLY table \"{name}\""
            )));
        }
        if rewrite && !retyped.is_empty() {
            return Err(WeirError::not_supported(
                "ALTER COLUMN ... TYPE together with ADD or DROP COLUMN in one ALTER TABLE",
            )
            .with_hint("Run them as separate ALTER TABLE statements."));
        }
        let rows = if !retyped.is_empty() {
            Some(
                self.retyped_rows(session, &entry.desc, &desc, &retyped)
                    .await?,
            )
        } else if rewrite {
            let schema = desc.schema();
            let mut out = Vec::new();
            let mut at_row = 0usize;
            for b in table.scan()?.batches() {
                let b = b?;
                let n = b.num_rows();
                let mut extra = 0usize;
                let cols: Vec<ArrayRef> = layout
                    .iter()
                    .map(|l| match l {
                        Some(i) => b.column(*i).clone(),
                        None => {
                            let c = added[extra].slice(at_row, n);
                            extra += 1;
                            c
                        }
                    })
                    .collect();
                at_row += n;
                out.push(RecordBatch::try_new(schema.clone(), cols)?);
            }
            // generated columns (an added one) computed over the rewritten rows
            let out = super::generated::fill_rows(&session.ctx, &desc, out)?;
            // a column now of a domain: its values meet it
            if !desc.domains.is_empty() {
                for (i, d) in self.catalog.column_domains(&desc).iter().enumerate() {
                    if let Some(d) = d {
                        for b in &out {
                            crate::catalog::domains::check_values(d, b.column(i))?;
                        }
                    }
                }
            }
            for c in &generated_not_null {
                let at = col_pos(&desc, c).unwrap_or(0);
                if out.iter().any(|b| b.column(at).null_count() > 0) {
                    return Err(WeirError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!("column \"{c}\" of relation \"{name}\" contains null values"),
                    ));
                }
            }
            Some(out)
        } else {
            None
        };
        if defaults_only {
            self.catalog.alter_relation(&name, |d| {
                d.defaults = desc.defaults.clone();
                d.domains = desc.domains.clone();
                Ok(())
            })?;
            return Ok(Output::Command("ALTER TABLE".into()));
        }
        let changes = ColumnChanges {
            dropped,
            renamed,
            // a type change comes without ADD or DROP COLUMN: positions are the old ones
            retyped: retyped
                .iter()
                .filter_map(|(at, _)| entry.desc.columns.get(*at).map(|c| c.name.clone()))
                .collect(),
            added: desc
                .columns
                .iter()
                .zip(&layout)
                .filter(|(_, was)| was.is_none())
                .map(|(c, _)| c.name.clone())
                .collect(),
        };
        let mut read = std::collections::HashMap::new();
        for d in &dependents {
            if let Some(cols) = self.columns_read(session, d, &name).await {
                read.insert(d.desc.name.clone(), cols);
            }
        }
        let queries = views_following(&name, &desc, &dependents, &read, &changes)?;
        let old_oid = entry.desc.oid;
        // foreign keys that reference the table (its own too) follow its new names
        let column_names: Vec<(String, String)> = changes
            .renamed
            .iter()
            .map(|(now, was)| (was.clone(), now.clone()))
            .collect();
        let new_name = desc.name.clone();
        super::foreign_keys::follow_referenced(
            &mut desc.foreign_keys,
            &name,
            &new_name,
            &column_names,
        );
        let referencing = self.foreign_keys_following(&name, &new_name, &column_names);
        // the materialized views over the table stop while it changes and are rebuilt
        // from their inputs after (as at CREATE)
        self.stop_views(&dependents).await?;
        // one commit: the table and the descriptions of the views and tables that follow it
        // in a transaction block the old rows stay for its rollback (`schema_undo.rs`)
        let in_block = session.in_transaction || session.implicit_transaction;
        let replaced = self
            .catalog
            .replace_table(&name, desc, rows, in_block, |new_oid| {
                let mut d = following(&dependents, &queries, old_oid, new_oid);
                d.extend(referencing);
                d
            });
        drop(_writer);
        let views: Vec<u32> = dependents.iter().map(|d| d.desc.oid).collect();
        let rebuilt = self.rebuild_views(&views, notices).await;
        replaced?;
        rebuilt?;
        Ok(Output::Command("ALTER TABLE".into()))
    }

    /// The views and sinks that read a relation, directly or through other views, oldest
    /// first.
    pub(crate) fn views_over(&self, oid: u32) -> Vec<std::sync::Arc<crate::catalog::Entry>> {
        let mut out: Vec<std::sync::Arc<crate::catalog::Entry>> = Vec::new();
        let mut stack = vec![oid];
        while let Some(o) = stack.pop() {
            for d in self.catalog.dependents(o) {
                if !out.iter().any(|e| e.desc.oid == d.desc.oid) {
                    stack.push(d.desc.oid);
                    out.push(d);
                }
            }
        }
        out.sort_by_key(|e| e.desc.oid);
        out
    }

    /// The table's rows with the columns in `retyped` converted to their new types in
    /// `desc` (`ALTER COLUMN ... TYPE t [USING expr]`): one query over the table (under its
    /// writer lock) casts each such column, as Postgres' assignment casts do — a value that
    /// does not convert fails the statement (22P02, 22003...), a `varchar(n)` value longer
    /// than n is 22001 (not cut), a NULL where NOT NULL is 23502; duplicate keys after the
    /// conversion are 23505 when the rows are written.
    async fn retyped_rows(
        &self,
        session: &Session,
        old: &crate::catalog::RelationDesc,
        desc: &crate::catalog::RelationDesc,
        retyped: &[(usize, String)],
    ) -> Result<Vec<RecordBatch>> {
        let items: Vec<String> = old
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| match retyped.iter().find(|(p, _)| *p == i) {
                Some((_, from)) => {
                    let to = match &desc.columns[i].ty {
                        // checked below rather than cut, as an assignment
                        SqlType::Varchar(Some(_)) => "text".to_owned(),
                        t => t.display_name(),
                    };
                    format!("CAST({from} AS {to})")
                }
                None => quoted(&c.name),
            })
            .collect();
        let sql = format!("SELECT {} FROM {}", items.join(", "), quoted(&old.name));
        let q = crate::sql::parser::parse_query(&sql)?;
        let plan = self.plan_ast(session, &ast::Statement::Query(q)).await?;
        let batches = crate::engine::collect_plan(session, plan).await?;
        let schema = desc.schema();
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            let mut cols = Vec::with_capacity(b.num_columns());
            for (i, c) in b.columns().iter().enumerate() {
                let column = &desc.columns[i];
                if !column.nullable && c.null_count() > 0 {
                    return Err(WeirError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!(
                            "column \"{}\" of relation \"{}\" contains null values",
                            column.name, old.name
                        ),
                    ));
                }
                if let SqlType::Varchar(Some(n)) = column.ty
                    && let Some(text) = c
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::StringArray>()
                    && text
                        .iter()
                        .flatten()
                        .any(|v| v.chars().count() > n as usize)
                {
                    return Err(WeirError::new(
                        sqlstate::STRING_DATA_RIGHT_TRUNCATION,
                        format!("value too long for type character varying({n})"),
                    ));
                }
                // the same type, as the column stores it (a zone's name, a list field's)
                cols.push(datafusion::arrow::compute::cast(
                    c,
                    schema.field(i).data_type(),
                )?);
            }
            out.push(RecordBatch::try_new(schema.clone(), cols)?);
        }
        Ok(out)
    }

    /// One value from a one-row query (a default, a count).
    pub(crate) async fn run_scalar(&self, session: &Session, sql: &str) -> Result<ArrayRef> {
        let q = crate::sql::parser::parse_query(sql)?;
        let plan = self.plan_ast(session, &ast::Statement::Query(q)).await?;
        let batches = crate::engine::collect_plan(session, plan).await?;
        batches
            .into_iter()
            .find(|b| b.num_rows() > 0)
            .map(|b| b.column(0).clone())
            .ok_or_else(|| WeirError::internal("a scalar query returned no row"))
    }
}

impl Engine {
    /// `ALTER INDEX [IF EXISTS] name RENAME TO new` (Django's RenameIndex): a secondary
    /// index, a UNIQUE constraint's (the constraint is renamed with it, as in Postgres) or
    /// the primary key's.
    fn rename_index(&self, name: &str, to: &str) -> Result<Output> {
        let done = Ok(Output::Command("ALTER INDEX".into()));
        let Some((entry, info)) = self.catalog.index_by_name(name) else {
            return Err(match self.catalog.get(name) {
                Some(_) => WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not an index"),
                ),
                None => WeirError::undefined_table(name),
            });
        };
        if name == to {
            return done;
        }
        if self
            .catalog
            .name_in_use(&crate::sql::parser::sibling_key(&entry.desc.name, to))
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{to}\" already exists"),
            ));
        }
        let table = entry.desc.name.clone();
        self.catalog.alter_relation(&table, |d| {
            if info.primary {
                d.options.retain(|(k, _)| k != "weir.pkey_name");
                if to != format!("{}_pkey", crate::sql::parser::bare_relation_name(&d.name)) {
                    d.options.push(("weir.pkey_name".into(), to.to_owned()));
                }
            } else if let Some(ix) = d.indexes.iter_mut().find(|i| i.oid == info.oid) {
                ix.name = to.to_owned();
            }
            Ok(())
        })?;
        if let Some(t) = &entry.table {
            t.rename_index((!info.primary).then_some(info.oid), to)?;
        }
        done
    }

    /// `ALTER [MATERIALIZED] VIEW | SEQUENCE name RENAME TO new` and `ALTER TABLE |
    /// [MATERIALIZED] VIEW | SEQUENCE name SET SCHEMA s` (`to`: the key in `s`): the
    /// catalog key, with what follows it ([`Engine::follow_renames`]). `ALTER TABLE`
    /// moves any relation, as in Postgres; a table's move takes the sequences it owns.
    pub(crate) fn rename_relation(
        &self,
        kind: crate::sql::parser::DropKind,
        name: &str,
        to: &str,
        if_exists: bool,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        use crate::catalog::schemas::split_relation_name;
        use crate::sql::parser::DropKind;
        if kind == DropKind::Index {
            if if_exists && self.catalog.index_by_name(name).is_none() {
                return crate::engine::missing_relation(name, true, notices, "ALTER INDEX");
            }
            return self.rename_index(name, to);
        }
        let (noun, want, tag) = match kind {
            DropKind::Table => ("table", None, "ALTER TABLE"),
            DropKind::MaterializedView => (
                "materialized view",
                Some(RelationKind::MaterializedView),
                "ALTER MATERIALIZED VIEW",
            ),
            DropKind::View => ("view", Some(RelationKind::View), "ALTER VIEW"),
            _ => ("sequence", Some(RelationKind::Sequence), "ALTER SEQUENCE"),
        };
        let Some(entry) = self.catalog.get(name) else {
            return crate::engine::missing_relation(name, if_exists, notices, tag);
        };
        if want.is_some_and(|k| entry.desc.kind != k) {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!(
                    "\"{}\" is not a {noun}",
                    crate::sql::parser::bare_relation_name(name)
                ),
            ));
        }
        let (from_schema, _) = split_relation_name(name);
        let (to_schema, _) = split_relation_name(to);
        let mut renames = vec![(name.to_owned(), to.to_owned())];
        if from_schema != to_schema {
            self.catalog.check_schema_of(to)?;
            // the sequences the table owns go with it (as Postgres)
            renames.extend(
                entry
                    .desc
                    .options
                    .iter()
                    .filter(|(k, v)| {
                        k == "weir.owned_sequence" && split_relation_name(v).0 == from_schema
                    })
                    .map(|(_, v)| {
                        let bare = crate::sql::parser::bare_relation_name(v);
                        (
                            v.clone(),
                            crate::sql::parser::relation_key(Some(to_schema), bare),
                        )
                    }),
            );
        }
        if to == name {
            return Ok(Output::Command(tag.into()));
        }
        let (renamed, others) = self.follow_renames(&renames)?;
        self.catalog
            .rename_relations(renamed, others, Default::default())?;
        Ok(Output::Command(tag.into()))
    }

    /// The relations of `renames` (key now, key after) under their new keys, and the
    /// descriptions of the others that follow them: the views that read one (their stored
    /// queries name it anew; they run by OID, so nothing else changes), the foreign keys
    /// that reference one, the column defaults that draw from a sequence and the table that
    /// owns it; the materialized views and sinks over one, directly or through views,
    /// record the fingerprint their checkpoints carry (`RelationDesc::restores_from`), so
    /// they are restored at the next start, not computed again. 42P07 where a new key is
    /// taken (by a relation not renamed away).
    pub(crate) fn follow_renames(&self, renames: &[(String, String)]) -> Result<Followed> {
        use crate::catalog::schemas::split_relation_name;
        use std::collections::BTreeMap;
        let mut changed: BTreeMap<String, crate::catalog::RelationDesc> = BTreeMap::new();
        let current = |changed: &BTreeMap<String, crate::catalog::RelationDesc>, key: &str| {
            changed
                .get(key)
                .cloned()
                .or_else(|| self.catalog.get(key).map(|e| e.desc.clone()))
        };
        let entries = self.catalog.entries();
        for (old, new) in renames {
            let Some(entry) = self.catalog.get(old) else {
                return Err(WeirError::undefined_table(old));
            };
            if new != old
                && self.catalog.get(new).is_some()
                && !renames.iter().any(|(o, _)| o == new)
            {
                let (schema, bare) = split_relation_name(new);
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_TABLE,
                    if split_relation_name(old).0 == schema {
                        format!("relation \"{bare}\" already exists")
                    } else {
                        format!("relation \"{bare}\" already exists in schema \"{schema}\"")
                    },
                ));
            }
            let noun = entry.desc.kind.noun();
            // the graphs over it, directly or through views, are planned from queries that
            // name it anew at the next start: their fingerprints change with the names, so
            // each records the one its checkpoints carry now (restored, not computed again
            // — which would also make a sink write its output again)
            for d in self.views_over(entry.desc.oid) {
                let Some(running) = self.fingerprints.lock().get(&d.desc.oid).cloned() else {
                    continue;
                };
                let digest = crate::dataflow::checkpoint::fingerprint_digest(&running);
                let mut v = current(&changed, &d.desc.name).unwrap_or_else(|| d.desc.clone());
                if !v.restores_from.contains(&digest) {
                    v.restores_from.push(digest);
                    // the oldest go (a checkpoint carries one of the last few)
                    let extra = v.restores_from.len().saturating_sub(RESTORES_FROM_KEPT);
                    v.restores_from.drain(..extra);
                }
                changed.insert(v.name.clone(), v);
            }
            for d in self.catalog.dependents(entry.desc.oid) {
                let mut v = current(&changed, &d.desc.name).unwrap_or_else(|| d.desc.clone());
                if v.kind == RelationKind::Sink && v.query.is_none() {
                    // `CREATE SINK ... FROM view`: it reads the view by OID
                    continue;
                }
                let Some(q) = v.query.as_deref() else {
                    return Err(depended_on(
                        &format!("rename {noun} \"{old}\""),
                        &d,
                        &format!("{noun} \"{old}\""),
                    ));
                };
                v.query = Some(renamed_relation(q, old, new)?);
                changed.insert(v.name.clone(), v);
            }
            for e in &entries {
                let fk = e.desc.foreign_keys.iter().any(|f| f.ref_table == *old);
                let draws = e.desc.defaults.iter().any(|(_, x)| {
                    crate::catalog::sequences::sequence_of_default(x).as_deref() == Some(old)
                });
                let owns = e
                    .desc
                    .options
                    .iter()
                    .any(|(k, v)| k == "weir.owned_sequence" && v == old);
                if !(fk || draws || owns) {
                    continue;
                }
                let mut v = current(&changed, &e.desc.name).unwrap_or_else(|| e.desc.clone());
                super::foreign_keys::follow_referenced(&mut v.foreign_keys, old, new, &[]);
                for (_, x) in v.defaults.iter_mut() {
                    if crate::catalog::sequences::sequence_of_default(x).as_deref() == Some(old) {
                        *x = crate::catalog::sequences::nextval_default(new);
                    }
                }
                for (k, s) in v.options.iter_mut() {
                    if k == "weir.owned_sequence" && s == old {
                        *s = new.clone();
                    }
                }
                changed.insert(v.name.clone(), v);
            }
        }
        let mut renamed = Vec::with_capacity(renames.len());
        for (old, new) in renames {
            let mut d = changed
                .remove(old)
                .or_else(|| self.catalog.get(old).map(|e| e.desc.clone()))
                .ok_or_else(|| WeirError::undefined_table(old))?;
            // as in Postgres, the primary key keeps its name (`t_pkey` of a table renamed)
            let pkey = d.pkey_name();
            d.name = new.clone();
            d.options.retain(|(k, _)| k != "weir.pkey_name");
            if !d.primary_key.is_empty() && d.pkey_name() != pkey {
                d.options.push(("weir.pkey_name".into(), pkey));
            }
            renamed.push((old.clone(), d));
        }
        Ok((renamed, changed.into_values().collect()))
    }
}

impl Engine {
    /// The columns of `table` that view `d`'s query reads, as Postgres records a view's
    /// dependencies: every column its planned query refers to (before optimization, so a
    /// column a subquery selects but nothing uses counts; a `*` is every column the table
    /// had). A column is attributed to the table through its qualifier (the table's name
    /// or an alias of it; a derived table of the same name counts too, conservatively).
    /// None if the query does not plan here (the caller then decides from its text).
    async fn columns_read(
        &self,
        session: &Session,
        d: &crate::catalog::Entry,
        table: &str,
    ) -> Option<std::collections::HashSet<String>> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use datafusion::logical_expr::LogicalPlan;
        let q = d.desc.query.as_deref()?;
        let query = crate::sql::parser::parse_query(q).ok()?;
        let plan = self
            .plan_ast(session, &ast::Statement::Query(query))
            .await
            .ok()?;
        let table_columns: std::collections::HashSet<String> = self
            .catalog
            .get(table)?
            .desc
            .columns
            .iter()
            .map(|c| c.name.clone())
            .collect();
        // the names the table's rows are qualified by: its own, and its aliases
        let mut names = std::collections::HashSet::from([table.to_owned()]);
        let _ = plan.apply_with_subqueries(|node| {
            if let LogicalPlan::SubqueryAlias(a) = node
                && let LogicalPlan::TableScan(t) = a.input.as_ref()
                && crate::sql::parser::reference_key(&t.table_name) == table
            {
                names.insert(a.alias.table().to_owned());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let mut read = std::collections::HashSet::new();
        let _ = plan.apply_with_subqueries(|node| {
            for e in node.expressions() {
                for c in e.column_refs() {
                    let ours = match &c.relation {
                        Some(r) => names.contains(r.table()),
                        // unqualified: the table's if it has such a column
                        None => true,
                    };
                    if ours && table_columns.contains(&c.name) {
                        read.insert(c.name.clone());
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        Some(read)
    }
}

/// Fingerprint digests a view keeps in `restores_from`: its checkpoints carry the
/// fingerprint of the graph it runs, recorded at each rename; the one before it may still
/// be the last checkpoint's for a moment after a restart.
const RESTORES_FROM_KEPT: usize = 4;

/// What [`Engine::follow_renames`] gives: the renamed relations (key now, description
/// under the new key) and the descriptions of those that follow them.
pub(crate) type Followed = (
    Vec<(String, crate::catalog::RelationDesc)>,
    Vec<crate::catalog::RelationDesc>,
);

/// What an ALTER TABLE does to the columns the views over the table read.
struct ColumnChanges {
    dropped: Vec<String>,
    /// (name now, name before the statement)
    renamed: Vec<(String, String)>,
    /// names before the statement
    retyped: Vec<String>,
    /// names of the added columns
    added: Vec<String>,
}

/// The stored queries of the views over `table` (whose new description is `desc`) after
/// `changes`, for those that change: a view reading a dropped column refuses the statement
/// (2BP01, as Postgres), one reading a retyped column too (0A000, as Postgres); a view that
/// selected `*` keeps its columns when columns are added; a renamed column is read under
/// its old name through a derived table (a renamed table is followed by
/// [`Engine::follow_renames`], not here). Which columns a view
/// reads is what both its plan (`read`: [`Engine::columns_read`], if it planned) and its
/// text ([`words_of`]) say it may read.
fn views_following(
    table: &str,
    desc: &crate::catalog::RelationDesc,
    dependents: &[std::sync::Arc<crate::catalog::Entry>],
    read: &std::collections::HashMap<String, std::collections::HashSet<String>>,
    changes: &ColumnChanges,
) -> Result<Vec<(String, String)>> {
    let mut queries = Vec::new();
    for d in dependents {
        let Some(q) = &d.desc.query else {
            continue;
        };
        let (words, wildcard) = words_of(q);
        if !words.contains(table) {
            continue;
        }
        let (noun, view) = (d.desc.kind.noun(), &d.desc.name);
        // both are conservative: the plan refers to every column a `*` of our own rewrites
        // selects (a TUMBLE's derived table), the text to every column of a name it uses
        let reads = |c: &&String| {
            (wildcard || words.contains(*c)) && read.get(view).is_none_or(|cols| cols.contains(*c))
        };
        if let Some(c) = changes.dropped.iter().find(reads) {
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop column {c} of table {table} because other objects depend on it"
                ),
            )
            .with_detail(format!(
                "{noun} {view} depends on column {c} of table {table}"
            ))
            .with_hint(format!("Drop {noun} {view} first.")));
        }
        if let Some(c) = changes.retyped.iter().find(reads) {
            return Err(WeirError::not_supported(
                "cannot alter type of a column used by a view or rule",
            )
            .with_detail(format!("{noun} {view} depends on column \"{c}\"")));
        }
        let mut text = q.clone();
        let renamed = changes.renamed.iter().map(|(_, was)| was).find(reads);
        // an added column a view could see (under `*`, or by a name it uses, which would
        // now be ambiguous or resolve to it): as in Postgres, whose views keep the columns
        // they were created with, the view reads the table's columns as they were
        let added = !changes.added.is_empty()
            && (wildcard || changes.added.iter().any(|c| words.contains(c)));
        let through = if renamed.is_some() || added {
            // the table read through a derived table of its columns before the statement:
            // renamed columns under their old names (so the view keeps reading them, and
            // keeps its own column names), added ones left out
            let items: Vec<String> = desc
                .columns
                .iter()
                .filter(|col| !changes.added.contains(&col.name))
                .map(
                    |col| match changes.renamed.iter().find(|(now, _)| *now == col.name) {
                        Some((_, was)) => format!("{} AS {}", quoted(&col.name), quoted(was)),
                        None => quoted(&col.name),
                    },
                )
                .collect();
            let from = format!("SELECT {} FROM {}", items.join(", "), quoted(&desc.name));
            let from = crate::sql::parser::parse_query(&from)?;
            reading(&text, table, Reads::Through(&from))?
        } else {
            None
        };
        match (through, renamed) {
            (Some(t), _) => text = t,
            (None, Some(c)) => {
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!(
                        "cannot rename column {c} of table {table} because other objects depend on it"
                    ),
                )
                .with_detail(format!(
                    "{noun} {view} reads table {table} in a window function, a temporal join or under a WITH query of its name"
                ))
                .with_hint("Drop the views that read it first, and create them again after."));
            }
            (None, None) => {
                // not read through a derived table (none needed, or a window function's
                // argument, a temporal join, a WITH query of its name): a `*` keeps its
                // columns by a projection over the view; a name made ambiguous by an
                // added column leaves the view failed at its rebuild (told in a NOTICE)
                if added && wildcard {
                    let cols: Vec<String> =
                        d.desc.columns.iter().map(|c| quoted(&c.name)).collect();
                    text = format!("SELECT {} FROM ({text}) AS weir_view", cols.join(", "));
                }
            }
        }
        if text != *q {
            queries.push((view.clone(), text));
        }
    }
    Ok(queries)
}

/// The new descriptions of `dependents` after their relation changed: `queries` (view
/// name, stored query) replace theirs, and `old_oid` in their dependencies is `new_oid`.
fn following(
    dependents: &[std::sync::Arc<crate::catalog::Entry>],
    queries: &[(String, String)],
    old_oid: u32,
    new_oid: u32,
) -> Vec<crate::catalog::RelationDesc> {
    dependents
        .iter()
        .map(|d| {
            let mut v = d.desc.clone();
            for o in v.dependencies.iter_mut().filter(|o| **o == old_oid) {
                *o = new_oid;
            }
            if let Some((_, q)) = queries.iter().find(|(n, _)| *n == v.name) {
                v.query = Some(q.clone());
            }
            v
        })
        .collect()
}

/// The names a query's text uses (identifiers as Postgres folds them) and whether it has a
/// `*` or `x.*` select item: what decides, conservatively, whether a view reads a table
/// (its name appears) and which of its columns (a name, or every column under a `*`).
fn words_of(sql: &str) -> (std::collections::HashSet<String>, bool) {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let mut words = std::collections::HashSet::new();
    let mut wildcard = false;
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        // (a stored query always tokenizes) every word unknown: reads everything
        return (words, true);
    };
    let mut last: Option<&Token> = None;
    for t in &tokens {
        match t {
            Token::Whitespace(_) => continue,
            Token::Word(w) => {
                // a NATURAL join reads the columns both sides have without naming them
                wildcard |= w.keyword == Keyword::NATURAL;
                words.insert(match w.quote_style {
                    Some(_) => w.value.clone(),
                    None => w.value.to_lowercase(),
                });
            }
            Token::Mul => {
                let select_item = match last {
                    None | Some(Token::Comma | Token::Period) => true,
                    Some(Token::Word(w)) => matches!(
                        w.keyword,
                        Keyword::SELECT | Keyword::DISTINCT | Keyword::ALL
                    ),
                    _ => false,
                };
                wildcard |= select_item;
            }

            _ => {}
        }
        last = Some(t);
    }
    (words, wildcard)
}

/// 2BP01: "cannot {what} because other objects depend on it", naming the dependent.
fn depended_on(what: &str, d: &crate::catalog::Entry, on: &str) -> WeirError {
    WeirError::new(
        sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
        format!("cannot {what} because other objects depend on it"),
    )
    .with_detail(format!(
        "{} \"{}\" depends on {on}",
        d.desc.kind.noun(),
        d.desc.name
    ))
}

/// How a stored query is to read a table it names (see [`reading`]).
enum Reads<'a> {
    /// Under a new name (ALTER TABLE ... RENAME TO).
    Renamed(&'a str),
    /// Through a derived table (`(query) AS alias`: ALTER TABLE ... RENAME COLUMN).
    Through(&'a ast::Query),
}

/// A stored query with each FROM item naming `table` changed as `how` says, under the alias
/// it had or else the table's name (so `table.col` still resolves): renamed, or read
/// through a derived table. A table-function argument naming it (`TUMBLE(t, ...)`) is
/// renamed too, but cannot be read through a derived table, nor can a temporal join's
/// table (`FOR SYSTEM_TIME AS OF`): None then, and None where a CTE of the table's name
/// shadows it (which references are the table's is then the planner's to say).
fn reading(sql: &str, table: &str, how: Reads<'_>) -> Result<Option<String>> {
    use datafusion::sql::sqlparser::ast::{VisitMut, VisitorMut};
    struct Visit<'a> {
        table: &'a str,
        how: Reads<'a>,
        blocked: bool,
    }
    impl VisitorMut for Visit<'_> {
        type Break = ();
        fn post_visit_table_factor(
            &mut self,
            tf: &mut ast::TableFactor,
        ) -> std::ops::ControlFlow<()> {
            let ast::TableFactor::Table {
                name,
                alias,
                args,
                version,
                ..
            } = tf
            else {
                return std::ops::ControlFlow::Continue(());
            };
            if let Some(args) = args {
                for a in args.args.iter_mut() {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(
                        ast::Expr::Identifier(i),
                    )) = a
                        && normalize_ident(i) == self.table
                    {
                        match self.how {
                            Reads::Renamed(new) => *i = ast::Ident::with_quote('"', new),
                            Reads::Through(_) => self.blocked = true,
                        }
                    }
                }
                return std::ops::ControlFlow::Continue(());
            }
            if !relation_name(name).is_ok_and(|n| n == self.table) {
                return std::ops::ControlFlow::Continue(());
            }
            let alias = alias.get_or_insert_with(|| ast::TableAlias {
                explicit: true,
                name: ast::Ident::with_quote(
                    '"',
                    crate::sql::parser::bare_relation_name(self.table),
                ),
                columns: vec![],
                at: None,
            });
            match self.how {
                Reads::Renamed(new) => {
                    *name = crate::sql::parser::relation_object_name(new);
                }
                Reads::Through(_) if version.is_some() => self.blocked = true,
                Reads::Through(from) => {
                    *tf = ast::TableFactor::Derived {
                        lateral: false,
                        subquery: Box::new(from.clone()),
                        alias: Some(alias.clone()),
                        sample: None,
                    };
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut q = crate::sql::parser::parse_query(sql)?;
    // a CTE of the table's name shadows it: its references are not the table's
    if crate::engine::plain_views::cte_names(&q).contains(table) {
        return Ok(None);
    }
    let mut v = Visit {
        table,
        how,
        blocked: false,
    };
    let _ = q.visit(&mut v);
    Ok((!v.blocked).then(|| crate::sql::parser::query_text(&q)))
}

/// [`reading`] under a new name.
fn renamed_relation(sql: &str, old: &str, new: &str) -> Result<String> {
    reading(sql, old, Reads::Renamed(new))?.ok_or_else(|| {
        WeirError::not_supported(format!(
            "cannot rename \"{old}\": a view over it has a WITH query of the same name"
        ))
    })
}

/// `name` as an SQL identifier, always quoted (the SQL made here is parsed again, and
/// `sql::pg_text::quote_ident` leaves keywords such as `order` bare).
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Whether Postgres converts a `from` value to `to` on assignment (what `ALTER COLUMN ...
/// TYPE` without USING does): within the numbers, to text, between the date and time types,
/// and element-wise for arrays; not text to anything else, nor numbers to booleans.
fn assignment_cast(from: &SqlType, to: &SqlType) -> bool {
    use SqlType as T;
    let number = |t: &SqlType| {
        matches!(
            t,
            T::Int2 | T::Int4 | T::Int8 | T::Float4 | T::Float8 | T::Numeric(_)
        )
    };
    let dated = |t: &SqlType| matches!(t, T::Date | T::Timestamp(_) | T::TimestampTz(_));
    match (from, to) {
        _ if from == to => true,
        (_, T::Text | T::Varchar(_) | T::Bpchar(_)) => true,
        (T::Varchar(_) | T::Bpchar(_), _) => false,
        (a, b) if number(a) && number(b) => true,
        (a, b) if dated(a) && dated(b) => true,
        (T::Time(_), T::Time(_)) => true,
        (T::Array(a), T::Array(b)) => assignment_cast(a, b),
        _ => false,
    }
}

/// A stored expression's text (a CHECK's, a generated column's) reading column `old` as
/// `new`; text that does not parse is left as it is.
fn rename_column_in(text: &mut String, old: &str, new: &str) {
    let Ok(mut x) = crate::sql::parser::parse_expr_text(text) else {
        return;
    };
    let _ = ast::visit_expressions_mut(&mut x, |id| {
        if let ast::Expr::Identifier(i) = id
            && normalize_ident(i) == old
        {
            *i = if crate::sql::pg_text::quote_ident(new) == new {
                ast::Ident::new(new)
            } else {
                ast::Ident::with_quote('"', new)
            };
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    *text = x.to_string();
}
