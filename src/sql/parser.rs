//! Statement parsing: sqlparser's Postgres dialect for everything standard, plus Weir's own
//! statements and clauses (`APPEND ONLY`, `WATERMARK FOR`, `SHOW TABLES`, session commands).
//!
//! One SQL string may hold several statements; each comes back with its own source text.

use datafusion::sql::sqlparser::ast::{self, ColumnOption, Ident, ObjectName, TableConstraint};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Whitespace};

use crate::error::{Result, WeirError};
use crate::sql::client_stmts::{
    Copy, Declare, Fetch, Subscribe, at_subscribe, parse_close, parse_copy, parse_declare,
    parse_fetch, parse_savepoint_name, parse_subscribe,
};
use crate::sql::types::SqlType;

/// A parsed statement with the text it was parsed from.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub stmt: Statement,
    /// The statement as written (shared: an error raised while its rows stream out is
    /// placed in it).
    pub text: std::sync::Arc<str>,
    /// How many characters of the query string come before `text` (error positions are
    /// the query string's).
    pub offset: usize,
}

/// `LOCK TABLE`: the tables, whether the mode excludes writers, whether it is ACCESS SHARE
/// (a reader's, SELECT privilege enough) and NOWAIT.
#[derive(Debug, Clone, PartialEq)]
pub struct LockStmt {
    pub tables: Vec<String>,
    pub excludes_writers: bool,
    pub read_only: bool,
    pub nowait: bool,
}

#[derive(Debug, Clone)]
pub enum Statement {
    CreateTable(Box<CreateTable>),
    CreateSource(Box<CreateSource>),
    CreateView(Box<CreateView>),
    CreateSink(Box<CreateSink>),
    /// `EXPLAIN CREATE MATERIALIZED VIEW ...`: the dataflow graph, one operator per line.
    ExplainView(Box<CreateView>),
    /// `EXPLAIN ANALYZE MATERIALIZED VIEW name`: the running view's graph with what went
    /// through each operator since the view started.
    ExplainAnalyzeView(String),
    /// Wait until every change acknowledged before is reflected in every view.
    Flush,
    /// `CHECKPOINT`: write a checkpoint of every view now and wait until it is durable.
    Checkpoint,
    Drop(DropStmt),
    /// `SHOW TABLES` and friends: list relations of one kind.
    ShowRelations(RelationKindFilter),
    /// `SHOW name` for a session or server setting.
    ShowVariable(String),
    /// `SET name = value` (also `SET SESSION`, `SET TIME ZONE`); `local`: `SET LOCAL`, which
    /// lasts until the transaction block ends.
    SetVariable {
        name: String,
        value: String,
        local: bool,
    },
    /// `RESET name` / `RESET ALL`.
    ResetVariable(String),
    /// Statements accepted for client compatibility that change nothing (SET TRANSACTION,
    /// DISCARD, ...): the tag to answer with.
    NoOp(&'static str),
    /// `BEGIN [ISOLATION LEVEL ...] [READ ONLY | READ WRITE] [[NOT] DEFERRABLE]`.
    Begin(TxModes),
    /// `SET TRANSACTION modes` (this block), or `SET SESSION CHARACTERISTICS AS
    /// TRANSACTION modes` (the session's default for new blocks).
    SetTransaction {
        session_default: bool,
        modes: TxModes,
    },
    Commit,
    Rollback,
    /// INSERT / UPDATE / DELETE: planned by DataFusion, applied by the table store.
    Dml(Box<ast::Statement>),
    /// A query (SELECT, VALUES, WITH, EXPLAIN): planned and run by DataFusion.
    Query(Box<ast::Statement>),
    Savepoint(String),
    Release(String),
    RollbackTo(String),
    /// A never-ending result: a view's rows, then its changes.
    Subscribe(Subscribe),
    Declare(Box<Declare>),
    Fetch(Fetch),
    /// `CLOSE name`, or `CLOSE ALL` (`None`).
    Close(Option<String>),
    Copy(Box<Copy>),
    /// `DISCARD ALL`: settings back to their defaults, cursors closed.
    DiscardAll,
    /// `DO $$ BEGIN stmt; EXCEPTION WHEN duplicate_object THEN null; END $$`
    /// (`sql/do_block.rs`).
    Do(Box<crate::sql::do_block::DoBlock>),
    /// `LISTEN channel`.
    Listen(String),
    /// `UNLISTEN channel | *` (None: every channel).
    Unlisten(Option<String>),
    /// `NOTIFY channel [, 'payload']`.
    Notify {
        channel: String,
        payload: String,
    },
    /// A large `INSERT ... VALUES` of literals, read without a syntax tree.
    BulkInsert(Box<crate::sql::bulk_insert::ScannedInsert>),
    /// Roles, privileges, ownership and secrets (`sql/security.rs`).
    Security(Box<crate::sql::security::SecurityStmt>),
    /// `CREATE [OR REPLACE] VIEW name [(columns)] AS query`: a plain (not materialized) view.
    CreatePlainView(Box<PlainView>),
    /// `CREATE SEQUENCE [IF NOT EXISTS] name [options]`.
    CreateSequence(Box<CreateSequence>),
    AlterSequence(Box<AlterSequence>),
    AddIdentity(Box<AddIdentity>),
    AlterIdentity(Box<AlterIdentity>),
    /// `REFRESH MATERIALIZED VIEW name`.
    Refresh(String),
    /// `VACUUM ...` / `ANALYZE ...` of these relations (all: none named).
    Maintenance {
        vacuum: bool,
        tables: Vec<String>,
    },
    /// `REINDEX [(options)] {INDEX | TABLE | SCHEMA | DATABASE | SYSTEM} [CONCURRENTLY] name`:
    /// (what, its name, CONCURRENTLY).
    Reindex {
        what: String,
        name: Option<String>,
        concurrently: bool,
    },
    /// `CLUSTER [VERBOSE] [table [USING index]]`.
    Cluster {
        table: Option<String>,
        index: Option<String>,
    },
    /// `SET CONSTRAINTS { ALL | names } { DEFERRED | IMMEDIATE }` (None: ALL).
    SetConstraints {
        names: Option<Vec<String>>,
        deferred: bool,
    },
    /// `TRUNCATE [TABLE] t [, ...] [CONTINUE IDENTITY] [CASCADE | RESTRICT]`: the tables'
    /// rows deleted (a DELETE of each).
    /// `TRUNCATE [TABLE] t [, ...] [CASCADE | RESTRICT]`: the tables, and CASCADE.
    /// `TRUNCATE tables [RESTART IDENTITY] [CASCADE]`: (tables, cascade, restart identity).
    Truncate(Vec<String>, bool, bool),
    /// `LOCK [TABLE] [ONLY] name [, ...] [IN mode MODE] [NOWAIT]`.
    Lock(LockStmt),
    /// `ALTER TABLE name ...` (columns, renames, NOT NULL, defaults).
    AlterTable(Box<ast::AlterTable>),
    /// `COMMENT ON TABLE | VIEW | MATERIALIZED VIEW | SEQUENCE name | COLUMN rel.col IS
    /// 'text' | NULL`.
    Comment(CommentOn),
    /// `MERGE INTO target USING source ON cond WHEN [NOT] MATCHED [AND c] THEN ...`.
    Merge(Box<ast::Merge>),
    /// `ALTER [MATERIALIZED] VIEW | SEQUENCE | INDEX name RENAME TO new`, and `ALTER TABLE
    /// | [MATERIALIZED] VIEW | SEQUENCE name SET SCHEMA s` (`to`: its key in `s`).
    RenameRelation {
        kind: DropKind,
        name: String,
        to: String,
        if_exists: bool,
    },
    /// `CREATE [OR REPLACE] FUNCTION ... LANGUAGE sql`.
    CreateFunction(Box<ast::CreateFunction>),
    DropFunction(Box<ast::DropFunction>),
    /// `CREATE [UNIQUE] INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON table [USING btree
    /// | hash] (columns) [INCLUDE (...)]`.
    CreateIndex(Box<CreateIndex>),
    /// `PREPARE name [(types)] AS statement` (a query, INSERT, UPDATE, DELETE or MERGE).
    Prepare(Box<PrepareStmt>),
    /// `EXECUTE name [(arguments)]`.
    Execute(Box<ExecuteStmt>),
    /// `DEALLOCATE [PREPARE] name`, or `DEALLOCATE ALL` (`None`).
    Deallocate(Option<String>),
    /// `CREATE TABLE name [(columns)] AS query [WITH [NO] DATA]`, and `SELECT ... INTO name`.
    CreateTableAs(Box<CreateTableAs>),
    /// `CREATE EXTENSION [IF NOT EXISTS] name [WITH] [SCHEMA s] [VERSION v] [CASCADE]`.
    CreateExtension {
        name: String,
        if_not_exists: bool,
        schema: Option<String>,
        version: Option<String>,
    },
    /// `DROP EXTENSION [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.
    DropExtension {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `CREATE SCHEMA [IF NOT EXISTS] name [AUTHORIZATION role]`.
    CreateSchema {
        name: String,
        if_not_exists: bool,
        /// `AUTHORIZATION role`: its owner (the current user without).
        owner: Option<String>,
    },
    /// `COMMENT ON SCHEMA name IS 'text' | NULL`.
    CommentOnSchema {
        name: String,
        text: Option<String>,
    },
    /// `ALTER SCHEMA name RENAME TO new` / `ALTER SCHEMA name OWNER TO role`.
    AlterSchema {
        name: String,
        /// `Ok(new name)` or `Err(new owner)`.
        to: std::result::Result<String, String>,
    },
    /// `DROP SCHEMA [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.
    DropSchema {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    /// `CREATE TYPE name AS ENUM ('label', ...)`.
    CreateEnumType {
        name: String,
        labels: Vec<String>,
    },
    /// `ALTER TABLE t ALTER [COLUMN] c SET STATISTICS n | STORAGE s | COMPRESSION m`:
    /// planner and storage settings Weir has no use for, checked as Postgres checks them;
    /// and `ALTER [COLUMN] c DROP EXPRESSION [IF EXISTS]`.
    AlterColumnSetting {
        table: String,
        if_exists: bool,
        column: String,
        /// `statistics`, `storage` or `compression`; `drop expression` (value: `if exists`
        /// or empty) for `DROP EXPRESSION [IF EXISTS]`.
        what: String,
        value: String,
    },
    /// `ALTER TABLE | INDEX | MATERIALIZED VIEW [IF EXISTS] name SET (param = value, ...) |
    /// RESET (param, ...)`: Postgres' storage parameters, checked and ignored
    /// (`sql/storage_parameters.rs`).
    StorageParameters {
        relation: String,
        /// What the statement says it alters: `TABLE`, `INDEX` (an index's parameters) or
        /// `MATERIALIZED VIEW`.
        kind: &'static str,
        if_exists: bool,
        /// None: `RESET`.
        set: Option<Vec<(String, Option<String>)>>,
    },
    /// `ALTER TYPE name ...`.
    AlterType {
        name: String,
        op: AlterTypeOp,
    },
    /// `CREATE DOMAIN name [AS] type [COLLATE c] [DEFAULT e] [[CONSTRAINT c] NOT NULL |
    /// NULL | CHECK (e) [NOT VALID]] ...`.
    CreateDomain(Box<CreateDomain>),
    /// `ALTER DOMAIN name ...`.
    AlterDomain {
        name: String,
        op: AlterDomainOp,
    },
    /// `DROP DOMAIN [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.
    DropDomain {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
}

/// `CREATE DOMAIN`, as written: the base type is resolved by the engine (it may be an enum).
#[derive(Debug, Clone)]
pub struct CreateDomain {
    pub name: String,
    pub base: ast::DataType,
    pub not_null: bool,
    /// `DEFAULT expr`: its text.
    pub default: Option<String>,
    /// (`CONSTRAINT name`, the CHECK's expression text, NOT VALID).
    pub checks: Vec<(Option<String>, String, bool)>,
}

/// What an `ALTER DOMAIN` does.
#[derive(Debug, Clone)]
pub enum AlterDomainOp {
    /// `SET DEFAULT expr` (Some: its text) / `DROP DEFAULT`.
    Default(Option<String>),
    /// `SET NOT NULL` (true) / `DROP NOT NULL`.
    NotNull(bool),
    /// `ADD [CONSTRAINT name] CHECK (expr) [NOT VALID]`.
    AddCheck {
        name: Option<String>,
        expr: String,
        not_valid: bool,
    },
    /// `DROP CONSTRAINT [IF EXISTS] name [RESTRICT | CASCADE]`.
    DropConstraint { name: String, if_exists: bool },
    /// `RENAME CONSTRAINT a TO b`.
    RenameConstraint { from: String, to: String },
    /// `VALIDATE CONSTRAINT name`.
    ValidateConstraint(String),
    /// `RENAME TO new`.
    Rename(String),
    /// `OWNER TO role`.
    Owner(String),
    /// `SET SCHEMA s`.
    SetSchema(String),
}

/// What an `ALTER TYPE` of an enum type does.
#[derive(Debug, Clone)]
pub enum AlterTypeOp {
    /// `ADD VALUE [IF NOT EXISTS] 'label' [BEFORE | AFTER 'other']`.
    AddValue {
        label: String,
        if_not_exists: bool,
        position: crate::catalog::user_types::LabelPosition,
    },
    /// `RENAME VALUE 'a' TO 'b'`.
    RenameValue { from: String, to: String },
    /// `RENAME TO new`.
    Rename(String),
    /// `OWNER TO role`.
    Owner(String),
    /// `SET SCHEMA s`.
    SetSchema(String),
}

/// `ON COMMIT` of a temporary table: what the end of each transaction (a block, or a
/// statement outside one) does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCommit {
    PreserveRows,
    DeleteRows,
    Drop,
}

impl OnCommit {
    pub fn sql(self) -> &'static str {
        match self {
            OnCommit::PreserveRows => "PRESERVE ROWS",
            OnCommit::DeleteRows => "DELETE ROWS",
            OnCommit::Drop => "DROP",
        }
    }
}

/// `[ON COMMIT {PRESERVE ROWS | DELETE ROWS | DROP}]`.
fn parse_on_commit(p: &mut Parser) -> Result<Option<OnCommit>> {
    if !p.parse_keywords(&[Keyword::ON, Keyword::COMMIT]) {
        return Ok(None);
    }
    Ok(Some(if p.parse_keyword(Keyword::DROP) {
        OnCommit::Drop
    } else if p.parse_keyword(Keyword::DELETE) {
        expect_word(p, "ROWS")?;
        OnCommit::DeleteRows
    } else {
        expect_word(p, "PRESERVE")?;
        expect_word(p, "ROWS")?;
        OnCommit::PreserveRows
    }))
}

/// `CREATE TABLE name [(columns)] AS query [WITH [NO] DATA]`: a table of the query's
/// columns (renamed by `columns`), filled with its rows unless WITH NO DATA.
#[derive(Debug, Clone)]
pub struct CreateTableAs {
    pub name: String,
    pub if_not_exists: bool,
    pub temporary: Option<OnCommit>,
    pub columns: Vec<String>,
    pub query: Box<ast::Query>,
    pub with_data: bool,
}

/// `PREPARE name [(types)] AS body`: the body keeps its `$n` placeholders.
#[derive(Debug, Clone)]
pub struct PrepareStmt {
    pub name: String,
    pub types: Vec<ast::DataType>,
    pub body: Parsed,
}

/// `EXECUTE name [(arguments)]`: each argument an expression standing for its `$n`.
#[derive(Debug, Clone)]
pub struct ExecuteStmt {
    pub name: String,
    pub args: Vec<ast::Expr>,
}

#[derive(Debug, Clone)]
pub struct CreateIndex {
    pub name: Option<String>,
    pub table: String,
    /// Per key: a column's name, or an expression key's text.
    pub columns: Vec<String>,
    /// Per key: Some(the expression's text) for an expression key (`lower(email)`); empty
    /// when every key is a column.
    pub expressions: Vec<Option<String>>,
    /// A partial index's `WHERE` predicate, its text.
    pub predicate: Option<String>,
    pub unique: bool,
    pub if_not_exists: bool,
    /// Made for a UNIQUE constraint (`CREATE TABLE`, `ALTER TABLE ... ADD UNIQUE`).
    pub constraint: bool,
    /// `NULLS NOT DISTINCT`.
    pub nulls_not_distinct: bool,
}

/// A `CREATE INDEX` sqlparser parsed, or a refusal of what it asks that Weir does not do.
fn create_index(ci: ast::CreateIndex) -> Result<Statement> {
    if let Some(using) = &ci.using {
        let u = using.to_string().to_ascii_lowercase();
        if u != "btree" && u != "hash" {
            return Err(WeirError::not_supported(format!(
                "index access method \"{u}\" is not supported (btree and hash are)"
            )));
        }
    }
    // `WITH (fillfactor = 80)`: storage parameters, checked and ignored
    let mut params = Vec::with_capacity(ci.with.len());
    for w in &ci.with {
        match w {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => {
                let value = match right.as_ref() {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => n.clone(),
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        ast::Value::Boolean(b) => b.to_string(),
                        other => other.to_string(),
                    },
                    other => other.to_string(),
                };
                params.push((left.to_string().to_ascii_lowercase(), Some(value)));
            }
            other => params.push((other.to_string().to_ascii_lowercase(), None)),
        }
    }
    crate::sql::storage_parameters::check(crate::sql::storage_parameters::Of::Index, &params)?;
    if !ci.index_options.is_empty() || !ci.alter_options.is_empty() {
        return Err(WeirError::not_supported(
            "CREATE INDEX options are not supported",
        ));
    }
    let mut columns = Vec::with_capacity(ci.columns.len());
    let mut expressions = Vec::with_capacity(ci.columns.len());
    for c in &ci.columns {
        let mut e = &c.column.expr;
        while let ast::Expr::Nested(inner) = e {
            e = inner;
        }
        match e {
            ast::Expr::Identifier(id) => {
                columns.push(normalize_ident(id));
                expressions.push(None);
            }
            other => {
                columns.push(other.to_string());
                expressions.push(Some(other.to_string()));
            }
        }
    }
    if expressions.iter().all(Option::is_none) {
        expressions.clear();
    }
    Ok(Statement::CreateIndex(Box::new(CreateIndex {
        // (an index is in its table's schema: its name is not qualified)
        name: ci
            .name
            .as_ref()
            .map(|n| relation_name(n).map(|k| bare_relation_name(&k).to_owned()))
            .transpose()?,
        table: relation_name(&ci.table_name)?,
        columns,
        expressions,
        predicate: ci.predicate.as_ref().map(|p| p.to_string()),
        unique: ci.unique,
        if_not_exists: ci.if_not_exists,
        constraint: false,
        nulls_not_distinct: ci.nulls_distinct == Some(false),
    })))
}

#[derive(Debug, Clone)]
pub struct CreateSequence {
    pub name: String,
    pub if_not_exists: bool,
    pub options: SeqOptions,
}

/// A sequence's options as written (None: not written; at CREATE, Postgres' default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeqOptions {
    pub start: Option<i64>,
    pub increment: Option<i64>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub cycle: bool,
    /// `NO MINVALUE` / `NO MAXVALUE` / `NO CYCLE` written (ALTER: back to the default).
    pub no_min: bool,
    pub no_max: bool,
    pub no_cycle: bool,
    /// `AS smallint|integer|bigint`: the type's (min, max), the default bounds.
    pub type_bounds: Option<(i64, i64)>,
    /// ALTER's `RESTART [[WITH] n]`: Some(None) restarts at the start value.
    pub restart: Option<Option<i64>>,
    /// `OWNED BY table.column` (Some(Some)) or `OWNED BY NONE` (Some(None)).
    pub owned_by: Option<Option<(String, String)>>,
    /// An identity column's `SEQUENCE NAME name` (pg_dump writes it).
    pub sequence_name: Option<String>,
}

impl SeqOptions {
    /// The lower and upper bound written, or the default of the `AS` type (ascending
    /// sequences default their maximum to it, descending ones their minimum).
    pub fn bounds(&self, ascending: bool) -> (Option<i64>, Option<i64>) {
        let (tmin, tmax) = match self.type_bounds {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => (None, None),
        };
        (
            self.min.or(if ascending { None } else { tmin }),
            self.max.or(if ascending { tmax } else { None }),
        )
    }
}

/// `ALTER TABLE [IF EXISTS] [ONLY] table ALTER [COLUMN] column ADD GENERATED { ALWAYS | BY
/// DEFAULT } AS IDENTITY [( sequence options )]` (how pg_dump restores identity columns).
#[derive(Debug, Clone)]
pub struct AddIdentity {
    pub table: String,
    pub if_exists: bool,
    pub column: String,
    pub always: bool,
    pub options: SeqOptions,
}

/// `ALTER SEQUENCE [IF EXISTS] name options`.
#[derive(Debug, Clone)]
pub struct AlterSequence {
    pub name: String,
    pub if_exists: bool,
    pub options: SeqOptions,
}

/// Moves the parser back to token index `start` (an earlier `p.index()`), never further:
/// `prev_token` skips whitespace, so stepping back until the index is not above `start`
/// can land on the word before it.
pub fn rewind(p: &mut Parser, start: usize) {
    while p.index() > start {
        p.prev_token();
    }
    if p.index() < start {
        p.next_token();
    }
}

/// `ALTER [MATERIALIZED] VIEW [IF EXISTS] name RENAME TO new` and `ALTER SEQUENCE name
/// RENAME TO new` (after ALTER); None (nothing consumed) for anything else.
fn parse_alter_rename(p: &mut Parser) -> Result<Option<Statement>> {
    let start = p.index();
    let kind = if p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
        DropKind::MaterializedView
    } else if p.parse_keyword(Keyword::VIEW) {
        DropKind::View
    } else if p.parse_keyword(Keyword::SEQUENCE) {
        DropKind::Sequence
    } else if p.parse_keyword(Keyword::INDEX) {
        DropKind::Index
    } else if p.parse_keyword(Keyword::TABLE) {
        // (only SET SCHEMA: sqlparser reads the rest of ALTER TABLE)
        DropKind::Table
    } else {
        return Ok(None);
    };
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = match p.parse_object_name(false) {
        Ok(n) => relation_name(&n)?,
        Err(_) => {
            rewind(p, start);
            return Ok(None);
        }
    };
    // `SET SCHEMA s`: the relation's key in schema s (`ALTER INDEX ... SET SCHEMA` is not
    // one: an index is in its table's schema)
    if kind != DropKind::Index && p.parse_keywords(&[Keyword::SET, Keyword::SCHEMA]) {
        let schema = normalize_ident(&p.parse_identifier()?);
        return Ok(Some(Statement::RenameRelation {
            kind,
            to: relation_key(Some(&schema), bare_relation_name(&name)),
            name,
            if_exists,
        }));
    }
    if kind == DropKind::Table || !p.parse_keyword(Keyword::RENAME) {
        rewind(p, start);
        return Ok(None);
    }
    p.expect_keyword_is(Keyword::TO)?;
    let to = unresolved_relation_name(&p.parse_object_name(false)?)?;
    // (a relation stays in its schema; an index's name is not qualified)
    let to = match (kind, name.split_once('.')) {
        (DropKind::Index, _) => to,
        (_, Some((schema, _))) if !to.contains('.') => relation_key(Some(schema), &to),
        _ => to,
    };
    Ok(Some(Statement::RenameRelation {
        kind,
        name,
        to,
        if_exists,
    }))
}

/// `VACUUM [FULL] [FREEZE] [VERBOSE] [ANALYZE] [(options)] [table [(columns)], ...]` and
/// `ANALYZE [VERBOSE] [(options)] [table [(columns)], ...]`, after the first word.
fn parse_maintenance(p: &mut Parser, vacuum: bool) -> Result<Statement> {
    if p.consume_token(&Token::LParen) {
        // (option [value], ...): words and values, not checked beyond their form
        let mut depth = 1;
        while depth > 0 {
            match p.next_token().token {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                Token::EOF => return Err(WeirError::syntax("unterminated option list")),
                _ => {}
            }
        }
    } else {
        while ["FULL", "FREEZE", "VERBOSE", "ANALYZE", "ANALYSE"]
            .iter()
            .any(|w| (vacuum || *w == "VERBOSE") && parse_word(p, w))
        {}
    }
    let mut tables = Vec::new();
    if !matches!(p.peek_token().token, Token::EOF | Token::SemiColon) {
        loop {
            tables.push(relation_name(&p.parse_object_name(false)?)?);
            if p.consume_token(&Token::LParen) {
                loop {
                    p.parse_identifier()?;
                    if !p.consume_token(&Token::Comma) {
                        break;
                    }
                }
                p.expect_token(&Token::RParen)?;
            }
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
    }
    Ok(Statement::Maintenance { vacuum, tables })
}

/// `CREATE SEQUENCE [IF NOT EXISTS] name` and its options in any order, as Postgres takes
/// them (sqlparser wants a fixed order).
fn parse_create_sequence(p: &mut Parser) -> Result<CreateSequence> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = created_relation_name(&p.parse_object_name(false)?)?;
    let options = parse_sequence_options(p, SeqContext::Create)?;
    Ok(CreateSequence {
        name,
        if_not_exists,
        options,
    })
}

/// `ALTER SEQUENCE [IF EXISTS] name options` (after ALTER SEQUENCE).
fn parse_alter_sequence(p: &mut Parser) -> Result<AlterSequence> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = relation_name(&p.parse_object_name(false)?)?;
    let options = parse_sequence_options(p, SeqContext::Alter)?;
    Ok(AlterSequence {
        name,
        if_exists,
        options,
    })
}

/// `ALTER TABLE ... ALTER [COLUMN] c ADD GENERATED ... AS IDENTITY [(options)]` after ALTER;
/// None (nothing consumed) for any other ALTER.
/// `TABLE [IF EXISTS] [ONLY] name ALTER [COLUMN] column` (after `ALTER`) when what follows
/// is taken by `then`: (IF EXISTS, table, column); else None, nothing consumed.
fn alter_column_head(
    p: &mut Parser,
    then: impl FnOnce(&mut Parser) -> bool,
) -> Option<(bool, ObjectName, ast::Ident)> {
    let start = p.index();
    let head = (|| -> Option<(bool, ObjectName, ast::Ident)> {
        if !p.parse_keyword(Keyword::TABLE) {
            return None;
        }
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let _ = p.parse_keyword(Keyword::ONLY);
        let name = p.parse_object_name(false).ok()?;
        if !p.parse_keyword(Keyword::ALTER) {
            return None;
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let column = p.parse_identifier().ok()?;
        then(p).then_some((if_exists, name, column))
    })();
    if head.is_none() {
        rewind(p, start);
    }
    head
}

/// `ALTER TABLE t ALTER [COLUMN] c SET { STATISTICS n | STORAGE s | COMPRESSION m }`.
fn parse_alter_column_setting(p: &mut Parser) -> Result<Option<Statement>> {
    let setting = |p: &mut Parser| {
        let next = p.peek_nth_token(1);
        let known = matches!(&next.token, Token::Word(w) if w.quote_style.is_none()
            && ["statistics", "storage", "compression"].iter().any(|k| w.value.eq_ignore_ascii_case(k)));
        known && p.parse_keyword(Keyword::SET)
    };
    let start = p.index();
    // `DROP EXPRESSION [IF EXISTS]`: a stored generated column becomes a plain one
    if let Some((if_exists, name, column)) =
        alter_column_head(p, |p| parse_word(p, "DROP") && parse_word(p, "EXPRESSION"))
    {
        let skip_missing = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        return Ok(Some(Statement::AlterColumnSetting {
            table: relation_name(&name)?,
            if_exists,
            column: normalize_ident(&column),
            what: "drop expression".into(),
            value: if skip_missing { "if exists" } else { "" }.into(),
        }));
    }
    rewind(p, start);
    let Some((if_exists, name, column)) = alter_column_head(p, setting) else {
        return Ok(None);
    };
    let what = match p.next_token().token {
        Token::Word(w) => w.value.to_ascii_lowercase(),
        _ => return Err(WeirError::internal("a column setting without its name")),
    };
    let value = if what == "statistics" {
        let negative = p.consume_token(&Token::Minus);
        let n = p.parse_literal_uint()? as i64;
        if negative { -n } else { n }.to_string()
    } else {
        match p.next_token().token {
            Token::Word(w) => w.value.to_ascii_lowercase(),
            other => {
                return Err(WeirError::syntax(format!(
                    "syntax error at or near \"{other}\""
                )));
            }
        }
    };
    Ok(Some(Statement::AlterColumnSetting {
        table: relation_name(&name)?,
        if_exists,
        column: normalize_ident(&column),
        what,
        value,
    }))
}

/// `ALTER TABLE | INDEX | MATERIALIZED VIEW [IF EXISTS] [ONLY] name SET ( param [= value],
/// ... ) | RESET ( param, ... )` (after ALTER), as the only action.
fn parse_alter_storage_parameters(p: &mut Parser) -> Result<Option<Statement>> {
    let start = p.index();
    let kind = if p.parse_keyword(Keyword::TABLE) {
        "TABLE"
    } else if p.parse_keyword(Keyword::INDEX) {
        "INDEX"
    } else if p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
        "MATERIALIZED VIEW"
    } else {
        return Ok(None);
    };
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let _ = p.parse_keyword(Keyword::ONLY);
    let name = p.parse_object_name(false).ok();
    let reset = p.parse_keyword(Keyword::RESET);
    let (Some(name), true) = (
        name,
        (reset || p.parse_keyword(Keyword::SET)) && p.peek_token().token == Token::LParen,
    ) else {
        rewind(p, start);
        return Ok(None);
    };
    p.next_token();
    let mut params = Vec::new();
    loop {
        // `name` or `namespace.name` (`toast.autovacuum_enabled`)
        let param = p
            .parse_object_name(false)?
            .0
            .iter()
            .map(|part| part.to_string().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(".");
        let value = if !reset && p.consume_token(&Token::Eq) {
            let t = p.next_token();
            Some(match t.token {
                Token::Number(n, _) => n,
                Token::SingleQuotedString(v) => v,
                Token::Word(w) => w.value,
                Token::Minus => match p.next_token().token {
                    Token::Number(n, _) => format!("-{n}"),
                    other => {
                        return Err(WeirError::syntax(format!(
                            "syntax error at or near \"{other}\""
                        )));
                    }
                },
                other => {
                    return Err(WeirError::syntax(format!(
                        "syntax error at or near \"{other}\""
                    )));
                }
            })
        } else {
            None
        };
        params.push((param, value));
        if p.consume_token(&Token::RParen) {
            break;
        }
        p.expect_token(&Token::Comma)?;
    }
    if p.peek_token().token != Token::EOF && p.peek_token().token != Token::SemiColon {
        return Err(WeirError::not_supported(
            "SET (...) or RESET (...) of storage parameters beside other ALTER actions is not supported",
        ));
    }
    Ok(Some(Statement::StorageParameters {
        relation: relation_name(&name)?,
        kind,
        if_exists,
        set: (!reset).then_some(params),
    }))
}

/// `ALTER TABLE [IF EXISTS] t ALTER [COLUMN] c` then `SET GENERATED { ALWAYS | BY DEFAULT }`,
/// `SET sequence_option`, `RESTART [[WITH] n]` (any of them, one after another), or
/// `DROP IDENTITY [IF EXISTS]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterIdentity {
    pub table: String,
    pub if_exists: bool,
    pub column: String,
    /// `SET GENERATED ALWAYS` (true) / `BY DEFAULT` (false).
    pub generated: Option<bool>,
    /// The options for the identity's sequence (RESTART among them).
    pub options: SeqOptions,
    /// `DROP IDENTITY`: Some(IF EXISTS written).
    pub drop: Option<bool>,
}

fn parse_alter_identity(p: &mut Parser) -> Result<Option<AlterIdentity>> {
    const OPTIONS: [&str; 9] = [
        "generated",
        "increment",
        "minvalue",
        "maxvalue",
        "start",
        "restart",
        "cache",
        "cycle",
        "no",
    ];
    let word = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_lowercase(),
        _ => String::new(),
    };
    let head = alter_column_head(p, |p| {
        let (a, b) = (
            word(&p.peek_token().token),
            word(&p.peek_nth_token(1).token),
        );
        a == "restart"
            || (a == "set" && OPTIONS.contains(&b.as_str()))
            || (a == "drop" && b == "identity")
    });
    let Some((if_exists, name, column)) = head else {
        return Ok(None);
    };
    let mut a = AlterIdentity {
        table: relation_name(&name)?,
        if_exists,
        column: normalize_ident(&column),
        generated: None,
        options: SeqOptions::default(),
        drop: None,
    };
    if parse_word(p, "DROP") {
        expect_word(p, "IDENTITY")?;
        a.drop = Some(p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]));
        return Ok(Some(a));
    }
    loop {
        let set = parse_word(p, "SET");
        if set && parse_word(p, "GENERATED") {
            a.generated = Some(if p.parse_keyword(Keyword::ALWAYS) {
                true
            } else {
                p.expect_keywords(&[Keyword::BY, Keyword::DEFAULT])?;
                false
            });
            continue;
        }
        if !set && word(&p.peek_token().token) != "restart" {
            break;
        }
        // one option (SET's) or RESTART: the sequence's own parser, merged in
        let o = parse_sequence_options(p, SeqContext::Alter)?;
        let m = &mut a.options;
        m.start = o.start.or(m.start);
        m.increment = o.increment.or(m.increment);
        m.min = o.min.or(m.min);
        m.max = o.max.or(m.max);
        m.cycle |= o.cycle;
        m.no_min |= o.no_min;
        m.no_max |= o.no_max;
        m.no_cycle |= o.no_cycle;
        m.restart = o.restart.or(m.restart);
    }
    Ok(Some(a))
}

fn parse_alter_add_identity(p: &mut Parser) -> Result<Option<AddIdentity>> {
    let head = alter_column_head(p, |p| p.parse_keywords(&[Keyword::ADD, Keyword::GENERATED]));
    let Some((if_exists, name, column)) = head else {
        return Ok(None);
    };
    let always = if p.parse_keyword(Keyword::ALWAYS) {
        true
    } else {
        p.expect_keywords(&[Keyword::BY, Keyword::DEFAULT])?;
        false
    };
    p.expect_keywords(&[Keyword::AS, Keyword::IDENTITY])?;
    let options = if p.consume_token(&Token::LParen) {
        let o = parse_sequence_options(p, SeqContext::Identity)?;
        p.expect_token(&Token::RParen)?;
        o
    } else {
        SeqOptions::default()
    };
    Ok(Some(AddIdentity {
        table: relation_name(&name)?,
        if_exists,
        column: normalize_ident(&column),
        always,
        options,
    }))
}

/// Where sequence options are written: each place takes a few of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SeqContext {
    Create,
    /// `RESTART`
    Alter,
    /// `SEQUENCE NAME`
    Identity,
}

/// A sequence's options in any order, up to the first word that is not one.
fn parse_sequence_options(p: &mut Parser, at: SeqContext) -> Result<SeqOptions> {
    let alter = at == SeqContext::Alter;
    let mut o = SeqOptions::default();
    let int = |p: &mut Parser| -> Result<i64> {
        let neg = p.consume_token(&Token::Minus);
        let t = p.next_token();
        match &t.token {
            Token::Number(n, _) => n
                .parse::<i64>()
                .map(|v| if neg { -v } else { v })
                .map_err(|_| WeirError::syntax(format!("{n} is not a bigint"))),
            _ => Err(syntax_near(&t)),
        }
    };
    let is_number = |p: &Parser| matches!(p.peek_token().token, Token::Number(..) | Token::Minus);
    loop {
        if parse_word(p, "INCREMENT") {
            let _ = parse_word(p, "BY");
            o.increment = Some(int(p)?);
        } else if parse_word(p, "MINVALUE") {
            o.min = Some(int(p)?);
        } else if parse_word(p, "MAXVALUE") {
            o.max = Some(int(p)?);
        } else if parse_word(p, "START") {
            let _ = parse_word(p, "WITH");
            o.start = Some(int(p)?);
        } else if alter && parse_word(p, "RESTART") {
            let with = parse_word(p, "WITH");
            o.restart = Some(if with || is_number(p) {
                Some(int(p)?)
            } else {
                None
            });
        } else if at == SeqContext::Identity && p.parse_keyword(Keyword::SEQUENCE) {
            expect_word(p, "NAME")?;
            o.sequence_name = Some(relation_name(&p.parse_object_name(false)?)?);
        } else if parse_word(p, "CACHE") {
            int(p)?;
        } else if parse_word(p, "CYCLE") {
            o.cycle = true;
        } else if parse_word(p, "NO") {
            if parse_word(p, "MINVALUE") {
                o.no_min = true;
            } else if parse_word(p, "MAXVALUE") {
                o.no_max = true;
            } else if parse_word(p, "CYCLE") {
                o.no_cycle = true;
            } else {
                return Err(syntax_near(&p.peek_token()));
            }
        } else if parse_word(p, "AS") {
            let t = p.parse_data_type()?;
            o.type_bounds = Some(match SqlType::from_ast(&t)? {
                SqlType::Int2 => (i16::MIN as i64, i16::MAX as i64),
                SqlType::Int4 => (i32::MIN as i64, i32::MAX as i64),
                SqlType::Int8 => (i64::MIN, i64::MAX),
                _ => {
                    return Err(WeirError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        "sequence type must be smallint, integer, or bigint",
                    ));
                }
            });
        } else if parse_word(p, "OWNED") {
            p.expect_keyword_is(Keyword::BY)?;
            let n = p.parse_object_name(false)?;
            o.owned_by = Some(match n.0.len() {
                1 if n.to_string().eq_ignore_ascii_case("none") => None,
                1 => {
                    return Err(WeirError::syntax("invalid OWNED BY option")
                        .with_hint("Specify OWNED BY table.column or OWNED BY NONE."));
                }
                _ => {
                    let parts: Vec<String> =
                        n.0.iter()
                            .filter_map(|p| p.as_ident().map(normalize_ident))
                            .collect();
                    let [.., t, c] = parts.as_slice() else {
                        return Err(WeirError::syntax(format!("invalid OWNED BY option: {n}")));
                    };
                    // (`OWNED BY app.t.c`: a table of a user schema)
                    let t = match parts.as_slice() {
                        [s, _, _] => relation_key(Some(s), t),
                        _ => t.clone(),
                    };
                    Some((t, c.clone()))
                }
            });
        } else {
            break;
        }
    }
    Ok(o)
}

/// A column definition. sqlparser reads an identity column's sequence options in one
/// order only (`INCREMENT`, `MINVALUE`, `MAXVALUE`, `START`, `CACHE`, `CYCLE`); Postgres
/// takes them in any (`GENERATED ALWAYS AS IDENTITY (START WITH 5 INCREMENT BY 2)`, as
/// SQLAlchemy writes them): a definition sqlparser refuses is read again here, its
/// `GENERATED ... AS IDENTITY (...)` with [`parse_sequence_options`].
fn column_def(p: &mut Parser) -> Result<ast::ColumnDef> {
    let start = p.index();
    let first = match p.parse_column_def() {
        // (`UNIQUE NULLS NOT DISTINCT`: sqlparser stops before NULLS; read again below)
        Ok(_) if matches!(&p.peek_token().token, Token::Word(w) if w.keyword == Keyword::NULLS) => {
            None
        }
        Ok(def) => return Ok(def),
        Err(e) => Some(e),
    };
    rewind(p, start);
    let again = (|| -> Result<ast::ColumnDef> {
        let name = p.parse_identifier()?;
        let data_type = p.parse_data_type()?;
        let mut options = Vec::new();
        loop {
            let constraint = if p.parse_keyword(Keyword::CONSTRAINT) {
                Some(p.parse_identifier()?)
            } else {
                None
            };
            let option = if p.parse_keyword(Keyword::GENERATED) {
                let generated_as = if p.parse_keyword(Keyword::ALWAYS) {
                    ast::GeneratedAs::Always
                } else {
                    p.expect_keywords(&[Keyword::BY, Keyword::DEFAULT])?;
                    ast::GeneratedAs::ByDefault
                };
                p.expect_keywords(&[Keyword::AS, Keyword::IDENTITY])?;
                let o = if p.consume_token(&Token::LParen) {
                    let o = parse_sequence_options(p, SeqContext::Create)?;
                    p.expect_token(&Token::RParen)?;
                    o
                } else {
                    SeqOptions::default()
                };
                Some(ast::ColumnOption::Generated {
                    generated_as,
                    sequence_options: Some(ast_sequence_options(&o)),
                    generation_expr: None,
                    generation_expr_mode: None,
                    generated_keyword: true,
                })
            } else {
                match p.parse_optional_column_option()? {
                    // `UNIQUE NULLS [NOT] DISTINCT` (sqlparser reads it in table
                    // constraints only)
                    Some(ast::ColumnOption::Unique(mut u)) => {
                        if p.parse_keywords(&[Keyword::NULLS, Keyword::NOT, Keyword::DISTINCT]) {
                            u.nulls_distinct = ast::NullsDistinctOption::NotDistinct;
                        } else if p.parse_keywords(&[Keyword::NULLS, Keyword::DISTINCT]) {
                            u.nulls_distinct = ast::NullsDistinctOption::Distinct;
                        }
                        Some(ast::ColumnOption::Unique(u))
                    }
                    other => other,
                }
            };
            match (option, constraint) {
                (Some(option), name) => options.push(ast::ColumnOptionDef { name, option }),
                (None, None) => break,
                (None, Some(_)) => return Err(syntax_near(&p.peek_token())),
            }
        }
        Ok(ast::ColumnDef {
            name,
            data_type,
            options,
        })
    })();
    again.map_err(|e| match first {
        Some(f) => f.into(),
        None => e,
    })
}

/// [`SeqOptions`] as sqlparser's (what [`sequence_options`] reads back).
fn ast_sequence_options(o: &SeqOptions) -> Vec<ast::SequenceOptions> {
    let n = |v: i64| ast::Expr::value(ast::Value::Number(v.to_string(), false));
    let mut out = Vec::new();
    if let Some(i) = o.increment {
        out.push(ast::SequenceOptions::IncrementBy(n(i), true));
    }
    if let Some(m) = o.min {
        out.push(ast::SequenceOptions::MinValue(Some(n(m))));
    } else if o.no_min {
        out.push(ast::SequenceOptions::MinValue(None));
    }
    if let Some(m) = o.max {
        out.push(ast::SequenceOptions::MaxValue(Some(n(m))));
    } else if o.no_max {
        out.push(ast::SequenceOptions::MaxValue(None));
    }
    if let Some(s) = o.start {
        out.push(ast::SequenceOptions::StartWith(n(s), true));
    }
    if o.cycle {
        out.push(ast::SequenceOptions::Cycle(false));
    } else if o.no_cycle {
        out.push(ast::SequenceOptions::Cycle(true));
    }
    out
}

/// Sequence options as numbers (`INCREMENT BY -1`, `START 100`...).
pub fn sequence_options(opts: &[ast::SequenceOptions]) -> Result<SeqOptions> {
    let num = |e: &ast::Expr| -> Result<i64> {
        let t = e.to_string().replace(' ', "");
        t.parse::<i64>()
            .map_err(|_| WeirError::syntax(format!("sequence option {e} is not an integer")))
    };
    let (mut start, mut inc, mut min, mut max, mut cycle) = (None, None, None, None, false);
    for o in opts {
        match o {
            ast::SequenceOptions::IncrementBy(e, _) => inc = Some(num(e)?),
            ast::SequenceOptions::MinValue(e) => min = e.as_ref().map(num).transpose()?,
            ast::SequenceOptions::MaxValue(e) => max = e.as_ref().map(num).transpose()?,
            ast::SequenceOptions::StartWith(e, _) => start = Some(num(e)?),
            ast::SequenceOptions::Cache(_) => {}
            ast::SequenceOptions::Cycle(no) => cycle = !*no,
        }
    }
    Ok(SeqOptions {
        start,
        increment: inc,
        min,
        max,
        cycle,
        ..Default::default()
    })
}

#[derive(Debug, Clone)]
pub struct PlainView {
    pub name: String,
    pub or_replace: bool,
    pub columns: Vec<String>,
    pub query: Box<ast::Query>,
}

/// Transaction modes of BEGIN / SET TRANSACTION.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxModes {
    /// Lower case, words joined by one space (`read committed`).
    pub isolation: Option<String>,
    pub read_only: Option<bool>,
    pub deferrable: Option<bool>,
}

/// Transaction modes from the words after BEGIN [WORK | TRANSACTION] / SET TRANSACTION.
fn tx_modes(words: &[String]) -> Result<TxModes> {
    let mut m = TxModes::default();
    let mut i = 0;
    let w = |i: usize| words.get(i).map(String::as_str);
    while i < words.len() {
        match (w(i), w(i + 1)) {
            (Some(","), _) => i += 1,
            (Some("isolation"), Some("level")) => {
                let (level, n) = match (w(i + 2), w(i + 3)) {
                    (Some("read"), Some(x @ ("committed" | "uncommitted"))) => {
                        (format!("read {x}"), 2)
                    }
                    (Some("repeatable"), Some("read")) => ("repeatable read".to_owned(), 2),
                    (Some("serializable"), _) => ("serializable".to_owned(), 1),
                    _ => {
                        return Err(WeirError::syntax(
                            "syntax error: ISOLATION LEVEL takes READ COMMITTED, READ UNCOMMITTED, REPEATABLE READ or SERIALIZABLE",
                        ));
                    }
                };
                m.isolation = Some(level);
                i += 2 + n;
            }
            (Some("read"), Some("only")) => {
                m.read_only = Some(true);
                i += 2;
            }
            (Some("read"), Some("write")) => {
                m.read_only = Some(false);
                i += 2;
            }
            (Some("deferrable"), _) => {
                m.deferrable = Some(true);
                i += 1;
            }
            (Some("not"), Some("deferrable")) => {
                m.deferrable = Some(false);
                i += 2;
            }
            (Some(other), _) => {
                return Err(WeirError::syntax(format!(
                    "syntax error at or near \"{other}\""
                )));
            }
            (None, _) => break,
        }
    }
    Ok(m)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationKindFilter {
    Tables,
    Sources,
    MaterializedViews,
    Sinks,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropKind {
    Table,
    Source,
    MaterializedView,
    Sink,
    View,
    Sequence,
    Index,
    Type,
}

#[derive(Debug, Clone)]
pub struct CreateView {
    pub name: String,
    pub if_not_exists: bool,
    pub options: Vec<(String, String)>,
    pub query: Box<ast::Query>,
    pub emit_on_window_close: bool,
}

#[derive(Debug, Clone)]
pub struct DropStmt {
    pub kind: DropKind,
    pub names: Vec<String>,
    pub if_exists: bool,
    pub cascade: bool,
}

#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub ty: SqlType,
    pub not_null: bool,
    /// `DEFAULT expr`: the expression's SQL text.
    pub default: Option<String>,
    /// `serial`/`bigserial` or `GENERATED {ALWAYS | BY DEFAULT} AS IDENTITY`: filled from a
    /// sequence of its own.
    pub identity: Option<Identity>,
    /// `GENERATED ALWAYS AS (expr) STORED`: the expression's SQL text
    /// (`engine/generated.rs`).
    pub generated: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Identity {
    /// GENERATED ALWAYS: an INSERT may not give the column a value.
    pub always: bool,
    /// `serial`/`bigserial`: a column with a sequence's nextval as its default, not an
    /// identity column in the catalogs.
    pub serial: bool,
    pub options: SeqOptions,
}

#[derive(Debug, Clone)]
pub struct WatermarkSpec {
    pub column: String,
    /// The watermark expression, e.g. `ts - INTERVAL '5 seconds'`.
    pub expr: ast::Expr,
}

#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: String,
    pub if_not_exists: bool,
    /// `CREATE TEMP TABLE`: dropped when the session ends, and what its transactions'
    /// ends do to it.
    pub temporary: Option<OnCommit>,
    pub columns: Vec<ColumnSpec>,
    pub primary_key: Vec<String>,
    /// `CONSTRAINT name PRIMARY KEY (...)`: the name given (else `<table>_pkey`).
    pub primary_key_name: Option<String>,
    pub append_only: bool,
    pub watermark: Option<WatermarkSpec>,
    pub with_options: Vec<(String, String)>,
    /// `FORMAT x ENCODE y` of a connector table, lowercased.
    pub format: Option<(String, String)>,
    /// `CHECK` constraints, column and table ones, in the order written.
    pub checks: Vec<CheckSpec>,
    /// `UNIQUE` constraints, column and table ones.
    pub uniques: Vec<UniqueSpec>,
    /// `FOREIGN KEY` / `REFERENCES` constraints, column and table ones.
    pub foreign_keys: Vec<ForeignKeySpec>,
    /// `LIKE source [INCLUDING ...]`: the source's columns come first.
    pub like: Option<LikeSpec>,
    /// The columns of a domain type: (column, the domain's OID), found by the engine (the
    /// parser knows the domain only by name, in the column's type).
    pub domains: Vec<crate::catalog::domains::ColumnDomain>,
}

impl CreateTable {
    /// The stored generated columns: (column, expression text).
    pub fn generated(&self) -> Vec<(String, String)> {
        self.columns
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.generated.clone()?)))
            .collect()
    }
}

/// `LIKE source [INCLUDING | EXCLUDING {DEFAULTS | CONSTRAINTS | INDEXES | COMMENTS |
/// IDENTITY | GENERATED | ALL} ...]`: what is copied besides the columns (names, types, NOT NULL).
#[derive(Debug, Clone)]
pub struct LikeSpec {
    pub source: String,
    /// Lowercased words after INCLUDING (`all` for everything), EXCLUDINGs applied.
    pub including: Vec<String>,
}

impl LikeSpec {
    pub fn includes(&self, what: &str) -> bool {
        self.including.iter().any(|w| w == what || w == "all")
    }
}

/// `COMMENT ON kind name IS 'text' | NULL`: a relation's comment, or (`column`) one of its
/// columns'.
#[derive(Debug, Clone)]
pub struct CommentOn {
    /// Table (also for a column or a constraint), View, MaterializedView, Sequence, Index
    /// (`relation` is the index) or Type (`relation` is the type).
    pub kind: DropKind,
    pub relation: String,
    pub column: Option<String>,
    /// `COMMENT ON CONSTRAINT name ON relation`.
    pub constraint: Option<String>,
    /// None removes it.
    pub text: Option<String>,
}

/// `CREATE SOURCE name [(columns, WATERMARK FOR ...)] WITH (connector = ..., ...)
/// [FORMAT f ENCODE e]`.
#[derive(Debug, Clone)]
pub struct CreateSource {
    pub name: String,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnSpec>,
    pub watermark: Option<WatermarkSpec>,
    pub with_options: Vec<(String, String)>,
    /// `FORMAT x ENCODE y`, lowercased.
    pub format: Option<(String, String)>,
}

/// `CREATE SINK name FROM view | AS query WITH (connector = ..., ...) [FORMAT f ENCODE e]`.
#[derive(Debug, Clone)]
pub struct CreateSink {
    pub name: String,
    pub if_not_exists: bool,
    /// `FROM view`.
    pub from: Option<String>,
    /// `AS query`.
    pub query: Option<Box<ast::Query>>,
    pub with_options: Vec<(String, String)>,
    /// `FORMAT x ENCODE y`, lowercased.
    pub format: Option<(String, String)>,
}

/// Bytes of memory parsing takes per byte of SQL text (sqlparser's tokens and tree, the
/// statement's copies), measured on large statements; used to refuse a statement too large
/// to parse within the session's memory limit before trying.
pub const PARSE_BYTES_PER_BYTE: usize = 150;

/// Parse a string of one or more statements. An empty or comment-only string gives none.
pub fn parse(sql: &str) -> Result<Vec<Parsed>> {
    parse_within(sql, usize::MAX)
}

/// [`parse`], refusing (53200) statements that would need more than `memory` bytes to
/// parse. Large literal `INSERT ... VALUES` statements are read without a tree
/// ([`crate::sql::bulk_insert`]) and need about their own size.
pub fn parse_within(sql: &str, memory: usize) -> Result<Vec<Parsed>> {
    if sql.len() >= crate::sql::bulk_insert::MIN_BYTES
        && let Some(scan) = crate::sql::bulk_insert::scan(sql)
    {
        let text: String = sql.chars().take(200).collect();
        return Ok(vec![Parsed {
            stmt: Statement::BulkInsert(Box::new(scan)),
            text: format!("{text}...").into(),
            offset: 0,
        }]);
    }
    parse_tree(sql, memory)
}

/// [`parse_within`] without the literal INSERT reader: always a syntax tree.
pub fn parse_tree(sql: &str, memory: usize) -> Result<Vec<Parsed>> {
    if sql.len().saturating_mul(PARSE_BYTES_PER_BYTE) > memory {
        return Err(WeirError::new(
            crate::error::sqlstate::OUT_OF_MEMORY,
            format!(
                "out of memory: a statement of {} needs about {} to parse, more than work_mem ({})",
                crate::limits::format_size(sql.len()),
                crate::limits::format_size(sql.len().saturating_mul(PARSE_BYTES_PER_BYTE)),
                crate::limits::format_size(memory)
            ),
        )
        .with_hint("Send large data with COPY ... FROM STDIN, or as a multi-row INSERT of literals, or in smaller statements."));
    }
    let dialect = PostgreSqlDialect {};
    let tokens = datafusion::sql::sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| {
            pg_syntax_error(
                WeirError::syntax(format!("syntax error: {e}")),
                &LineIndex::new(sql),
            )
        })?;
    // before any tree exists: a statement too deep to plan is refused here (54001)
    crate::sql::depth::check(tokens.iter().map(|t| &t.token))?;
    let tokens = split_signed_operators(tokens);
    let tokens = mark_asof_joins(tokens)?;
    let tokens = mark_symmetric_between(tokens);
    let tokens = trim_spaces_by_default(tokens);
    let tokens = weaker_row_locks(tokens);
    let tokens = group_by_modifiers(tokens);
    let tokens = select_items_before_on_conflict(tokens);
    let tokens = drop_collations(tokens)?;
    refuse_partitioning(&tokens)?;
    let tokens = mark_merge_actions(tokens);
    let tokens = table_as_select(tokens);
    let recognizes = tokens.iter().any(|t| is_word(t, "MATCH_RECOGNIZE"));
    let tokens = move_within_into_define(tokens)?;
    let (tokens, emit_marks) = preprocess(tokens);
    let (tokens, overriding) = take_overriding(tokens);
    // MATCH_RECOGNIZE is parsed by sqlparser only for dialects that declare it: the
    // Postgres dialect with that one switch on (only for statements that use it)
    let recognizing = WeirDialect;
    let dialect: &dyn datafusion::sql::sqlparser::dialect::Dialect =
        if recognizes { &recognizing } else { &dialect };
    let mut p = Parser::new(dialect)
        .with_recursion_limit(crate::sql::depth::MAX_PARSER_RECURSION)
        .with_tokens_with_locations(tokens);
    let index = LineIndex::new(sql);
    let mut out = Vec::new();
    // (byte, characters before it) of the last statement's start
    let mut counted = (0usize, 0usize);
    loop {
        while p.consume_token(&Token::SemiColon) {}
        let first = p.peek_token();
        if first.token == Token::EOF {
            break;
        }
        let mut stmt = parse_one(&mut p).map_err(|e| pg_syntax_error(e, &index))?;
        if let Statement::Query(q) | Statement::Dml(q) = &stmt
            && let Some((word, at)) = reserved_word_as_name(q)
        {
            return Err(
                WeirError::syntax(format!("syntax error at or near \"{word}\""))
                    .with_position(index.position(at)),
            );
        }
        let next = p.peek_token();
        // `OVERRIDING {SYSTEM | USER} VALUE` of an INSERT (see `take_overriding`)
        for (at, system) in overriding.iter().filter(|(at, _)| {
            *at >= first.span.start && (next.token == Token::EOF || *at < next.span.start)
        }) {
            match &mut stmt {
                Statement::Dml(q) if matches!(q.as_ref(), ast::Statement::Insert(_)) => {
                    if let ast::Statement::Insert(ins) = q.as_mut() {
                        ins.optimizer_hints.push(overriding_mark(*system));
                    }
                }
                _ => {
                    return Err(WeirError::syntax("syntax error at or near \"OVERRIDING\"")
                        .with_position(index.position(*at)));
                }
            }
        }
        // `EMIT ON WINDOW CLOSE` ended the statement (see `preprocess`)
        if emit_marks.contains(&next.span.start) {
            match &mut stmt {
                Statement::CreateView(cv) | Statement::ExplainView(cv) => {
                    cv.emit_on_window_close = true
                }
                _ => return Err(syntax_near(&next).with_position(index.position(next.span.start))),
            }
        }
        if next.token != Token::SemiColon && next.token != Token::EOF {
            return Err(syntax_near(&next).with_position(index.position(next.span.start)));
        }
        // text from the first token to just before the terminator
        let end = if next.token == Token::EOF {
            sql.len()
        } else {
            index.offset(next.span.start)
        };
        let start = index.offset(first.span.start);
        let text = sql.get(start..end).unwrap_or(sql).trim().into();
        // (counted on from the statement before: a long script is read once)
        counted.1 += sql.get(counted.0..start).map_or(0, |s| s.chars().count());
        counted.0 = start;
        qualify_names(&mut stmt);
        out.push(Parsed {
            stmt,
            text,
            offset: counted.1,
        });
    }
    Ok(out)
}

/// Postgres' reserved words that sqlparser takes as a name where a name stands (`SELECT 1 +
/// FROM t` reads a column "from"; `SELECT FROM WHERE` a table "where"): Postgres refuses
/// them there, a syntax error at the word. (Not the ones that are values or functions
/// without parentheses: `current_date`, `user`, `default`, ...)
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "as",
    "asc",
    "asymmetric",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "column",
    "constraint",
    "create",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "fetch",
    "for",
    "foreign",
    "from",
    "grant",
    "group",
    "having",
    "in",
    "initially",
    "intersect",
    "into",
    "lateral",
    "leading",
    "limit",
    "not",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "placing",
    "primary",
    "references",
    "returning",
    "select",
    "some",
    "symmetric",
    "table",
    "then",
    "to",
    "trailing",
    "union",
    "unique",
    "using",
    "variadic",
    "when",
    "where",
    "window",
    "with",
];

/// The first reserved word a query or DML statement uses as an unquoted column or table
/// name, and where it is.
fn reserved_word_as_name(stmt: &ast::Statement) -> Option<(String, Location)> {
    use std::ops::ControlFlow;
    struct Find;
    fn reserved(i: &ast::Ident) -> ControlFlow<(String, Location)> {
        if i.quote_style.is_none() && RESERVED.contains(&i.value.to_ascii_lowercase().as_str()) {
            return ControlFlow::Break((i.value.clone(), i.span.start));
        }
        ControlFlow::Continue(())
    }
    impl ast::Visitor for Find {
        type Break = (String, Location);
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<Self::Break> {
            // (after a period any word is a name: `t.select`)
            match e {
                ast::Expr::Identifier(i) => reserved(i),
                ast::Expr::CompoundIdentifier(ids) => {
                    ids.first().map_or(ControlFlow::Continue(()), reserved)
                }
                ast::Expr::Function(f) if f.name.0.len() == 1 => f.name.0[0]
                    .as_ident()
                    .map_or(ControlFlow::Continue(()), reserved),
                _ => ControlFlow::Continue(()),
            }
        }
        fn pre_visit_relation(&mut self, r: &ast::ObjectName) -> ControlFlow<Self::Break> {
            r.0.first()
                .and_then(|p| p.as_ident())
                .map_or(ControlFlow::Continue(()), reserved)
        }
        fn pre_visit_table_factor(&mut self, t: &ast::TableFactor) -> ControlFlow<Self::Break> {
            let alias = match t {
                ast::TableFactor::Table { alias, .. }
                | ast::TableFactor::Derived { alias, .. }
                | ast::TableFactor::Function { alias, .. }
                | ast::TableFactor::UNNEST { alias, .. } => alias.as_ref(),
                _ => None,
            };
            alias.map_or(ControlFlow::Continue(()), |a| reserved(&a.name))
        }
    }
    match ast::Visit::visit(stmt, &mut Find) {
        ControlFlow::Break(found) => Some(found),
        ControlFlow::Continue(()) => None,
    }
}

/// Whether a token is the unquoted word `w` (any case).
fn is_word(t: &TokenWithSpan, w: &str) -> bool {
    matches!(&t.token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
}

/// Indices of the tokens that are not whitespace.
fn significant(tokens: &[TokenWithSpan]) -> Vec<usize> {
    tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect()
}

/// The Postgres dialect with `MATCH_RECOGNIZE` parsed: every method the Postgres dialect
/// overrides is delegated to it, and it reports itself as the Postgres dialect so the
/// parser's Postgres-only paths stay on.
#[derive(Debug)]
struct WeirDialect;

macro_rules! delegate_bool {
    ($($m:ident),* $(,)?) => {
        $(fn $m(&self) -> bool {
            PostgreSqlDialect {}.$m()
        })*
    };
}

impl datafusion::sql::sqlparser::dialect::Dialect for WeirDialect {
    fn dialect(&self) -> std::any::TypeId {
        std::any::TypeId::of::<PostgreSqlDialect>()
    }
    fn supports_match_recognize(&self) -> bool {
        true
    }
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        PostgreSqlDialect {}.identifier_quote_style(identifier)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        PostgreSqlDialect {}.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        PostgreSqlDialect {}.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        PostgreSqlDialect {}.is_identifier_part(ch)
    }
    fn is_reserved_for_identifier(
        &self,
        kw: datafusion::sql::sqlparser::keywords::Keyword,
    ) -> bool {
        PostgreSqlDialect {}.is_reserved_for_identifier(kw)
    }
    fn is_custom_operator_part(&self, ch: char) -> bool {
        PostgreSqlDialect {}.is_custom_operator_part(ch)
    }
    fn get_next_precedence(
        &self,
        parser: &Parser,
    ) -> Option<std::result::Result<u8, datafusion::sql::sqlparser::parser::ParserError>> {
        PostgreSqlDialect {}.get_next_precedence(parser)
    }
    fn prec_value(&self, prec: datafusion::sql::sqlparser::dialect::Precedence) -> u8 {
        PostgreSqlDialect {}.prec_value(prec)
    }
    delegate_bool!(
        supports_unicode_string_literal,
        supports_filter_during_aggregation,
        supports_group_by_expr,
        allow_extract_custom,
        allow_extract_single_quotes,
        supports_create_index_with_clause,
        supports_explain_with_utility_options,
        supports_listen_notify,
        supports_factorial_operator,
        supports_bitwise_shift_operators,
        supports_comment_on,
        supports_load_extension,
        supports_named_fn_args_with_colon_operator,
        supports_named_fn_args_with_expr_name,
        supports_empty_projections,
        supports_nested_comments,
        supports_string_escape_constant,
        supports_numeric_literal_underscores,
        supports_array_typedef_with_brackets,
        supports_geometric_types,
        supports_set_names,
        supports_alter_column_type_using,
        supports_notnull_operator,
        supports_interval_options,
        supports_insert_table_alias,
        supports_create_table_like_parenthesized,
        supports_select_wildcard_with_alias,
        supports_comma_separated_trim,
        supports_xml_expressions,
        supports_comment_optimizer_hint,
    );
}

/// The name a `MATCH_RECOGNIZE`'s `WITHIN <interval>` is carried under in its DEFINE list.
pub const WITHIN_SYMBOL: &str = "__weir_within";

/// `... PATTERN (...) WITHIN <interval> DEFINE ...` (Flink's spelling, which sqlparser does
/// not parse) becomes `... PATTERN (...) DEFINE __weir_within AS <interval>, ...`; the
/// planner (`plan::match_recognize`) takes it out of the DEFINE list again.
///
/// Inside `PATTERN (...)` the Postgres tokenizer reads `?` (and `?|`) as its JSON
/// operators; they become the `?` quantifier (and `|`) sqlparser's pattern parser expects.
fn move_within_into_define(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_word(t, "MATCH_RECOGNIZE")) {
        return Ok(tokens);
    }
    let mut tokens = pattern_question_marks(tokens);
    loop {
        let sig = significant(&tokens);
        // a WITHIN right after the closing parenthesis of PATTERN (...)
        let mut found = None;
        for k in 0..sig.len() {
            if !is_word(&tokens[sig[k]], "PATTERN")
                || !matches!(
                    sig.get(k + 1).map(|i| &tokens[*i].token),
                    Some(Token::LParen)
                )
            {
                continue;
            }
            let mut depth = 0i32;
            let mut j = k + 1;
            while j < sig.len() {
                match tokens[sig[j]].token {
                    Token::LParen => depth += 1,
                    Token::RParen => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                j += 1;
            }
            if sig
                .get(j + 1)
                .is_some_and(|i| is_word(&tokens[*i], "WITHIN"))
            {
                let define = (j + 2..sig.len()).find(|d| is_word(&tokens[sig[*d]], "DEFINE"));
                let Some(d) = define else {
                    return Err(syntax_near(&tokens[sig[j + 1]]));
                };
                found = Some((sig[j + 1], sig[d]));
                break;
            }
        }
        let Some((within, define)) = found else {
            return Ok(tokens);
        };
        let interval: Vec<TokenWithSpan> = tokens[within + 1..define].to_vec();
        if interval
            .iter()
            .all(|t| matches!(t.token, Token::Whitespace(_)))
        {
            return Err(syntax_near(&tokens[define]));
        }
        let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len() + 6);
        out.extend_from_slice(&tokens[..within]);
        out.push(tokens[define].clone());
        let space = || TokenWithSpan::wrap(Token::Whitespace(Whitespace::Space));
        out.push(space());
        out.push(TokenWithSpan::wrap(Token::make_word(WITHIN_SYMBOL, None)));
        out.push(space());
        out.push(TokenWithSpan::wrap(Token::make_keyword("AS")));
        out.push(space());
        out.extend(interval);
        out.push(TokenWithSpan::wrap(Token::Comma));
        out.push(space());
        out.extend_from_slice(&tokens[define + 1..]);
        tokens = out;
    }
}

fn pattern_question_marks(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    // parenthesis depth inside PATTERN (...), when in one
    let mut depth: Option<i32> = None;
    let mut after_pattern = false;
    for t in tokens {
        let question = || TokenWithSpan::new(Token::Placeholder("?".into()), t.span);
        match (&t.token, depth) {
            (Token::Whitespace(_), _) => {}
            (Token::LParen, None) if after_pattern => depth = Some(1),
            (Token::LParen, Some(d)) => depth = Some(d + 1),
            (Token::RParen, Some(d)) => depth = (d > 1).then_some(d - 1),
            (Token::Question, Some(_)) => {
                out.push(question());
                continue;
            }
            (Token::QuestionPipe, Some(_)) => {
                out.push(question());
                out.push(TokenWithSpan::new(Token::Pipe, t.span));
                continue;
            }
            _ => {}
        }
        if !matches!(t.token, Token::Whitespace(_)) {
            after_pattern = is_word(&t, "PATTERN");
        }
        out.push(t);
    }
    out
}

/// What [`mark_merge_actions`] writes for MERGE's `DO NOTHING` (an assignment to this
/// column) and `INSERT DEFAULT VALUES` (a VALUES row of this identifier), which sqlparser
/// does not parse.
pub const MERGE_DO_NOTHING: &str = "__weir_do_nothing";
pub const MERGE_DEFAULT_VALUES: &str = "__weir_default_values";

/// In a MERGE: `THEN DO NOTHING` becomes `THEN UPDATE SET __weir_do_nothing = NULL` and
/// `INSERT DEFAULT VALUES` becomes `INSERT VALUES (__weir_default_values)`, read back by
/// `engine/merge.rs`.
fn mark_merge_actions(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    if !sig.first().is_some_and(|&i| is_word(&tokens[i], "MERGE")) {
        return tokens;
    }
    let mut replace: Vec<(usize, usize, Vec<Token>)> = Vec::new();
    for k in 0..sig.len() {
        let at = |j: usize| sig.get(k + j).map(|&i| &tokens[i]);
        if at(0).is_some_and(|t| is_word(t, "THEN"))
            && at(1).is_some_and(|t| is_word(t, "DO"))
            && at(2).is_some_and(|t| is_word(t, "NOTHING"))
        {
            replace.push((
                sig[k + 1],
                sig[k + 2],
                vec![
                    Token::make_keyword("UPDATE"),
                    Token::Whitespace(Whitespace::Space),
                    Token::make_keyword("SET"),
                    Token::Whitespace(Whitespace::Space),
                    Token::make_word(MERGE_DO_NOTHING, None),
                    Token::Eq,
                    Token::make_keyword("NULL"),
                ],
            ));
        }
        if at(0).is_some_and(|t| is_word(t, "INSERT"))
            && at(1).is_some_and(|t| is_word(t, "DEFAULT"))
            && at(2).is_some_and(|t| is_word(t, "VALUES"))
        {
            replace.push((
                sig[k + 1],
                sig[k + 2],
                vec![
                    Token::make_keyword("VALUES"),
                    Token::LParen,
                    Token::make_word(MERGE_DEFAULT_VALUES, None),
                    Token::RParen,
                ],
            ));
        }
    }
    if replace.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    for (from, to, with) in replace {
        out.extend(tokens[i..from].iter().cloned());
        let span = tokens[from].span;
        out.extend(with.into_iter().map(|token| TokenWithSpan { token, span }));
        i = to + 1;
    }
    out.extend(tokens[i..].iter().cloned());
    out
}

/// `TABLE name` (a statement, a parenthesized subquery, or a set operation's operand after
/// UNION / INTERSECT / EXCEPT [ALL]) is `SELECT * FROM name`, as in Postgres; sqlparser
/// reads none of them.
fn table_as_select(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    let mut at_start = true;
    let mut replace: Vec<usize> = Vec::new();
    for (k, &i) in sig.iter().enumerate() {
        let t = &tokens[i];
        if at_start
            && is_word(t, "TABLE")
            && sig
                .get(k + 1)
                .is_some_and(|&j| matches!(tokens[j].token, Token::Word(_)))
        {
            replace.push(i);
        }
        at_start = matches!(t.token, Token::SemiColon | Token::LParen)
            || ["UNION", "INTERSECT", "EXCEPT", "ALL"]
                .iter()
                .any(|w| is_word(t, w));
    }
    if replace.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 4 * replace.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if replace.contains(&i) {
            let span = t.span;
            out.extend(
                [
                    Token::make_keyword("SELECT"),
                    Token::Whitespace(Whitespace::Space),
                    Token::Mul,
                    Token::Whitespace(Whitespace::Space),
                    Token::make_keyword("FROM"),
                ]
                .into_iter()
                .map(|token| TokenWithSpan { token, span }),
            );
        } else {
            out.push(t);
        }
    }
    out
}

/// The marker function [`mark_symmetric_between`] wraps a `BETWEEN SYMMETRIC`'s low bound in.
pub const SYMMETRIC_MARKER: &str = "__weir_symmetric";

/// A query's text to store (a view's definition): as sqlparser prints it, with a marked
/// `BETWEEN SYMMETRIC` (see [`mark_symmetric_between`]) written back as the user wrote it.
/// The relation among `names` (the FROM / USING relations of an UPDATE or DELETE, by
/// alias) a RETURNING item reads, if any: `c.name`, `c.*`, or a bare `*` (which in
/// Postgres is every relation's columns, the first of `names` among them).
pub fn returning_reads(item: &ast::SelectItem, names: &[String]) -> Option<String> {
    match item {
        ast::SelectItem::Wildcard(_) => return names.first().cloned(),
        ast::SelectItem::QualifiedWildcard(
            ast::SelectItemQualifiedWildcardKind::ObjectName(o),
            _,
        ) => {
            if let Some(n) = o.0.last().and_then(|p| p.as_ident()).map(normalize_ident)
                && names.contains(&n)
            {
                return Some(n);
            }
        }
        _ => {}
    }
    let mut found = None;
    let _ = ast::visit_expressions(item, |e| {
        if let ast::Expr::CompoundIdentifier(ids) = e
            && ids.len() >= 2
            && names.contains(&normalize_ident(&ids[ids.len() - 2]))
        {
            found = Some(normalize_ident(&ids[ids.len() - 2]));
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    });
    found
}

pub fn query_text(q: &ast::Query) -> String {
    user_text(&q.to_string())
}

/// [`shown_expr`] in the parentheses Postgres' deparser gives an operator expression of its
/// own (`(a > 0)`, `(a * 2)`; a column, a function call or a parenthesized expression stays
/// bare): a CHECK's or a generated column's expression as `pg_get_expr` shows it.
pub fn shown_expr_deparsed(text: &str) -> String {
    let shown = shown_expr(text);
    let bare = matches!(
        parse_expr_text(text),
        Ok(ast::Expr::Identifier(_)
            | ast::Expr::CompoundIdentifier(_)
            | ast::Expr::Function(_)
            | ast::Expr::Nested(_))
    );
    match bare {
        true => shown,
        false => format!("({shown})"),
    }
}

/// `(x)` without the parentheses that enclose all of it (`(a) + (b)` keeps its own).
pub fn strip_outer_parens(text: &str) -> &str {
    let Some(inner) = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')) else {
        return text;
    };
    // the first parenthesis must close at the very end (quoted text aside)
    let mut depth = 1usize;
    let mut quoted: Option<char> = None;
    for c in inner.chars() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quoted = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return text;
                }
            }
            _ => {}
        }
    }
    inner
}

/// A stored expression (a column default, a CHECK) shown as Postgres deparses it: cast
/// types in Postgres' lower-case names (`'new'::text`, `(0)::numeric`, sqlparser prints
/// `TEXT`), a sequence named for `::regclass` without the `public.` schema our one search
/// path makes implicit (`nextval('t_id_seq'::regclass)`). Text that does not parse is
/// returned as it is.
pub fn shown_expr(text: &str) -> String {
    let Ok(mut e) = parse_expr_text(text) else {
        return user_text(text);
    };
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let ast::Expr::Cast {
            expr, data_type, ..
        } = x
        {
            let name = match (SqlType::from_ast(data_type), &*data_type) {
                (Ok(t), _) => t.display_name(),
                // a type of the catalog's (an enum), by the name it resolves by
                (Err(_), ast::DataType::Custom(n, args)) if args.is_empty() => {
                    crate::catalog::user_types::user_type_name(n)
                }
                (Err(_), _) => data_type.to_string().to_lowercase(),
            };
            if name == "regclass"
                && let ast::Expr::Value(v) = expr.as_mut()
                && let ast::Value::SingleQuotedString(s) = &mut v.value
                && let Some(rest) = s.strip_prefix("public.")
            {
                *s = rest.to_owned();
            }
            *data_type =
                ast::DataType::Custom(ObjectName::from(vec![ast::Ident::new(name)]), vec![]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    user_text(&e.to_string())
}

/// SQL text as sqlparser printed it (a query, a CHECK's expression) with each marked
/// `BETWEEN SYMMETRIC` written back as the user wrote it.
pub fn user_text(text: &str) -> String {
    let marker = format!("BETWEEN {SYMMETRIC_MARKER}(");
    if !text.contains(&marker) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&marker) {
        out.push_str(&rest[..at]);
        out.push_str("BETWEEN SYMMETRIC ");
        rest = &rest[at + marker.len()..];
        // the marker's closing parenthesis (quoted text and identifiers skipped)
        let (mut depth, mut quote) = (0i32, None::<char>);
        let mut close = None;
        for (i, c) in rest.char_indices() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') if depth == 0 => {
                    close = Some(i);
                    break;
                }
                (None, ')') => depth -= 1,
                _ => {}
            }
        }
        match close {
            Some(i) => {
                out.push_str(&rest[..i]);
                rest = &rest[i + 1..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// `x [NOT] BETWEEN SYMMETRIC a AND b` (sqlparser does not parse SYMMETRIC) becomes
/// `x [NOT] BETWEEN __weir_symmetric(a) AND b`, which `catalog::rewrite` turns into Postgres'
/// meaning, `(x BETWEEN a AND b) OR (x BETWEEN b AND a)`; `BETWEEN ASYMMETRIC` is plain
/// `BETWEEN`. The low bound ends at the first `AND` outside parentheses, brackets and
/// `CASE ... END` (the grammar's rule: a bound binds tighter than `AND`).
/// `CREATE TABLE ... PARTITION BY RANGE|LIST|HASH (...)` and `CREATE TABLE ... PARTITION OF
/// parent`: declarative partitioning is refused by name (0A000), not as a syntax error.
fn refuse_partitioning(tokens: &[TokenWithSpan]) -> Result<()> {
    if !tokens.iter().any(|t| is_word(t, "PARTITION")) {
        return Ok(());
    }
    let sig = significant(tokens);
    let word = |k: usize, w: &str| sig.get(k).is_some_and(|&i| is_word(&tokens[i], w));
    // only in a CREATE TABLE statement (PARTITION BY is also a window's clause)
    let mut in_create_table = false;
    let mut depth = 0i64;
    for k in 0..sig.len() {
        let t = &tokens[sig[k]];
        match &t.token {
            Token::SemiColon => in_create_table = false,
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if is_word(t, "CREATE") {
            // CREATE [GLOBAL|LOCAL] [TEMP|TEMPORARY|UNLOGGED] TABLE
            let mut j = k + 1;
            while ["GLOBAL", "LOCAL", "TEMP", "TEMPORARY", "UNLOGGED"]
                .iter()
                .any(|w| word(j, w))
            {
                j += 1;
            }
            in_create_table = word(j, "TABLE");
            depth = 0;
        }
        if in_create_table
            && depth == 0
            && is_word(t, "PARTITION")
            && (word(k + 1, "BY") || word(k + 1, "OF"))
        {
            return Err(WeirError::not_supported(
                "partitioned tables (PARTITION BY, PARTITION OF) are not supported",
            )
            .with_hint(
                "Create one table; an index on the partitioning column serves its range queries.",
            ));
        }
    }
    Ok(())
}

/// `COLLATE name` (after an expression, a column's type, in ORDER BY, in CREATE INDEX):
/// the database's one collation is `C`, byte order, so a clause naming it (`"C"`,
/// `"POSIX"`, `"default"`, `ucs_basic`, qualified by `pg_catalog` or not, as pg_dump
/// writes them) changes nothing and is dropped here, before sqlparser (which reads COLLATE
/// only after some expressions: not after a cast, not as a column option). Any other
/// collation is 42704, as Postgres without that locale.
fn drop_collations(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_word(t, "COLLATE")) {
        return Ok(tokens);
    }
    let sig = significant(&tokens);
    let mut drop = vec![false; tokens.len()];
    let mut k = 0;
    while k < sig.len() {
        if !is_word(&tokens[sig[k]], "COLLATE") {
            k += 1;
            continue;
        }
        // the name: `x` or `schema.x`
        let mut end = k + 1;
        if sig
            .get(end + 1)
            .is_some_and(|&i| tokens[i].token == Token::Period)
        {
            end += 2;
        }
        let Some(Token::Word(w)) = sig.get(end).map(|&i| &tokens[i].token) else {
            k += 1;
            continue;
        };
        let name = match w.quote_style {
            Some(_) => w.value.clone(),
            None => w.value.to_lowercase(),
        };
        if !matches!(name.as_str(), "C" | "POSIX" | "default" | "ucs_basic") {
            return Err(WeirError::new(
                crate::error::sqlstate::UNDEFINED_OBJECT,
                format!("collation \"{name}\" for encoding \"UTF8\" does not exist"),
            ));
        }
        for &i in &sig[k..=end] {
            drop[i] = true;
        }
        k = end + 1;
    }
    Ok(tokens
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(t, _)| t)
        .collect())
}

/// `trim(LEADING | TRAILING | BOTH FROM x)`, which sqlparser does not read without the
/// characters to trim: the spaces Postgres trims then, written in (`trim(LEADING ' ' FROM x)`).
fn trim_spaces_by_default(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens.iter().any(|t| is_word(t, "TRIM")) {
        return tokens;
    }
    let sig = significant(&tokens);
    let mut at = Vec::new();
    for k in 0..sig.len().saturating_sub(3) {
        let t = |j: usize| &tokens[sig[k + j]];
        if is_word(t(0), "TRIM")
            && t(1).token == Token::LParen
            && (is_word(t(2), "LEADING") || is_word(t(2), "TRAILING") || is_word(t(2), "BOTH"))
            && is_word(t(3), "FROM")
        {
            at.push(sig[k + 3]);
        }
    }
    for i in at.into_iter().rev() {
        let span = tokens[i].span;
        tokens.insert(
            i,
            TokenWithSpan::new(Token::Whitespace(Whitespace::Space), span),
        );
        tokens.insert(
            i,
            TokenWithSpan::new(Token::SingleQuotedString(" ".into()), span),
        );
    }
    tokens
}

/// `FOR NO KEY UPDATE` and `FOR KEY SHARE` (Postgres' weaker row locks, which sqlparser does
/// not read) as `FOR UPDATE` and `FOR SHARE`, which Weir accepts and takes no row locks for
/// (a SELECT ... FOR UPDATE reads as a SELECT; see docs/sql.md), so the strength changes
/// nothing.
fn weaker_row_locks(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens.iter().any(|t| is_word(t, "KEY")) {
        return tokens;
    }
    let sig = significant(&tokens);
    let mut drop = Vec::new();
    for k in 0..sig.len() {
        let t = |j: usize| sig.get(k + j).map(|&i| &tokens[i]);
        let word = |j: usize, w: &str| t(j).is_some_and(|t| is_word(t, w));
        if word(0, "FOR") && word(1, "NO") && word(2, "KEY") && word(3, "UPDATE") {
            drop.extend([sig[k + 1], sig[k + 2]]);
        } else if word(0, "FOR") && word(1, "KEY") && word(2, "SHARE") {
            drop.push(sig[k + 1]);
        }
    }
    for i in drop.into_iter().rev() {
        tokens.remove(i);
    }
    tokens
}

/// The call [`group_by_modifiers`] puts first in a `GROUP BY DISTINCT` list, for
/// `catalog::rewrite` to find (and take out: it never runs).
pub const GROUP_BY_DISTINCT: &str = "weir_group_by_distinct";

/// `GROUP BY ALL | DISTINCT`, which sqlparser does not read: `ALL` (Postgres' default)
/// taken out; `DISTINCT` marked by a [`GROUP_BY_DISTINCT`] call first in the list.
fn group_by_modifiers(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens.iter().any(|t| is_word(t, "GROUP")) {
        return tokens;
    }
    let sig = significant(&tokens);
    // (token index, DISTINCT)
    let mut found = Vec::new();
    for k in 0..sig.len() {
        let word = |j: usize, w: &str| sig.get(k + j).is_some_and(|&i| is_word(&tokens[i], w));
        if word(0, "GROUP") && word(1, "BY") {
            if word(2, "ALL") {
                found.push((sig[k + 2], false));
            } else if word(2, "DISTINCT") {
                found.push((sig[k + 2], true));
            }
        }
    }
    for (i, distinct) in found.into_iter().rev() {
        let span = tokens[i].span;
        if distinct {
            let marker = [
                Token::make_word(GROUP_BY_DISTINCT, None),
                Token::LParen,
                Token::RParen,
                Token::Comma,
            ];
            tokens.splice(
                i..=i,
                marker
                    .into_iter()
                    .map(|token| TokenWithSpan { token, span }),
            );
        } else {
            tokens.remove(i);
        }
    }
    tokens
}

/// An operator run together with a sign after it (`j->-1`, `a*-1` written `a *-1`): Postgres
/// ends an operator before a trailing `+` or `-` unless it has one of `~ ! @ # % ^ & | \` ?`
/// (so `->-1` is `-> -1`); sqlparser reads the whole run as one custom operator.
fn split_signed_operators(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let needs = |s: &str| {
        s.ends_with(['+', '-']) && !s.contains(['~', '!', '@', '#', '%', '^', '&', '|', '`', '?'])
    };
    if !tokens
        .iter()
        .any(|t| matches!(&t.token, Token::CustomBinaryOperator(s) if needs(s)))
    {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 2);
    for t in tokens {
        let Token::CustomBinaryOperator(s) = &t.token else {
            out.push(t);
            continue;
        };
        if !needs(s) {
            out.push(t);
            continue;
        }
        let head = s.trim_end_matches(['+', '-']);
        let dialect = PostgreSqlDialect {};
        let Ok(head_tokens) =
            datafusion::sql::sqlparser::tokenizer::Tokenizer::new(&dialect, head).tokenize()
        else {
            out.push(t);
            continue;
        };
        let span = t.span;
        out.extend(
            head_tokens
                .into_iter()
                .map(|token| TokenWithSpan { token, span }),
        );
        out.extend(s[head.len()..].chars().map(|c| TokenWithSpan {
            token: if c == '+' { Token::Plus } else { Token::Minus },
            span,
        }));
    }
    out
}

/// `INSERT INTO t SELECT 'x' ON CONFLICT ...`: sqlparser reads `ON` after a select item as
/// the item's alias when the SELECT has no FROM or WHERE (Postgres reserves it). Such a
/// SELECT gets `WHERE TRUE` before `ON CONFLICT`.
fn select_items_before_on_conflict(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens.iter().any(|t| is_word(t, "CONFLICT")) {
        return tokens;
    }
    let sig = significant(&tokens);
    let mut at = Vec::new();
    for k in 1..sig.len().saturating_sub(1) {
        if !(is_word(&tokens[sig[k]], "ON") && is_word(&tokens[sig[k + 1]], "CONFLICT")) {
            continue;
        }
        // back to the last SELECT at this depth: only its items between
        let mut depth = 0i32;
        for j in (0..k).rev() {
            let t = &tokens[sig[j]];
            match &t.token {
                Token::RParen => depth += 1,
                Token::LParen => depth -= 1,
                _ => {}
            }
            if depth < 0 {
                break;
            }
            if depth > 0 {
                continue;
            }
            let clause = [
                "FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "OFFSET", "FETCH",
                "VALUES", "DEFAULT",
            ];
            if clause.iter().any(|w| is_word(t, w)) {
                break;
            }
            if is_word(t, "SELECT") {
                at.push(sig[k]);
                break;
            }
        }
    }
    for i in at.into_iter().rev() {
        let span = tokens[i].span;
        let words = [
            Token::make_keyword("WHERE"),
            Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
            Token::make_keyword("TRUE"),
            Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
        ];
        tokens.splice(
            i..i,
            words.into_iter().map(|token| TokenWithSpan { token, span }),
        );
    }
    tokens
}

/// The prefix of the mark [`take_overriding`] leaves on an INSERT (an optimizer hint, which
/// the Postgres dialect never parses from a statement and DataFusion ignores).
const OVERRIDING_MARK: &str = "weir_overriding";

fn overriding_mark(system: bool) -> ast::OptimizerHint {
    ast::OptimizerHint {
        prefix: OVERRIDING_MARK.to_owned(),
        text: if system { "SYSTEM" } else { "USER" }.to_owned(),
        style: ast::OptimizerHintStyle::MultiLine,
    }
}

/// Whether the parse marked the INSERT with `OVERRIDING ... VALUE`.
pub fn has_insert_overriding(ins: &ast::Insert) -> bool {
    ins.optimizer_hints
        .iter()
        .any(|h| h.prefix == OVERRIDING_MARK)
}

/// `INSERT ... OVERRIDING SYSTEM VALUE` (Some(true)) or `OVERRIDING USER VALUE`
/// (Some(false)), as the parse marked it; the mark taken off (DataFusion refuses hints).
pub fn take_insert_overriding(ins: &mut ast::Insert) -> Option<bool> {
    let found = ins
        .optimizer_hints
        .iter()
        .find(|h| h.prefix == OVERRIDING_MARK)
        .map(|h| h.text == "SYSTEM");
    ins.optimizer_hints.retain(|h| h.prefix != OVERRIDING_MARK);
    found
}

/// `OVERRIDING {SYSTEM | USER} VALUE` (an INSERT's, between its columns and its rows), which
/// sqlparser does not read: the words taken out, and where they were with which kind
/// (true: SYSTEM), for the parse to mark the INSERT they were in.
fn take_overriding(mut tokens: Vec<TokenWithSpan>) -> (Vec<TokenWithSpan>, Vec<(Location, bool)>) {
    if !tokens.iter().any(|t| is_word(t, "OVERRIDING")) {
        return (tokens, vec![]);
    }
    let sig = significant(&tokens);
    let mut drop = Vec::new();
    let mut marks = Vec::new();
    for k in 0..sig.len() {
        let word = |j: usize, w: &str| sig.get(k + j).is_some_and(|&i| is_word(&tokens[i], w));
        // (followed by the INSERT's rows: elsewhere `overriding` can be a name)
        let rows = ["VALUES", "SELECT", "WITH", "TABLE"]
            .iter()
            .any(|w| word(3, w))
            || sig
                .get(k + 3)
                .is_some_and(|&i| tokens[i].token == Token::LParen);
        if word(0, "OVERRIDING")
            && (word(1, "SYSTEM") || word(1, "USER"))
            && word(2, "VALUE")
            && rows
        {
            marks.push((tokens[sig[k]].span.start, word(1, "SYSTEM")));
            drop.extend([sig[k], sig[k + 1], sig[k + 2]]);
        }
    }
    for i in drop.into_iter().rev() {
        tokens.remove(i);
    }
    (tokens, marks)
}

fn mark_symmetric_between(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens
        .iter()
        .any(|t| is_word(t, "SYMMETRIC") || is_word(t, "ASYMMETRIC"))
    {
        return tokens;
    }
    let sig = significant(&tokens);
    let mut drop = vec![false; tokens.len()];
    let mut opens: Vec<usize> = Vec::new();
    let mut closes: Vec<usize> = Vec::new();
    for k in 0..sig.len() {
        if !is_word(&tokens[sig[k]], "BETWEEN") {
            continue;
        }
        let Some(&next) = sig.get(k + 1) else {
            continue;
        };
        if is_word(&tokens[next], "ASYMMETRIC") {
            drop[next] = true;
            continue;
        }
        if !is_word(&tokens[next], "SYMMETRIC") {
            continue;
        }
        let (mut depth, mut cases) = (0i64, 0i64);
        let end = sig[k + 2..].iter().copied().find(|&i| {
            let t = &tokens[i];
            match &t.token {
                Token::LParen | Token::LBracket => depth += 1,
                Token::RParen | Token::RBracket => depth -= 1,
                _ if is_word(t, "CASE") => cases += 1,
                _ if is_word(t, "END") => cases -= 1,
                _ => {}
            }
            depth == 0 && cases == 0 && is_word(t, "AND")
        });
        if let Some(end) = end {
            opens.push(next);
            closes.push(end);
        }
    }
    let mut out = Vec::with_capacity(tokens.len() + 2 * opens.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if drop[i] {
            continue;
        }
        let span = t.span;
        if opens.contains(&i) {
            out.push(TokenWithSpan {
                token: Token::make_word(SYMMETRIC_MARKER, None),
                span,
            });
            out.push(TokenWithSpan {
                token: Token::LParen,
                span,
            });
            continue;
        }
        if closes.contains(&i) {
            out.push(TokenWithSpan {
                token: Token::RParen,
                span,
            });
            out.push(TokenWithSpan {
                token: Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
                span,
            });
        }
        out.push(t);
    }
    out
}

/// The marker function an ASOF join's ON condition starts with after [`mark_asof_joins`].
pub const ASOF_MARKER: &str = "__weir_asof";

/// `a ASOF [INNER | LEFT [OUTER]] JOIN b ON cond` (DuckDB's spelling, which sqlparser's
/// Postgres dialect does not parse) becomes `a [LEFT] JOIN b ON __weir_asof() AND cond`:
/// the marker conjunct tells the planner (`plan::asof`) that this join is an ASOF join.
/// Snowflake's `ASOF JOIN b MATCH_CONDITION (c) [ON e]` becomes `... ON __weir_asof() AND
/// (c) [AND e]`.
fn mark_asof_joins(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_word(t, "ASOF")) {
        return Ok(tokens);
    }
    let sig = significant(&tokens);
    let mut drop = vec![false; tokens.len()];
    let mut marked_on: Vec<usize> = Vec::new();
    let mut condition_words: Vec<usize> = Vec::new();
    let mut on_to_and: Vec<usize> = Vec::new();
    for k in 0..sig.len() {
        let word_at = |d: usize, w: &str| sig.get(k + d).is_some_and(|i| is_word(&tokens[*i], w));
        if !word_at(0, "ASOF") {
            continue;
        }
        // the words up to JOIN
        let mut j = 1;
        while j < 4 && !word_at(j, "JOIN") {
            j += 1;
        }
        if !word_at(j, "JOIN") {
            continue;
        }
        let kind: Vec<String> = (1..j)
            .filter_map(|d| match &tokens[sig[k + d]].token {
                Token::Word(w) => Some(w.value.to_uppercase()),
                _ => None,
            })
            .collect();
        match kind
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] | ["INNER"] | ["LEFT"] | ["LEFT", "OUTER"] => {}
            other => {
                return Err(WeirError::not_supported(format!(
                    "ASOF {} JOIN is not supported: an ASOF join is inner or LEFT",
                    other.join(" ")
                )));
            }
        }
        // its ON (or Snowflake's MATCH_CONDITION (...) [ON ...]), at the same parenthesis
        // depth, before the next clause
        let mut depth = 0i32;
        let mut on = None;
        let mut match_condition = None;
        for &i in &sig[k + j + 1..] {
            match &tokens[i].token {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break,
                Token::RParen => depth -= 1,
                Token::SemiColon | Token::EOF => break,
                Token::Word(w) if depth == 0 && w.quote_style.is_none() => {
                    if w.value.eq_ignore_ascii_case("ON") {
                        on = Some(i);
                        break;
                    }
                    if w.value.eq_ignore_ascii_case("MATCH_CONDITION") && match_condition.is_none()
                    {
                        match_condition = Some(i);
                        continue;
                    }
                    if matches!(
                        w.keyword,
                        Keyword::JOIN | Keyword::WHERE | Keyword::GROUP | Keyword::USING
                    ) {
                        break;
                    }
                }
                _ => {}
            }
        }
        drop[sig[k]] = true;
        match (match_condition, on) {
            (Some(mc), on) => {
                // MATCH_CONDITION (c) [ON e] -> ON __weir_asof() AND (c) [AND e]
                condition_words.push(mc);
                on_to_and.extend(on);
            }
            (None, Some(on)) => marked_on.push(on),
            (None, None) => {
                return Err(WeirError::syntax(
                    "an ASOF join needs an ON condition: ON a.k = b.k AND a.ts >= b.ts",
                ));
            }
        }
    }
    let space = || Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space);
    let mut out = Vec::with_capacity(tokens.len() + 6 * marked_on.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if drop[i] {
            continue;
        }
        let span = t.span;
        if on_to_and.contains(&i) {
            out.push(TokenWithSpan {
                token: Token::make_keyword("AND"),
                span,
            });
            continue;
        }
        let on = marked_on.contains(&i) || condition_words.contains(&i);
        if condition_words.contains(&i) {
            out.push(TokenWithSpan {
                token: Token::make_keyword("ON"),
                span,
            });
        } else {
            out.push(t);
        }
        if on {
            for token in [
                space(),
                Token::make_word(ASOF_MARKER, None),
                Token::LParen,
                Token::RParen,
                space(),
                Token::make_keyword("AND"),
                space(),
            ] {
                out.push(TokenWithSpan { token, span });
            }
        }
    }
    Ok(out)
}

/// What `ON CONFLICT (cols) WHERE pred` becomes for sqlparser, which has no place for the
/// predicate: a last target column named this prefix followed by the predicate's text
/// (`engine/on_conflict.rs` takes it back out).
pub const CONFLICT_WHERE: &str = "__weir_conflict_where__";

/// Token rewrites for Weir's clauses that sqlparser's Postgres dialect cannot parse:
/// - `EMIT ON WINDOW CLOSE` at the end of a statement becomes the statement's `;`, its
///   position remembered (returned) so the statement gets the flag;
/// - `tbl FOR SYSTEM_TIME AS OF PROCTIME()` becomes `__weir_temporal__tbl AS tbl`: the name
///   marks a temporal join's lookup side for the view planner;
/// - `ON CONFLICT (cols) WHERE pred DO` becomes `ON CONFLICT (cols, "<CONFLICT_WHERE>pred")
///   DO`;
/// - `ORDER BY x USING <` / `USING >` become `ASC` / `DESC`;
/// - `type ARRAY` becomes `type[]`;
/// - `inet 'text'` / `cidr 'text'` become `'text'::inet` / `'text'::cidr`.
fn preprocess(tokens: Vec<TokenWithSpan>) -> (Vec<TokenWithSpan>, Vec<Location>) {
    let sig = significant(&tokens);
    let mut drop = vec![false; tokens.len()];
    let mut replace: Vec<(usize, Vec<Token>)> = Vec::new();
    let mut marks = Vec::new();
    let mut k = 0;
    while k < sig.len() {
        let at = |d: usize| sig.get(k + d).map(|i| &tokens[*i]);
        let word_at = |d: usize, w: &str| at(d).is_some_and(|t| is_word(t, w));
        if word_at(0, "EMIT") && word_at(1, "ON") && word_at(2, "WINDOW") && word_at(3, "CLOSE") {
            let end = at(4).map(|t| &t.token);
            if matches!(end, None | Some(Token::SemiColon) | Some(Token::EOF)) {
                let first = sig[k];
                marks.push(tokens[first].span.start);
                replace.push((first, vec![Token::SemiColon]));
                for d in 1..4 {
                    drop[sig[k + d]] = true;
                }
                k += 4;
                continue;
            }
        }
        // `ON CONFLICT (cols) WHERE pred DO ...` (a partial index's inference, which
        // sqlparser does not read): the predicate's text becomes a last target column
        // named [`CONFLICT_WHERE`] ++ the text
        if word_at(0, "ON")
            && word_at(1, "CONFLICT")
            && at(2).is_some_and(|t| t.token == Token::LParen)
        {
            let mut depth = 0;
            let mut close = None;
            for d in 2..sig.len() - k {
                match at(d).map(|t| &t.token) {
                    Some(Token::LParen) => depth += 1,
                    Some(Token::RParen) => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(d);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if let Some(c) = close
                && word_at(c + 1, "WHERE")
            {
                let mut end = None;
                let mut depth = 0;
                for d in c + 2..sig.len() - k {
                    match at(d).map(|t| &t.token) {
                        Some(Token::LParen) => depth += 1,
                        Some(Token::RParen) => depth -= 1,
                        Some(Token::Word(w))
                            if depth == 0 && w.value.eq_ignore_ascii_case("DO") =>
                        {
                            end = Some(d);
                            break;
                        }
                        _ => {}
                    }
                }
                if let Some(e) = end.filter(|e| *e > c + 2) {
                    // the predicate as written (its tokens, with the white space between)
                    let text: String = tokens[sig[k + c + 2]..sig[k + e]]
                        .iter()
                        .map(|t| t.token.to_string())
                        .collect();
                    let marker = Token::Word(datafusion::sql::sqlparser::tokenizer::Word {
                        value: format!("{CONFLICT_WHERE}{}", text.trim()),
                        quote_style: Some('"'),
                        keyword: Keyword::NoKeyword,
                    });
                    replace.push((sig[k + c], vec![Token::Comma, marker, Token::RParen]));
                    for d in c + 1..e {
                        drop[sig[k + d]] = true;
                    }
                    k += e;
                    continue;
                }
            }
        }
        // `text ARRAY` (the standard's spelling of `text[]`, TypeORM's): an `ARRAY` that does
        // not open a constructor (`ARRAY[...]`, `ARRAY(...)`) after a word
        if k > 0
            && word_at(0, "ARRAY")
            && sig
                .get(k - 1)
                .is_some_and(|&i| matches!(tokens[i].token, Token::Word(_)))
            && !at(1).is_some_and(|t| matches!(t.token, Token::LBracket | Token::LParen))
        {
            replace.push((sig[k], vec![Token::LBracket, Token::RBracket]));
            k += 1;
            continue;
        }
        // `ORDER BY x USING >` / `USING <`: the ordering operator of a sort key is its
        // direction (`DESC` / `ASC`); nothing else in SQL has `USING` before `<` or `>`
        if word_at(0, "USING")
            && let Some(dir) = at(1).and_then(|t| match t.token {
                Token::Lt => Some("ASC"),
                Token::Gt => Some("DESC"),
                _ => None,
            })
        {
            replace.push((sig[k], vec![Token::make_keyword(dir)]));
            drop[sig[k + 1]] = true;
            k += 2;
            continue;
        }
        // `inet '10.0.0.1'`, `cidr '10.0.0.0/8'` (a type name before a constant, which
        // sqlparser reads only for its own types): `'10.0.0.1'::inet`
        if (word_at(0, "inet") || word_at(0, "cidr"))
            && let Some(Token::SingleQuotedString(text)) = at(1).map(|t| &t.token)
            && let Some(Token::Word(name)) = at(0).map(|t| &t.token)
        {
            drop[sig[k]] = true;
            replace.push((
                sig[k + 1],
                vec![
                    Token::SingleQuotedString(text.clone()),
                    Token::DoubleColon,
                    Token::make_word(&name.value.to_lowercase(), None),
                ],
            ));
            k += 2;
            continue;
        }
        if word_at(1, "FOR")
            && word_at(2, "SYSTEM_TIME")
            && word_at(3, "AS")
            && word_at(4, "OF")
            && word_at(5, "PROCTIME")
            && at(6).is_some_and(|t| t.token == Token::LParen)
            && at(7).is_some_and(|t| t.token == Token::RParen)
            && let Some(Token::Word(name)) = at(0).map(|t| &t.token)
        {
            let marked = Token::make_word(
                &format!("__weir_temporal__{}", name.value.to_lowercase()),
                None,
            );
            let has_alias = matches!(at(8).map(|t| &t.token), Some(Token::Word(w))
                if w.keyword == Keyword::AS || w.keyword == Keyword::NoKeyword);
            let mut with = vec![marked];
            if !has_alias {
                with.push(Token::Whitespace(
                    datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
                ));
                with.push(Token::make_keyword("AS"));
                with.push(Token::Whitespace(
                    datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
                ));
                with.push(Token::Word(name.clone()));
            }
            replace.push((sig[k], with));
            for d in 1..8 {
                drop[sig[k + d]] = true;
            }
            k += 8;
            continue;
        }
        k += 1;
    }
    if replace.is_empty() {
        return (tokens, marks);
    }
    let mut out = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if drop[i] {
            continue;
        }
        match replace.iter().find(|(r, _)| *r == i) {
            Some((_, with)) => {
                for w in with {
                    out.push(TokenWithSpan {
                        token: w.clone(),
                        span: t.span,
                    });
                }
            }
            None => out.push(t),
        }
    }
    (out, marks)
}

/// sqlparser's syntax errors ("Expected: an expression, found: ; at Line: 1, Column: 11")
/// as Postgres words them (`syntax error at or near ";"`, `syntax error at end of input`,
/// `unterminated quoted string at or near "'abc"`), pointing at that place. Other errors
/// pass unchanged.
fn pg_syntax_error(e: WeirError, index: &LineIndex) -> WeirError {
    if e.code != crate::error::sqlstate::SYNTAX_ERROR || e.position.is_some() {
        return e;
    }
    let Some((head, place)) = e.message.rsplit_once(" at Line: ") else {
        // (sqlparser names no place for the end of the text)
        if e.message.ends_with("found: EOF") {
            let end = index.sql.chars().count() + 1;
            return WeirError {
                message: "syntax error at end of input".to_owned(),
                position: u32::try_from(end).ok(),
                ..e
            };
        }
        return e;
    };
    let Some((line, column)) = place.split_once(", Column: ") else {
        return e;
    };
    let (Ok(line), Ok(column)) = (line.trim().parse::<u64>(), column.trim().parse::<u64>()) else {
        return e;
    };
    let loc = Location { line, column };
    let position = index.position(loc);
    let rest = index.sql.get(index.offset(loc)..).unwrap_or_default();
    let message = if head.contains("Unterminated string literal")
        || head.contains("Unterminated dollar-quoted")
        || head.contains("Unterminated encoded string literal")
    {
        format!("unterminated quoted string at or near \"{rest}\"")
    } else if head.contains("Unterminated multi-line comment") {
        format!("unterminated /* comment at or near \"{rest}\"")
    } else if let Some((_, found)) = head.rsplit_once("found: ") {
        if found == "EOF" {
            "syntax error at end of input".to_owned()
        } else {
            format!("syntax error at or near \"{found}\"")
        }
    } else {
        return e.with_position(position);
    };
    WeirError {
        message,
        position: u32::try_from(position).ok(),
        ..e
    }
}

pub(crate) fn syntax_near(t: &TokenWithSpan) -> WeirError {
    if t.token == Token::EOF {
        WeirError::syntax("syntax error at end of input")
    } else {
        WeirError::syntax(format!("syntax error at or near \"{}\"", t.token))
    }
}

fn parse_one(p: &mut Parser) -> Result<Statement> {
    let first = p.peek_token();
    let Token::Word(w) = &first.token else {
        return classify(p.parse_statement()?);
    };
    if w.quote_style.is_none()
        && w.value.eq_ignore_ascii_case("checkpoint")
        && matches!(p.peek_nth_token(1).token, Token::EOF | Token::SemiColon)
    {
        p.next_token();
        return Ok(Statement::Checkpoint);
    }
    match w.keyword {
        Keyword::CREATE => {
            // (UNLOGGED: every table is written durably here, more than Postgres promises)
            let unlogged = matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::UNLOGGED)
                && matches!(&p.peek_nth_token(2).token, Token::Word(w) if w.keyword == Keyword::TABLE);
            if unlogged
                || matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::TABLE)
            {
                p.next_token();
                p.next_token();
                if unlogged {
                    p.next_token();
                }
                return parse_create_table(p, false);
            }
            // `CREATE [LOCAL | GLOBAL] {TEMP | TEMPORARY} TABLE`
            let word = |n: usize, p: &Parser, k: &[Keyword]| matches!(&p.peek_nth_token(n).token, Token::Word(w) if k.contains(&w.keyword));
            let scope = usize::from(word(1, p, &[Keyword::LOCAL, Keyword::GLOBAL]));
            if word(1 + scope, p, &[Keyword::TEMP, Keyword::TEMPORARY])
                && word(2 + scope, p, &[Keyword::TABLE])
            {
                for _ in 0..3 + scope {
                    p.next_token();
                }
                return parse_create_table(p, true);
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::SOURCE)
            {
                p.next_token();
                p.next_token();
                return parse_create_source(p).map(|c| Statement::CreateSource(Box::new(c)));
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::SEQUENCE)
            {
                p.next_token();
                p.next_token();
                return parse_create_sequence(p).map(|c| Statement::CreateSequence(Box::new(c)));
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::DOMAIN)
            {
                p.next_token();
                p.next_token();
                return parse_create_domain(p).map(|c| Statement::CreateDomain(Box::new(c)));
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.value.eq_ignore_ascii_case("sink"))
            {
                p.next_token();
                p.next_token();
                return parse_create_sink(p).map(|c| Statement::CreateSink(Box::new(c)));
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::MATERIALIZED)
            {
                p.next_token();
                p.next_token();
                p.expect_keyword_is(Keyword::VIEW)?;
                return parse_create_view(p).map(|c| Statement::CreateView(Box::new(c)));
            }
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.quote_style.is_none()
                && ["role", "user", "group", "secret"].iter().any(|k| w.value.eq_ignore_ascii_case(k)))
            {
                p.next_token();
                return crate::sql::security::parse_create(p)
                    .map(|s| Statement::Security(Box::new(s)));
            }
            classify(p.parse_statement()?)
        }
        Keyword::ALTER => {
            p.next_token();
            if let Some(s) = crate::sql::security::parse_alter(p)? {
                return Ok(Statement::Security(Box::new(s)));
            }
            if let Some(r) = parse_alter_rename(p)? {
                return Ok(r);
            }
            if p.parse_keyword(Keyword::SCHEMA) {
                let name = normalize_ident(&p.parse_identifier()?);
                let to = if p.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
                    Ok(normalize_ident(&p.parse_identifier()?))
                } else if p.parse_keywords(&[Keyword::OWNER, Keyword::TO]) {
                    Err(normalize_ident(&p.parse_identifier()?))
                } else {
                    return Err(WeirError::syntax(
                        "ALTER SCHEMA name takes RENAME TO new_name or OWNER TO role",
                    ));
                };
                return Ok(Statement::AlterSchema { name, to });
            }
            if p.parse_keyword(Keyword::SEQUENCE) {
                return parse_alter_sequence(p).map(|a| Statement::AlterSequence(Box::new(a)));
            }
            if p.parse_keyword(Keyword::TYPE) {
                return parse_alter_type(p);
            }
            if p.parse_keyword(Keyword::DOMAIN) {
                return parse_alter_domain(p);
            }
            if let Some(a) = parse_alter_add_identity(p)? {
                return Ok(Statement::AddIdentity(Box::new(a)));
            }
            if let Some(a) = parse_alter_identity(p)? {
                return Ok(Statement::AlterIdentity(Box::new(a)));
            }
            if let Some(s) = parse_alter_column_setting(p)? {
                return Ok(s);
            }
            if let Some(s) = parse_alter_storage_parameters(p)? {
                return Ok(s);
            }
            p.prev_token();
            classify(p.parse_statement()?)
        }
        Keyword::GRANT | Keyword::REVOKE => {
            p.next_token();
            crate::sql::security::parse_grant(p, w.keyword == Keyword::GRANT)
                .map(|s| Statement::Security(Box::new(s)))
        }
        Keyword::EXPLAIN if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::CREATE) =>
        {
            p.next_token();
            p.next_token();
            if !p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
                return Err(WeirError::not_supported(
                    "EXPLAIN CREATE is supported for MATERIALIZED VIEW only",
                ));
            }
            parse_create_view(p).map(|c| Statement::ExplainView(Box::new(c)))
        }
        Keyword::EXPLAIN
            if matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::ANALYZE)
                && matches!(&p.peek_nth_token(2).token, Token::Word(w) if w.keyword == Keyword::MATERIALIZED) =>
        {
            p.next_token();
            p.next_token();
            p.next_token();
            p.expect_keyword_is(Keyword::VIEW)?;
            let name = relation_name(&p.parse_object_name(false)?)?;
            Ok(Statement::ExplainAnalyzeView(name))
        }
        Keyword::FLUSH => {
            p.next_token();
            Ok(Statement::Flush)
        }
        // `COMMENT ON CONSTRAINT name ON table IS 'text' | NULL` (sqlparser has no such form)
        Keyword::COMMENT if matches!(&p.peek_nth_token(2).token, Token::Word(w) if w.keyword == Keyword::CONSTRAINT) =>
        {
            p.next_token();
            p.expect_keyword_is(Keyword::ON)?;
            p.expect_keyword_is(Keyword::CONSTRAINT)?;
            let constraint = normalize_ident(&p.parse_identifier()?);
            p.expect_keyword_is(Keyword::ON)?;
            if parse_word(p, "DOMAIN") {
                return Err(WeirError::not_supported(
                    "COMMENT ON CONSTRAINT ... ON DOMAIN is not supported (COMMENT ON DOMAIN is)",
                ));
            }
            let relation = relation_name(&p.parse_object_name(false)?)?;
            p.expect_keyword_is(Keyword::IS)?;
            let text = if p.parse_keyword(Keyword::NULL) {
                None
            } else {
                Some(p.parse_literal_string()?)
            };
            Ok(Statement::Comment(CommentOn {
                kind: DropKind::Table,
                relation,
                column: None,
                constraint: Some(constraint),
                text,
            }))
        }
        Keyword::VACUUM | Keyword::ANALYZE => {
            p.next_token();
            parse_maintenance(p, w.keyword == Keyword::VACUUM)
        }
        // `REINDEX` / `CLUSTER`: the store keeps its indexes and rows in key order itself
        _ if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("reindex") => {
            p.next_token();
            if p.consume_token(&Token::LParen) {
                // (VERBOSE, TABLESPACE x, CONCURRENTLY): options, taken as given
                while !p.consume_token(&Token::RParen) {
                    if p.next_token().token == Token::EOF {
                        return Err(WeirError::syntax("syntax error at end of input"));
                    }
                }
            }
            let what = match p.next_token().token {
                Token::Word(w) => w.value.to_ascii_lowercase(),
                other => {
                    return Err(WeirError::syntax(format!(
                        "syntax error at or near \"{other}\""
                    )));
                }
            };
            if !["index", "table", "schema", "database", "system"].contains(&what.as_str()) {
                return Err(WeirError::syntax(format!(
                    "syntax error at or near \"{what}\""
                )));
            }
            let concurrently = p.parse_keyword(Keyword::CONCURRENTLY);
            let name = match p.peek_token().token {
                Token::EOF | Token::SemiColon => None,
                _ => Some(relation_name(&p.parse_object_name(false)?)?),
            };
            Ok(Statement::Reindex {
                what,
                name,
                concurrently,
            })
        }
        _ if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("cluster") => {
            p.next_token();
            let _ = p.parse_keyword(Keyword::VERBOSE);
            let table = match p.peek_token().token {
                Token::EOF | Token::SemiColon => None,
                _ => Some(relation_name(&p.parse_object_name(false)?)?),
            };
            let index = if table.is_some() && p.parse_keyword(Keyword::USING) {
                Some(relation_name(&p.parse_object_name(false)?)?)
            } else {
                None
            };
            Ok(Statement::Cluster { table, index })
        }
        _ if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("analyse") => {
            p.next_token();
            parse_maintenance(p, false)
        }
        // `REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA]`: views are kept
        // up to date incrementally; a refresh waits for this one to have caught up (FLUSH)
        Keyword::REFRESH => {
            p.next_token();
            p.expect_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW])?;
            let _ = p.parse_keyword(Keyword::CONCURRENTLY);
            let name = relation_name(&p.parse_object_name(false)?)?;
            if p.parse_keyword(Keyword::WITH) {
                if p.parse_keyword(Keyword::NO) {
                    expect_word(p, "DATA")?;
                    return Err(WeirError::not_supported(
                        "REFRESH MATERIALIZED VIEW ... WITH NO DATA is not supported: a materialized view here is always maintained",
                    ));
                }
                expect_word(p, "DATA")?;
            }
            Ok(Statement::Refresh(name))
        }
        Keyword::DROP => parse_drop(p),
        Keyword::SHOW => {
            p.next_token();
            parse_show(p)
        }
        Keyword::SET => {
            p.next_token();
            // SET CONSTRAINTS { ALL | name [, ...] } { DEFERRED | IMMEDIATE }
            if parse_word(p, "CONSTRAINTS") {
                let names = if p.parse_keyword(Keyword::ALL) {
                    None
                } else {
                    let mut names = Vec::new();
                    loop {
                        names.push(relation_name(&p.parse_object_name(false)?)?);
                        if !p.consume_token(&Token::Comma) {
                            break;
                        }
                    }
                    Some(names)
                };
                let deferred = if parse_word(p, "DEFERRED") {
                    true
                } else {
                    expect_word(p, "IMMEDIATE")?;
                    false
                };
                return Ok(Statement::SetConstraints { names, deferred });
            }
            parse_set(p)
        }
        Keyword::RESET => {
            p.next_token();
            let words = rest_words(p)?;
            use crate::sql::security::SecurityStmt;
            match words.join(" ").as_str() {
                "role" => Ok(Statement::Security(Box::new(SecurityStmt::SetRole(None)))),
                "session authorization" => Ok(Statement::Security(Box::new(
                    SecurityStmt::SetSessionAuthorization(None),
                ))),
                _ => Ok(Statement::ResetVariable(words.join(" "))),
            }
        }
        Keyword::BEGIN | Keyword::START => {
            let words = rest_words(p)?;
            let skip = match words.as_slice() {
                [first, ..] if first == "start" => match words.get(1).map(String::as_str) {
                    Some("transaction") => 2,
                    _ => {
                        return Err(WeirError::syntax(
                            "syntax error: START TRANSACTION expected",
                        ));
                    }
                },
                [_, second, ..] if second == "work" || second == "transaction" => 2,
                _ => 1,
            };
            Ok(Statement::Begin(tx_modes(&words[skip.min(words.len())..])?))
        }
        Keyword::COMMIT | Keyword::END => {
            rest_words(p)?;
            Ok(Statement::Commit)
        }
        Keyword::ROLLBACK | Keyword::ABORT => {
            p.next_token();
            let _ = p.parse_keyword(Keyword::WORK) || p.parse_keyword(Keyword::TRANSACTION);
            if p.parse_keyword(Keyword::TO) {
                return parse_savepoint_name(p).map(Statement::RollbackTo);
            }
            rest_words(p)?;
            Ok(Statement::Rollback)
        }
        Keyword::SAVEPOINT => {
            p.next_token();
            Ok(Statement::Savepoint(normalize_ident(
                &p.parse_identifier()?,
            )))
        }
        Keyword::RELEASE => {
            p.next_token();
            parse_savepoint_name(p).map(Statement::Release)
        }
        Keyword::DECLARE => parse_declare(p).map(|d| Statement::Declare(Box::new(d))),
        Keyword::FETCH => parse_fetch(p).map(Statement::Fetch),
        Keyword::CLOSE => parse_close(p).map(Statement::Close),
        Keyword::COPY => parse_copy(p).map(|c| Statement::Copy(Box::new(c))),
        _ if at_subscribe(p) => parse_subscribe(p).map(Statement::Subscribe),
        _ if matches!(&p.peek_token().token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("do")) =>
        {
            p.next_token();
            parse_do(p).map(|b| Statement::Do(Box::new(b)))
        }
        Keyword::DISCARD => {
            p.next_token();
            let words = rest_words(p)?;
            match words.join(" ").as_str() {
                "all" => Ok(Statement::DiscardAll),
                "plans" => Ok(Statement::NoOp("DISCARD PLANS")),
                "sequences" => Ok(Statement::NoOp("DISCARD SEQUENCES")),
                "temp" | "temporary" => Ok(Statement::NoOp("DISCARD TEMP")),
                _ => Err(WeirError::syntax(
                    "DISCARD takes ALL, PLANS, SEQUENCES or TEMP",
                )),
            }
        }
        _ => classify(p.parse_statement()?),
    }
}

/// A DELETE's target table and its alias, when it has one.
fn delete_alias(d: &ast::Delete) -> Option<(ast::Ident, String)> {
    let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) = &d.from;
    match &from.first()?.relation {
        ast::TableFactor::Table {
            name,
            alias: Some(alias),
            ..
        } => Some((
            name.0.last()?.as_ident()?.clone(),
            normalize_ident(&alias.name),
        )),
        _ => None,
    }
}

/// Route a statement sqlparser parsed: queries and DML go to DataFusion, the rest is refused
/// with a message that names it.
fn classify(stmt: ast::Statement) -> Result<Statement> {
    match stmt {
        // `SELECT ... INTO t FROM ...` creates t, as CREATE TABLE t AS does
        ast::Statement::Query(mut q) if matches!(q.body.as_ref(), ast::SetExpr::Select(s) if s.into.is_some()) =>
        {
            let ast::SetExpr::Select(s) = q.body.as_mut() else {
                return Err(WeirError::internal("SELECT INTO without its SELECT"));
            };
            let Some(into) = s.into.take() else {
                return Err(WeirError::internal("SELECT INTO without INTO"));
            };
            Ok(Statement::CreateTableAs(Box::new(CreateTableAs {
                name: created_relation_name(&into.name)?,
                if_not_exists: false,
                temporary: into.temporary.then_some(OnCommit::PreserveRows),
                columns: vec![],
                query: q,
                with_data: true,
            })))
        }
        ast::Statement::Query(_) | ast::Statement::Explain { .. } => {
            Ok(Statement::Query(Box::new(stmt)))
        }
        // `DELETE FROM t USING u WHERE c`: the rows of t with a match, `WHERE EXISTS (SELECT
        // 1 FROM u WHERE c)` (DataFusion plans no USING)
        // (kept with its USING: the engine runs it, `Engine::delete_using`)
        ast::Statement::Delete(mut d) if d.using.is_none() && delete_alias(&d).is_some() => {
            strip_delete_alias(&mut d);
            Ok(Statement::Dml(Box::new(ast::Statement::Delete(d))))
        }
        ast::Statement::Insert(_) | ast::Statement::Update { .. } | ast::Statement::Delete(_) => {
            Ok(Statement::Dml(Box::new(stmt)))
        }
        ast::Statement::Comment {
            object_type,
            object_name,
            comment,
            ..
        } => {
            use ast::CommentObject as O;
            if matches!(object_type, O::Schema) {
                let [part] = object_name.0.as_slice() else {
                    return Err(WeirError::syntax(format!(
                        "invalid schema name {object_name}"
                    )));
                };
                let name = part.as_ident().map(normalize_ident).ok_or_else(|| {
                    WeirError::syntax(format!("invalid schema name {object_name}"))
                })?;
                return Ok(Statement::CommentOnSchema {
                    name,
                    text: comment,
                });
            }
            let kind = match object_type {
                O::Table | O::Column => DropKind::Table,
                O::View => DropKind::View,
                O::MaterializedView => DropKind::MaterializedView,
                O::Sequence => DropKind::Sequence,
                O::Index => DropKind::Index,
                O::Type | O::Domain => DropKind::Type,
                other => {
                    return Err(WeirError::not_supported(format!(
                        "COMMENT ON {other} is not supported (tables, views, materialized views, sequences, columns, indexes, constraints and types take comments)"
                    )));
                }
            };
            let (relation, column) = if matches!(object_type, O::Column) {
                let mut parts = object_name.0.clone();
                let col = parts.pop().and_then(|p| p.as_ident().map(normalize_ident));
                if parts.is_empty() {
                    return Err(WeirError::syntax(format!(
                        "column name must be qualified: COMMENT ON COLUMN table.{} IS ...",
                        object_name
                    )));
                }
                (relation_name(&ast::ObjectName(parts))?, col)
            } else if matches!(object_type, O::Type | O::Domain) {
                (
                    crate::catalog::user_types::user_type_name(&object_name),
                    None,
                )
            } else {
                (relation_name(&object_name)?, None)
            };
            Ok(Statement::Comment(CommentOn {
                kind,
                relation,
                column,
                constraint: None,
                text: comment,
            }))
        }
        ast::Statement::Deallocate { name, .. } => Ok(Statement::Deallocate(
            if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                None
            } else {
                Some(normalize_ident(&name))
            },
        )),
        ast::Statement::CreateExtension(ce) => Ok(Statement::CreateExtension {
            name: normalize_ident(&ce.name),
            if_not_exists: ce.if_not_exists,
            schema: ce.schema.as_ref().map(normalize_ident),
            version: ce.version.as_ref().map(|v| v.value.clone()),
        }),
        ast::Statement::DropExtension(de) => Ok(Statement::DropExtension {
            names: de.names.iter().map(normalize_ident).collect(),
            if_exists: de.if_exists,
        }),
        ast::Statement::CreateSchema {
            schema_name,
            if_not_exists,
            with: None,
            options: None,
            default_collate_spec: None,
            clone: None,
        } => {
            let name = match &schema_name {
                ast::SchemaName::Simple(n) | ast::SchemaName::NamedAuthorization(n, _) => {
                    match n.0.as_slice() {
                        [part] => part.as_ident().map(normalize_ident),
                        _ => None,
                    }
                }
                ast::SchemaName::UnnamedAuthorization(role) => Some(normalize_ident(role)),
            }
            .ok_or_else(|| WeirError::syntax(format!("invalid schema name {schema_name}")))?;
            let owner = match &schema_name {
                ast::SchemaName::Simple(_) => None,
                ast::SchemaName::NamedAuthorization(_, role)
                | ast::SchemaName::UnnamedAuthorization(role) => Some(normalize_ident(role)),
            };
            Ok(Statement::CreateSchema {
                name,
                if_not_exists,
                owner,
            })
        }
        ast::Statement::Prepare {
            name,
            data_types,
            statement,
        } => {
            let text = statement.to_string();
            // what Postgres' grammar takes after PREPARE ... AS
            if !matches!(
                *statement,
                ast::Statement::Query(_)
                    | ast::Statement::Insert(_)
                    | ast::Statement::Update(_)
                    | ast::Statement::Delete(_)
                    | ast::Statement::Merge(_)
            ) {
                let first = text.split_whitespace().next().unwrap_or_default();
                return Err(
                    WeirError::syntax(format!("syntax error at or near \"{first}\"")).with_hint(
                        "PREPARE takes SELECT, VALUES, INSERT, UPDATE, DELETE or MERGE.",
                    ),
                );
            }
            let body = classify(*statement)?;
            Ok(Statement::Prepare(Box::new(PrepareStmt {
                name: normalize_ident(&name),
                types: data_types,
                body: Parsed {
                    stmt: body,
                    text: text.into(),
                    offset: 0,
                },
            })))
        }
        ast::Statement::Execute {
            name: Some(name),
            parameters,
            immediate: false,
            into,
            using,
            output: false,
            default: false,
            ..
        } if into.is_empty() && using.is_empty() && name.0.len() == 1 => {
            let name = name.0[0]
                .as_ident()
                .map(normalize_ident)
                .ok_or_else(|| WeirError::syntax(format!("syntax error at or near \"{name}\"")))?;
            Ok(Statement::Execute(Box::new(ExecuteStmt {
                name,
                args: parameters,
            })))
        }
        ast::Statement::Lock(l) => {
            use ast::LockTableMode as M;
            let tables = l
                .tables
                .iter()
                .map(|t| relation_name(&t.name))
                .collect::<Result<Vec<_>>>()?;
            // the modes that conflict with ROW EXCLUSIVE (what writers take); ACCESS
            // EXCLUSIVE when no mode is named
            let excludes_writers = matches!(
                l.lock_mode,
                None | Some(M::Share | M::ShareRowExclusive | M::Exclusive | M::AccessExclusive)
            );
            Ok(Statement::Lock(LockStmt {
                tables,
                excludes_writers,
                read_only: matches!(l.lock_mode, Some(M::AccessShare)),
                nowait: l.nowait,
            }))
        }
        ast::Statement::Truncate(t) => {
            if t.partitions.is_some() || t.on_cluster.is_some() {
                return Err(WeirError::not_supported(format!("{t} is not supported")));
            }
            let names = t
                .table_names
                .iter()
                .map(|n| relation_name(&n.name))
                .collect::<Result<Vec<_>>>()?;
            Ok(Statement::Truncate(
                names,
                matches!(t.cascade, Some(ast::CascadeOption::Cascade)),
                matches!(t.identity, Some(ast::TruncateIdentityOption::Restart)),
            ))
        }
        ast::Statement::CreateFunction(f) => Ok(Statement::CreateFunction(Box::new(f))),
        ast::Statement::CreateIndex(ci) => create_index(ci),
        ast::Statement::DropFunction(d) => Ok(Statement::DropFunction(Box::new(d))),
        ast::Statement::AlterTable(a) if a.table_type.is_none() && a.location.is_none() => {
            Ok(Statement::AlterTable(Box::new(a)))
        }
        ast::Statement::CreateType {
            name,
            representation,
        } => match representation {
            Some(ast::UserDefinedTypeRepresentation::Enum { labels }) => {
                Ok(Statement::CreateEnumType {
                    name: match name.0.as_slice() {
                        // (made in the first schema of the search path)
                        [part] => {
                            let n = part.as_ident().map(normalize_ident).unwrap_or_default();
                            crate::sql::search_path::created(&n)?.unwrap_or(n)
                        }
                        _ => crate::catalog::user_types::user_type_name(&name),
                    },
                    labels: labels.into_iter().map(|l| l.value).collect(),
                })
            }
            _ => Err(WeirError::not_supported(
                "CREATE TYPE is supported for enum types (CREATE TYPE name AS ENUM (...)) only",
            )),
        },
        ast::Statement::CreateSequence {
            temporary: false,
            if_not_exists,
            name,
            sequence_options,
            owned_by: None,
            ..
        } => Ok(Statement::CreateSequence(Box::new(CreateSequence {
            name: created_relation_name(&name)?,
            if_not_exists,
            options: self::sequence_options(&sequence_options)?,
        }))),
        ast::Statement::CreateView(cv) if !cv.materialized && !cv.temporary => {
            if !cv.options.to_string().is_empty() {
                return Err(WeirError::not_supported(
                    "CREATE VIEW ... WITH (options) is not supported",
                ));
            }
            Ok(Statement::CreatePlainView(Box::new(PlainView {
                name: created_relation_name(&cv.name)?,
                or_replace: cv.or_replace,
                columns: cv
                    .columns
                    .iter()
                    .map(|c| normalize_ident(&c.name))
                    .collect(),
                query: cv.query,
            })))
        }
        ast::Statement::Merge(m) => Ok(Statement::Merge(Box::new(m))),
        // one database: creating it again is Postgres' 42P04 (Django's test runner with
        // --keepdb takes that as "already there"), another is refused
        ast::Statement::CreateDatabase {
            db_name,
            if_not_exists,
            ..
        } => {
            let name = relation_name(&db_name)?;
            if name != crate::catalog::DATABASE_NAME {
                return Err(WeirError::not_supported(format!(
                    "CREATE DATABASE is not supported: Weir serves one database, \"{}\"",
                    crate::catalog::DATABASE_NAME
                )));
            }
            if if_not_exists {
                return Ok(Statement::NoOp("CREATE DATABASE"));
            }
            Err(WeirError::new(
                "42P04",
                format!("database \"{name}\" already exists"),
            ))
        }
        ast::Statement::LISTEN { channel } => Ok(Statement::Listen(normalize_ident(&channel))),
        ast::Statement::UNLISTEN { channel } => Ok(Statement::Unlisten(
            (channel.value != "*" || channel.quote_style.is_some())
                .then(|| normalize_ident(&channel)),
        )),
        ast::Statement::NOTIFY { channel, payload } => Ok(Statement::Notify {
            channel: normalize_ident(&channel),
            payload: payload.unwrap_or_default(),
        }),
        other => {
            let text = other.to_string();
            let head: Vec<&str> = text.split_whitespace().take(2).collect();
            Err(WeirError::not_supported(format!(
                "{} is not supported",
                head.join(" ").to_uppercase()
            )))
        }
    }
}

/// Normalize an identifier as Postgres does: unquoted names fold to lower case.
pub fn normalize_ident(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// A relation name, which may be qualified with our schema (`public`) or database.
/// One query from its text (a stored view, a query Weir writes itself): 42601 when the
/// text is not exactly one query.
pub fn parse_query(text: &str) -> Result<Box<ast::Query>> {
    let mut parsed = parse_tree(text, usize::MAX)?;
    match (parsed.pop().map(|p| p.stmt), parsed.is_empty()) {
        (Some(Statement::Query(q)), true) => match *q {
            ast::Statement::Query(q) => Ok(q),
            _ => Err(WeirError::syntax("expected a query")),
        },
        _ => Err(WeirError::syntax("expected one query")),
    }
}

/// One SQL expression from its text (a stored DEFAULT).
/// `DELETE FROM t AS a ... a.col`: DataFusion resolves no alias of the target, so its
/// references become the table's own name.
fn strip_delete_alias(d: &mut ast::Delete) {
    let Some((table, alias)) = delete_alias(d) else {
        return;
    };
    let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) =
        &mut d.from;
    if let Some(ast::TableFactor::Table { alias: a, .. }) =
        from.first_mut().map(|t| &mut t.relation)
    {
        *a = None;
    }
    let _ = ast::visit_expressions_mut(d, |e| {
        if let ast::Expr::CompoundIdentifier(ids) = e
            && ids.len() == 2
            && normalize_ident(&ids[0]) == alias
        {
            ids[0] = table.clone();
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `DELETE FROM t [AS a] USING u WHERE c` as `DELETE FROM t WHERE EXISTS (SELECT 1 FROM u
/// WHERE c)` (DataFusion plans no USING; see [`strip_delete_alias`]), where RETURNING reads only the deleted rows (a USING
/// relation's columns named in it are refused by name: they would not resolve).
pub fn delete_using_as_exists(mut d: ast::Delete) -> Result<ast::Delete> {
    strip_delete_alias(&mut d);
    let Some(using) = d.using.take() else {
        return Ok(d);
    };
    if let Some(items) = &d.returning {
        let names: Vec<String> = relation_labels(&using);
        if let Some(n) = items.iter().find_map(|i| returning_reads(i, &names)) {
            return Err(WeirError::internal(format!(
                "DELETE ... USING ... RETURNING reads \"{n}\" but was run as DELETE ... WHERE EXISTS"
            )));
        }
    }
    let from: Vec<String> = using.iter().map(|t| t.to_string()).collect();
    let text = match &d.selection {
        Some(c) => format!("SELECT 1 FROM {} WHERE {c}", from.join(", ")),
        None => format!("SELECT 1 FROM {}", from.join(", ")),
    };
    d.selection = Some(ast::Expr::Exists {
        subquery: parse_query(&text)?,
        negated: false,
    });
    Ok(d)
}

pub fn parse_expr_text(text: &str) -> Result<ast::Expr> {
    let dialect = PostgreSqlDialect {};
    Ok(Parser::new(&dialect).try_with_sql(text)?.parse_expr()?)
}

/// The names the items of a FROM list (and their joins) are known by (see
/// [`relation_label`]).
pub fn relation_labels(from: &[ast::TableWithJoins]) -> Vec<String> {
    from.iter()
        .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
        .filter_map(relation_label)
        .collect()
}

/// The name a FROM item is known by: its alias, else its table's name.
pub fn relation_label(tf: &ast::TableFactor) -> Option<String> {
    match tf {
        ast::TableFactor::Table { alias: Some(a), .. }
        | ast::TableFactor::Derived { alias: Some(a), .. }
        | ast::TableFactor::Function { alias: Some(a), .. } => Some(normalize_ident(&a.name)),
        ast::TableFactor::Table { name, .. } => relation_name(name).ok(),
        _ => None,
    }
}

/// The catalog key of the relation a statement names: `t` (along the session's search path
/// when it holds a user schema, else public's), `public.t` and `weir.public.t` are `t`,
/// `app.t` / `"app"."t"` / `weir.app.t` are `app.t` (`catalog/schemas.rs`); a name in
/// `pg_catalog` or `information_schema` is 42501.
pub fn relation_name(name: &ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalize_ident)
                .ok_or_else(|| WeirError::syntax(format!("invalid relation name {name}")))
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        // (the session's search_path, when it holds a user schema: `sql/search_path.rs`)
        [n] => Ok(crate::sql::search_path::resolve(n).unwrap_or_else(|| n.clone())),
        [s, n] | [_, s, n] if s != "pg_catalog" && s != "information_schema" => {
            Ok(relation_key(Some(s), n))
        }
        _ => Err(WeirError::new(
            crate::error::sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("permission denied to create \"{name}\""),
        )
        .with_detail("System catalog modifications are currently disallowed.")),
    }
}

/// [`relation_name`] without the session's search path: an unqualified name as written (a
/// new name a relation is renamed to, which stays in its schema).
pub fn unresolved_relation_name(name: &ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [part] => part
            .as_ident()
            .map(normalize_ident)
            .ok_or_else(|| WeirError::syntax(format!("invalid relation name {name}"))),
        _ => relation_name(name),
    }
}

/// The catalog key of a relation a statement creates: an unqualified name is created in
/// the first schema of the session's search_path (public by default), whatever relation of
/// that name another schema of the path holds.
pub fn created_relation_name(name: &ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [part] => {
            let n = part
                .as_ident()
                .map(normalize_ident)
                .ok_or_else(|| WeirError::syntax(format!("invalid relation name {name}")))?;
            Ok(crate::sql::search_path::created(&n)?.unwrap_or(n))
        }
        _ => relation_name(name),
    }
}

/// A relation's name without its schema (`users` of `app.users`): what the names Postgres
/// derives from it (`users_pkey`, `users_a_check`) start with.
pub fn bare_relation_name(key: &str) -> &str {
    crate::catalog::schemas::split_relation_name(key).1
}

/// The relation names of the SQL trees a statement carries, qualified along the session's
/// search_path (a no-op unless it holds a user schema: `sql/search_path.rs`).
fn qualify_names(stmt: &mut Statement) {
    use crate::sql::client_stmts::{CopySource, CursorQuery};
    use crate::sql::search_path::qualify;
    match stmt {
        Statement::Query(q) | Statement::Dml(q) => qualify(q.as_mut()),
        Statement::CreateView(v) | Statement::ExplainView(v) => qualify(v.query.as_mut()),
        Statement::CreatePlainView(v) => qualify(v.query.as_mut()),
        Statement::CreateTableAs(c) => qualify(c.query.as_mut()),
        Statement::CreateSink(s) => {
            if let Some(q) = s.query.as_mut() {
                qualify(q.as_mut())
            }
        }
        Statement::AlterTable(a) => qualify(a.as_mut()),
        Statement::Merge(m) => qualify(m.as_mut()),
        Statement::Declare(d) => {
            if let CursorQuery::Query(q) = &mut d.query {
                qualify(q.as_mut())
            }
        }
        Statement::Copy(c) => {
            if let crate::sql::client_stmts::Copy::To {
                source: CopySource::Query(q),
                ..
            } = c.as_mut()
            {
                qualify(q.as_mut())
            }
        }
        _ => {}
    }
}

/// A catalog key as an SQL name, its parts quoted (`"app"."users"`, `"users"`).
pub fn relation_object_name(key: &str) -> ast::ObjectName {
    // (a relation of public named off the search path: one name no relation has)
    if crate::sql::search_path::written(key) != key {
        return ast::ObjectName::from(vec![ast::Ident::with_quote('"', key)]);
    }
    let parts: Vec<ast::Ident> = match key.split_once('.') {
        Some((s, n)) => vec![
            ast::Ident::with_quote('"', s),
            ast::Ident::with_quote('"', n),
        ],
        None => vec![ast::Ident::with_quote('"', key)],
    };
    ast::ObjectName::from(parts)
}

/// The catalog key of the relation a plan's table reference names (`app.users` for
/// `app.users`, `users` for `users` and `public.users`).
pub fn reference_key(t: &datafusion::common::TableReference) -> String {
    relation_key(t.schema(), t.table())
}

/// The key of `name` in the schema of the relation keyed `relation` (an index's or a
/// constraint's name beside its table: `app.users_pkey` for `app.users`).
pub fn sibling_key(relation: &str, name: &str) -> String {
    relation_key(
        Some(crate::catalog::schemas::split_relation_name(relation).0),
        name,
    )
}

/// The catalog key of a relation in `schema` (none: the search path, `public`): its bare
/// name in `public`, `schema.name` in a user schema (see `catalog/schemas.rs`).
pub fn relation_key(schema: Option<&str>, name: &str) -> String {
    match schema {
        None | Some("public") => name.to_owned(),
        Some(s) => format!("{s}.{name}"),
    }
}

/// `CREATE TABLE [IF NOT EXISTS] name [(columns)] AS query [WITH [NO] DATA]`, or a table
/// of declared columns.
fn parse_create_table(p: &mut Parser, temporary: bool) -> Result<Statement> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = p.parse_object_name(false)?;
    // (a temporary table is not made along the search path: Weir keeps it in public)
    let name = if temporary {
        unresolved_relation_name(&name)?
    } else {
        created_relation_name(&name)?
    };
    let on_commit = |given: Option<OnCommit>| -> Result<Option<OnCommit>> {
        match (temporary, given) {
            (true, g) => Ok(Some(g.unwrap_or(OnCommit::PreserveRows))),
            (false, None) => Ok(None),
            (false, Some(_)) => Err(WeirError::new(
                crate::error::sqlstate::INVALID_TABLE_DEFINITION,
                "ON COMMIT can only be used on temporary tables",
            )),
        }
    };
    // `CREATE TEMP TABLE t ON COMMIT DROP AS query`
    let early = parse_on_commit(p)?;
    // `(a, b) AS`: names for the query's columns, not column definitions
    let named_columns = p.peek_token().token == Token::LParen
        && matches!(p.peek_nth_token(1).token, Token::Word(_))
        && matches!(p.peek_nth_token(2).token, Token::Comma | Token::RParen);
    if named_columns || p.peek_keyword(Keyword::AS) {
        let columns = if named_columns {
            p.expect_token(&Token::LParen)?;
            let cols = p.parse_comma_separated(|p| p.parse_identifier())?;
            p.expect_token(&Token::RParen)?;
            cols.iter().map(normalize_ident).collect()
        } else {
            vec![]
        };
        let early = early.or(parse_on_commit(p)?);
        p.expect_keyword_is(Keyword::AS)?;
        let query = p.parse_query()?;
        let with_data = if p.parse_keyword(Keyword::WITH) {
            let no = p.parse_keyword(Keyword::NO);
            expect_word(p, "DATA")?;
            !no
        } else {
            true
        };
        return Ok(Statement::CreateTableAs(Box::new(CreateTableAs {
            name,
            if_not_exists,
            temporary: on_commit(early)?,
            columns,
            query,
            with_data,
        })));
    }
    let mut c = parse_table_definition(p, name, if_not_exists)?;
    c.temporary = on_commit(early.or(c.temporary))?;
    Ok(Statement::CreateTable(Box::new(c)))
}

fn parse_table_definition(
    p: &mut Parser,
    name: String,
    if_not_exists: bool,
) -> Result<CreateTable> {
    p.expect_token(&Token::LParen)?;
    // `LIKE source [INCLUDING | EXCLUDING what ...]` first, then the other elements
    let like = if p.parse_keyword(Keyword::LIKE) {
        let source = relation_name(&p.parse_object_name(false)?)?;
        let mut including: Vec<String> = Vec::new();
        loop {
            let include = if parse_word(p, "INCLUDING") {
                true
            } else if parse_word(p, "EXCLUDING") {
                false
            } else {
                break;
            };
            let what = p.parse_identifier()?.value.to_lowercase();
            if include {
                including.push(what);
            } else if what == "all" {
                including.clear();
            } else {
                including.retain(|w| *w != what);
                if including.iter().any(|w| w == "all") {
                    // ALL but this one
                    including = [
                        "defaults",
                        "constraints",
                        "indexes",
                        "comments",
                        "identity",
                        "generated",
                    ]
                    .iter()
                    .map(|w| (*w).to_owned())
                    .filter(|w| *w != what)
                    .collect();
                }
            }
        }
        Some(LikeSpec { source, including })
    } else {
        None
    };
    let elements = if like.is_some() && p.consume_token(&Token::RParen) {
        TableElements {
            columns: vec![],
            primary_key: None,
            primary_key_name: None,
            watermark: None,
            checks: vec![],
            uniques: vec![],
            foreign_keys: vec![],
        }
    } else {
        if like.is_some() {
            p.expect_token(&Token::Comma)?;
        }
        parse_table_elements(p, &name)?
    };
    let TableElements {
        columns,
        primary_key,
        primary_key_name,
        watermark,
        checks,
        uniques,
        foreign_keys,
    } = elements;
    let mut append_only = false;
    let mut with_options = Vec::new();
    let mut on_commit = None;
    loop {
        if parse_word(p, "APPEND") {
            expect_word(p, "ONLY")?;
            append_only = true;
        } else if let Some(o) = parse_on_commit(p)? {
            on_commit = Some(o);
        } else if p.parse_keyword(Keyword::WITH) {
            with_options = parse_with_options(p)?;
        } else {
            break;
        }
    }
    // Postgres' storage parameters (`WITH (fillfactor = 70)`, pg_dump writes them): checked
    // and ignored; a connector table's options are the connector's
    {
        use crate::sql::storage_parameters::{Of, check, is_known};
        if !with_options.is_empty() && with_options.iter().all(|(k, _)| is_known(Of::Table, k)) {
            let params: Vec<(String, Option<String>)> =
                with_options.drain(..).map(|(k, v)| (k, Some(v))).collect();
            check(Of::Table, &params)?;
        }
    }
    let format = parse_format(p)?;
    Ok(CreateTable {
        name,
        if_not_exists,
        temporary: on_commit,
        columns,
        primary_key: primary_key.unwrap_or_default(),
        primary_key_name,
        append_only,
        watermark,
        with_options,
        format,
        checks,
        uniques,
        foreign_keys,
        like,
        domains: vec![],
    })
}

/// `[FORMAT f ENCODE e]`, lowercased.
fn parse_format(p: &mut Parser) -> Result<Option<(String, String)>> {
    if !parse_word(p, "FORMAT") {
        return Ok(None);
    }
    let f = p.parse_identifier()?.value.to_lowercase();
    expect_word(p, "ENCODE")?;
    let e = p.parse_identifier()?.value.to_lowercase();
    Ok(Some((f, e)))
}

fn parse_create_source(p: &mut Parser) -> Result<CreateSource> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = created_relation_name(&p.parse_object_name(false)?)?;
    let (columns, watermark) = if p.consume_token(&Token::LParen) {
        let TableElements {
            columns,
            primary_key: pk,
            primary_key_name: _,
            watermark,
            checks,
            uniques,
            foreign_keys,
        } = parse_table_elements(p, &name)?;
        if !foreign_keys.is_empty() {
            return Err(WeirError::not_supported(
                "a source cannot have FOREIGN KEY constraints",
            ));
        }
        if !uniques.is_empty() {
            return Err(WeirError::not_supported(
                "a source cannot have UNIQUE constraints",
            ));
        }
        if !checks.is_empty() {
            return Err(WeirError::not_supported(
                "a source cannot have CHECK constraints (filter its rows in a view)",
            ));
        }
        if pk.is_some() {
            return Err(WeirError::new(
                crate::error::sqlstate::INVALID_TABLE_DEFINITION,
                "a source cannot have a PRIMARY KEY",
            ));
        }
        (columns, watermark)
    } else {
        (Vec::new(), None)
    };
    // INCLUDE partition | offset | key | timestamp [AS name]: metadata columns, kept as
    // `include.<what>` options
    let mut includes: Vec<(String, String)> = Vec::new();
    while parse_word(p, "INCLUDE") {
        let what = normalize_ident(&p.parse_identifier()?);
        if !matches!(what.as_str(), "partition" | "offset" | "key" | "timestamp") {
            return Err(WeirError::syntax(format!(
                "INCLUDE {what}: expected partition, offset, key or timestamp"
            )));
        }
        let col = if p.parse_keyword(Keyword::AS) {
            normalize_ident(&p.parse_identifier()?)
        } else {
            format!("_{what}")
        };
        includes.push((format!("include.{what}"), col));
    }
    if !p.parse_keyword(Keyword::WITH) {
        return Err(WeirError::syntax(format!(
            "syntax error at or near \"{}\": CREATE SOURCE needs WITH (connector = ...)",
            p.peek_token().token
        )));
    }
    let mut with_options = parse_with_options(p)?;
    with_options.extend(includes);
    let format = parse_format(p)?;
    Ok(CreateSource {
        name,
        if_not_exists,
        columns,
        watermark,
        with_options,
        format,
    })
}

fn parse_create_sink(p: &mut Parser) -> Result<CreateSink> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = created_relation_name(&p.parse_object_name(false)?)?;
    let mut with_options = Vec::new();
    let (from, query) = if p.parse_keyword(Keyword::FROM) {
        (Some(relation_name(&p.parse_object_name(false)?)?), None)
    } else if p.parse_keyword(Keyword::AS) {
        let mut q = p.parse_query()?;
        // `... FROM t WITH (...)` parses as the table's (MSSQL) hints: they are the sink's
        // options
        if let Some(hints) = last_table_hints(&mut q) {
            with_options = hints_to_options(std::mem::take(hints))?;
        }
        (None, Some(q))
    } else {
        return Err(WeirError::syntax(format!(
            "syntax error at or near \"{}\": CREATE SINK needs FROM view or AS query",
            p.peek_token().token
        )));
    };
    if p.parse_keyword(Keyword::WITH) {
        with_options = parse_with_options(p)?;
    }
    if with_options.is_empty() {
        return Err(WeirError::syntax(
            "CREATE SINK needs WITH (connector = 'kafka', ...)",
        ));
    }
    let format = parse_format(p)?;
    Ok(CreateSink {
        name,
        if_not_exists,
        from,
        query,
        with_options,
        format,
    })
}

/// The hints of the last table in a query's FROM (where a trailing `WITH (...)` lands).
fn last_table_hints(q: &mut ast::Query) -> Option<&mut Vec<ast::Expr>> {
    let ast::SetExpr::Select(sel) = q.body.as_mut() else {
        return None;
    };
    let twj = sel.from.last_mut()?;
    let factor = match twj.joins.last_mut() {
        Some(j) => &mut j.relation,
        None => &mut twj.relation,
    };
    match factor {
        ast::TableFactor::Table { with_hints, .. } if !with_hints.is_empty() => Some(with_hints),
        _ => None,
    }
}

fn hints_to_options(hints: Vec<ast::Expr>) -> Result<Vec<(String, String)>> {
    hints
        .into_iter()
        .map(|h| {
            let ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } = h
            else {
                return Err(WeirError::syntax(format!(
                    "expected key = value, found {h}"
                )));
            };
            let key = match *left {
                ast::Expr::Identifier(i) => normalize_ident(&i),
                ast::Expr::CompoundIdentifier(parts) => parts
                    .iter()
                    .map(normalize_ident)
                    .collect::<Vec<_>>()
                    .join("."),
                other => {
                    return Err(WeirError::syntax(format!(
                        "expected an option name, found {other}"
                    )));
                }
            };
            let value = match *right {
                ast::Expr::Value(v) => match v.value {
                    ast::Value::SingleQuotedString(s) => s,
                    ast::Value::Number(n, _) => n,
                    other => other.to_string(),
                },
                ast::Expr::Identifier(i) => i.value,
                other => {
                    return Err(WeirError::syntax(format!(
                        "expected a value, found {other}"
                    )));
                }
            };
            Ok((key, value))
        })
        .collect()
}

/// What the parenthesized list of a CREATE TABLE / SOURCE declares.
struct TableElements {
    columns: Vec<ColumnSpec>,
    primary_key: Option<Vec<String>>,
    primary_key_name: Option<String>,
    watermark: Option<WatermarkSpec>,
    checks: Vec<CheckSpec>,
    uniques: Vec<UniqueSpec>,
    foreign_keys: Vec<ForeignKeySpec>,
}

/// A `FOREIGN KEY (cols) REFERENCES t [(cols)] [MATCH FULL|SIMPLE] [ON DELETE a] [ON
/// UPDATE a]` constraint (or a column's `REFERENCES t [(col)]`) as written: `ref_columns`
/// empty means the referenced table's primary key.
#[derive(Debug, Clone)]
pub struct ForeignKeySpec {
    pub name: Option<String>,
    pub columns: Vec<String>,
    pub ref_table: String,
    pub ref_columns: Vec<String>,
    pub on_delete: crate::catalog::FkAction,
    pub on_update: crate::catalog::FkAction,
    pub match_full: bool,
    pub deferrable: bool,
    pub initially_deferred: bool,
}

impl ForeignKeySpec {
    /// Read sqlparser's constraint; `column`: the column it was written on, for a column's
    /// `REFERENCES`. Refused (0A000) where Postgres would do what Weir does not: SET DEFAULT,
    /// MATCH PARTIAL.
    pub fn from_ast(
        fk: &ast::ForeignKeyConstraint,
        name: Option<&ast::Ident>,
        column: Option<&str>,
    ) -> Result<ForeignKeySpec> {
        use crate::catalog::FkAction;
        let action = |a: &Option<ast::ReferentialAction>, on: &str| match a {
            None | Some(ast::ReferentialAction::NoAction) => Ok(FkAction::NoAction),
            Some(ast::ReferentialAction::Restrict) => Ok(FkAction::Restrict),
            Some(ast::ReferentialAction::Cascade) => Ok(FkAction::Cascade),
            Some(ast::ReferentialAction::SetNull) => Ok(FkAction::SetNull),
            Some(ast::ReferentialAction::SetDefault) => Err(WeirError::not_supported(format!(
                "ON {on} SET DEFAULT is not supported (NO ACTION, RESTRICT, CASCADE and SET NULL are)"
            ))),
        };
        let match_full = match &fk.match_kind {
            None | Some(ast::ConstraintReferenceMatchKind::Simple) => false,
            Some(ast::ConstraintReferenceMatchKind::Full) => true,
            Some(ast::ConstraintReferenceMatchKind::Partial) => {
                return Err(WeirError::not_supported(
                    "MATCH PARTIAL not yet implemented",
                ));
            }
        };
        // INITIALLY DEFERRED implies DEFERRABLE, as in Postgres
        let c = fk.characteristics.as_ref();
        let initially_deferred =
            c.and_then(|c| c.initially) == Some(ast::DeferrableInitial::Deferred);
        let deferrable = match c.and_then(|c| c.deferrable) {
            Some(false) if initially_deferred => {
                return Err(WeirError::syntax(
                    "constraint declared INITIALLY DEFERRED must be DEFERRABLE",
                ));
            }
            Some(d) => d,
            None => initially_deferred,
        };
        if c.and_then(|c| c.enforced) == Some(false) {
            return Err(WeirError::not_supported(
                "NOT ENFORCED foreign keys are not supported",
            ));
        }
        let columns = match column {
            Some(c) if fk.columns.is_empty() => vec![c.to_owned()],
            _ => fk.columns.iter().map(normalize_ident).collect(),
        };
        Ok(ForeignKeySpec {
            name: name.or(fk.name.as_ref()).map(normalize_ident),
            columns,
            ref_table: relation_name(&fk.foreign_table)?,
            ref_columns: fk.referred_columns.iter().map(normalize_ident).collect(),
            on_delete: action(&fk.on_delete, "DELETE")?,
            on_update: action(&fk.on_update, "UPDATE")?,
            match_full,
            deferrable,
            initially_deferred,
        })
    }
}

/// A `UNIQUE (cols)` constraint of a table: its columns and its name (given, or Postgres'
/// `t_a_b_key`), kept by a unique index of that name.
#[derive(Debug, Clone)]
pub struct UniqueSpec {
    pub name: Option<String>,
    pub columns: Vec<String>,
    /// `UNIQUE NULLS NOT DISTINCT`.
    pub nulls_not_distinct: bool,
}

/// A `CHECK (expr)` constraint of a table: its name (given, or Postgres' `t_col_check` /
/// `t_check`, numbered when taken) and its expression's text.
#[derive(Debug, Clone)]
pub struct CheckSpec {
    pub name: String,
    pub expr: String,
}

/// `base`, or `base1`, `base2`, ... the first that `taken` does not hold: how Postgres
/// names constraints and indexes it names itself.
pub fn free_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = base.to_owned();
    let mut k = 0;
    while taken(&name) {
        k += 1;
        name = format!("{base}{k}");
    }
    name
}

/// The columns of a PRIMARY KEY or UNIQUE constraint (`what`), plain column names only.
pub fn constraint_columns(cols: &[ast::IndexColumn], what: &str) -> Result<Vec<String>> {
    cols.iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(id) => Ok(normalize_ident(id)),
            other => Err(WeirError::not_supported(format!(
                "{what} on expression {other} is not supported"
            ))),
        })
        .collect()
}

/// A CHECK constraint's name: the given one, else Postgres' (`base`, then `base1`, ...).
fn check_name(given: Option<&ast::Ident>, base: String, taken: &[CheckSpec]) -> String {
    match given {
        Some(n) => normalize_ident(n),
        None => free_name(&base, |n| taken.iter().any(|c| c.name == n)),
    }
}

/// The parenthesized list of a CREATE TABLE / SOURCE after `(`: columns, constraints and a
/// WATERMARK, through the closing `)`.
fn parse_table_elements(p: &mut Parser, name: &str) -> Result<TableElements> {
    let mut columns = Vec::new();
    let mut primary_key: Option<Vec<String>> = None;
    let mut primary_key_name = None;
    let mut watermark = None;
    let mut checks: Vec<CheckSpec> = Vec::new();
    let mut uniques: Vec<UniqueSpec> = Vec::new();
    let mut foreign_keys: Vec<ForeignKeySpec> = Vec::new();
    loop {
        if parse_word(p, "WATERMARK") {
            p.expect_keyword_is(Keyword::FOR)?;
            let column = normalize_ident(&p.parse_identifier()?);
            p.expect_keyword_is(Keyword::AS)?;
            let expr = p.parse_expr()?;
            if watermark.is_some() {
                return Err(WeirError::syntax("a table can declare only one WATERMARK"));
            }
            watermark = Some(WatermarkSpec { column, expr });
        } else if let Some(constraint) = p.parse_optional_table_constraint()? {
            match constraint {
                TableConstraint::PrimaryKey(pk) => {
                    if primary_key.is_some() {
                        return Err(multiple_pk(name));
                    }
                    primary_key = Some(constraint_columns(&pk.columns, "PRIMARY KEY")?);
                    primary_key_name = pk.name.as_ref().map(normalize_ident);
                }
                TableConstraint::Unique(u)
                    if u.index_type.is_none() && u.index_options.is_empty() =>
                {
                    uniques.push(UniqueSpec {
                        name: u.name.as_ref().map(normalize_ident),
                        columns: constraint_columns(&u.columns, "UNIQUE")?,
                        nulls_not_distinct: u.nulls_distinct
                            == ast::NullsDistinctOption::NotDistinct,
                    });
                }
                TableConstraint::Check(c) if c.enforced != Some(false) => {
                    // Postgres names a check of one column after it, others after the table
                    let mut cols: Vec<String> = Vec::new();
                    let _ = ast::visit_expressions(&c.expr, |x: &ast::Expr| {
                        if let ast::Expr::Identifier(id) = x {
                            let n = normalize_ident(id);
                            if !cols.contains(&n) {
                                cols.push(n);
                            }
                        }
                        std::ops::ControlFlow::<()>::Continue(())
                    });
                    let base = match cols.as_slice() {
                        [one] => format!("{}_{one}_check", bare_relation_name(name)),
                        _ => format!("{}_check", bare_relation_name(name)),
                    };
                    let name = check_name(c.name.as_ref(), base, &checks);
                    checks.push(CheckSpec {
                        name,
                        expr: c.expr.to_string(),
                    });
                }
                TableConstraint::ForeignKey(fk) => {
                    foreign_keys.push(ForeignKeySpec::from_ast(&fk, None, None)?);
                }
                other => {
                    return Err(WeirError::not_supported(format!(
                        "table constraint {other} is not supported (only PRIMARY KEY, UNIQUE, CHECK and FOREIGN KEY)"
                    )));
                }
            }
        } else {
            let def = column_def(p)?;
            let col_name = normalize_ident(&def.name);
            let serial = match &def.data_type {
                ast::DataType::Custom(n, a) if a.is_empty() => {
                    match n.to_string().to_lowercase().as_str() {
                        "smallserial" | "serial2" => Some(SqlType::Int2),
                        "serial" | "serial4" => Some(SqlType::Int4),
                        "bigserial" | "serial8" => Some(SqlType::Int8),
                        _ => None,
                    }
                }
                _ => None,
            };
            let ty = match (&serial, &def.data_type) {
                (Some(t), _) => t.clone(),
                // a type of the catalog's (an enum): the engine looks it up
                (None, ast::DataType::Custom(n, args))
                    if args.is_empty() && SqlType::from_ast(&def.data_type).is_err() =>
                {
                    SqlType::Enum(crate::sql::types::EnumType::unresolved(
                        crate::catalog::user_types::user_type_name(n),
                    ))
                }
                // an array of one: refused by the engine, with the reason
                (
                    None,
                    ast::DataType::Array(
                        ast::ArrayElemTypeDef::SquareBracket(inner, _)
                        | ast::ArrayElemTypeDef::AngleBracket(inner),
                    ),
                ) if matches!(inner.as_ref(), ast::DataType::Custom(_, a) if a.is_empty())
                    && SqlType::from_ast(&def.data_type).is_err() =>
                {
                    let ast::DataType::Custom(n, _) = inner.as_ref() else {
                        return Err(WeirError::internal("an array of a custom type"));
                    };
                    SqlType::Array(Box::new(SqlType::Enum(
                        crate::sql::types::EnumType::unresolved(
                            crate::catalog::user_types::user_type_name(n),
                        ),
                    )))
                }
                (None, _) => SqlType::from_ast(&def.data_type)?,
            };
            let mut not_null = serial.is_some();
            let mut default = None;
            let mut generated = None;
            let mut identity = serial.map(|_| Identity {
                always: false,
                serial: true,
                options: SeqOptions::default(),
            });
            for opt in &def.options {
                match &opt.option {
                    ColumnOption::NotNull => not_null = true,
                    ColumnOption::Generated {
                        generated_as: g @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                        sequence_options,
                        generation_expr: None,
                        ..
                    } => {
                        if !matches!(ty, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) {
                            return Err(WeirError::new(
                                crate::error::sqlstate::DATATYPE_MISMATCH,
                                "identity column type must be smallint, integer, or bigint",
                            ));
                        }
                        identity = Some(Identity {
                            always: matches!(g, ast::GeneratedAs::Always),
                            serial: false,
                            options: self::sequence_options(
                                sequence_options.as_deref().unwrap_or(&[]),
                            )?,
                        });
                        not_null = true;
                    }
                    ColumnOption::Generated {
                        generated_as,
                        generation_expr: Some(e),
                        generation_expr_mode,
                        generated_keyword,
                        ..
                    } => {
                        // (sqlparser reads `GENERATED ALWAYS AS (e) STORED` as ExpStored,
                        // and MySQL's `AS (e)` too, without the keyword)
                        if !generated_keyword
                            || !matches!(generated_as, ast::GeneratedAs::ExpStored)
                            || !matches!(
                                generation_expr_mode,
                                Some(ast::GeneratedExpressionMode::Stored)
                            )
                        {
                            // Postgres 15 knows only GENERATED ALWAYS AS (...) STORED
                            return Err(WeirError::syntax(format!(
                                "generated column \"{col_name}\" must be written GENERATED ALWAYS AS (...) STORED"
                            )));
                        }
                        if generated.is_some() {
                            return Err(WeirError::syntax(format!(
                                "multiple generation clauses specified for column \"{col_name}\" of table \"{name}\""
                            )));
                        }
                        generated = Some(e.to_string());
                    }
                    ColumnOption::Default(e) => {
                        let mut refs = false;
                        let _ = ast::visit_expressions(e, |x: &ast::Expr| {
                            refs |= matches!(
                                x,
                                ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
                            );
                            std::ops::ControlFlow::<()>::Continue(())
                        });
                        if refs {
                            return Err(WeirError::new(
                                crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
                                "cannot use column reference in DEFAULT expression",
                            ));
                        }
                        default = Some(e.to_string());
                    }
                    ColumnOption::Null => not_null = false,
                    ColumnOption::Unique(u)
                        if u.index_type.is_none() && u.index_options.is_empty() =>
                    {
                        uniques.push(UniqueSpec {
                            name: opt.name.as_ref().or(u.name.as_ref()).map(normalize_ident),
                            columns: vec![col_name.clone()],
                            nulls_not_distinct: u.nulls_distinct
                                == ast::NullsDistinctOption::NotDistinct,
                        });
                    }
                    ColumnOption::Check(c) if c.enforced != Some(false) => {
                        let given = opt.name.as_ref().or(c.name.as_ref());
                        let check = check_name(
                            given,
                            format!("{}_{col_name}_check", bare_relation_name(name)),
                            &checks,
                        );
                        checks.push(CheckSpec {
                            name: check,
                            expr: c.expr.to_string(),
                        });
                    }
                    ColumnOption::ForeignKey(fk) => {
                        foreign_keys.push(ForeignKeySpec::from_ast(
                            fk,
                            opt.name.as_ref(),
                            Some(&col_name),
                        )?);
                    }
                    ColumnOption::PrimaryKey(_) => {
                        if primary_key.is_some() {
                            return Err(multiple_pk(name));
                        }
                        primary_key = Some(vec![col_name.clone()]);
                        primary_key_name = opt.name.as_ref().map(normalize_ident);
                    }
                    other => {
                        return Err(WeirError::not_supported(format!(
                            "column option {other} is not supported"
                        )));
                    }
                }
            }
            if identity.is_some() && default.is_some() {
                return Err(WeirError::syntax(format!(
                    "both default and identity specified for column \"{col_name}\""
                )));
            }
            if generated.is_some() {
                let both = match (&default, &identity) {
                    (Some(_), _) => Some("default"),
                    (None, Some(_)) => Some("identity"),
                    (None, None) => None,
                };
                if let Some(what) = both {
                    return Err(WeirError::syntax(format!(
                        "both {what} and generation expression specified for column \"{col_name}\" of table \"{name}\""
                    )));
                }
            }
            columns.push(ColumnSpec {
                name: col_name,
                ty,
                not_null,
                default,
                identity,
                generated,
            });
        }
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        break;
    }
    Ok(TableElements {
        columns,
        primary_key,
        primary_key_name,
        watermark,
        checks,
        uniques,
        foreign_keys,
    })
}

/// Consume a (non-reserved, maybe unknown to sqlparser) word if it is next.
pub fn parse_word(p: &mut Parser, word: &str) -> bool {
    match &p.peek_token().token {
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word) => {
            p.next_token();
            true
        }
        _ => false,
    }
}

pub fn expect_word(p: &mut Parser, word: &str) -> Result<()> {
    if parse_word(p, word) {
        Ok(())
    } else {
        Err(WeirError::syntax(format!(
            "syntax error at or near \"{}\": expected {word}",
            p.peek_token().token
        )))
    }
}

fn parse_create_view(p: &mut Parser) -> Result<CreateView> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = created_relation_name(&p.parse_object_name(false)?)?;
    let options = if p.parse_keyword(Keyword::WITH) {
        parse_with_options(p)?
    } else {
        Vec::new()
    };
    p.expect_keyword_is(Keyword::AS)?;
    let query = p.parse_query()?;
    // `WITH [NO] DATA` (pg_dump writes WITH NO DATA, then REFRESH after the data): a
    // view here is maintained from its creation, so it is populated either way
    if p.parse_keyword(Keyword::WITH) {
        let _ = p.parse_keyword(Keyword::NO);
        expect_word(p, "DATA")?;
    }
    // `EMIT ON WINDOW CLOSE` was turned into the statement's end by `preprocess`
    Ok(CreateView {
        name,
        if_not_exists,
        options,
        query,
        emit_on_window_close: false,
    })
}

fn multiple_pk(table: &str) -> WeirError {
    WeirError::new(
        crate::error::sqlstate::INVALID_TABLE_DEFINITION,
        format!("multiple primary keys for table \"{table}\" are not allowed"),
    )
}

/// `(key = 'value', a.b.c = value, ...)`: keys may be dotted; values are literals or words.
pub fn parse_with_options(p: &mut Parser) -> Result<Vec<(String, String)>> {
    p.expect_token(&Token::LParen)?;
    let mut out = Vec::new();
    if p.consume_token(&Token::RParen) {
        return Ok(out);
    }
    loop {
        let mut key = normalize_ident(&p.parse_identifier()?);
        while p.consume_token(&Token::Period) {
            key.push('.');
            key.push_str(&normalize_ident(&p.parse_identifier()?));
        }
        p.expect_token(&Token::Eq)?;
        let t = p.next_token();
        let value = match t.token {
            Token::SingleQuotedString(s) => s,
            Token::Number(n, _) => n,
            // `key = SECRET name`: the option names a secret, resolved when the
            // connector is built; the catalog keeps the name only
            Token::Word(w)
                if w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("secret")
                    && matches!(p.peek_token().token, Token::Word(_)) =>
            {
                let name = normalize_ident(&p.parse_identifier()?);
                crate::catalog::secrets::secret_ref(&name)
            }
            Token::Word(w) => w.value,
            _ => return Err(syntax_near(&t)),
        };
        out.push((key, value));
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        return Ok(out);
    }
}

fn parse_drop(p: &mut Parser) -> Result<Statement> {
    p.next_token(); // DROP
    let kind = if p.parse_keyword(Keyword::TABLE) {
        DropKind::Table
    } else if p.parse_keyword(Keyword::SOURCE) {
        DropKind::Source
    } else if p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
        DropKind::MaterializedView
    } else if p.parse_keyword(Keyword::VIEW) {
        DropKind::View
    } else if p.parse_keyword(Keyword::SEQUENCE) {
        DropKind::Sequence
    } else if p.parse_keyword(Keyword::INDEX) {
        let _ = p.parse_keyword(Keyword::CONCURRENTLY);
        DropKind::Index
    } else if p.parse_keyword(Keyword::TYPE) {
        DropKind::Type
    } else if parse_word(p, "SINK") {
        DropKind::Sink
    } else if p.parse_keyword(Keyword::DOMAIN) {
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let names = p
            .parse_comma_separated(|p| p.parse_object_name(false))?
            .iter()
            .map(crate::catalog::user_types::user_type_name)
            .collect();
        let cascade = p.parse_keyword(Keyword::CASCADE);
        if !cascade {
            let _ = p.parse_keyword(Keyword::RESTRICT);
        }
        return Ok(Statement::DropDomain {
            names,
            if_exists,
            cascade,
        });
    } else if p.parse_keyword(Keyword::SCHEMA) {
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let names = p
            .parse_comma_separated(|p| p.parse_identifier())?
            .iter()
            .map(normalize_ident)
            .collect();
        let cascade = p.parse_keyword(Keyword::CASCADE);
        if !cascade {
            let _ = p.parse_keyword(Keyword::RESTRICT);
        }
        return Ok(Statement::DropSchema {
            names,
            if_exists,
            cascade,
        });
    } else if let Some(s) = crate::sql::security::parse_drop(p)? {
        return Ok(Statement::Security(Box::new(s)));
    } else {
        // let sqlparser produce its error or a statement we refuse by name
        p.prev_token();
        return classify(p.parse_statement()?);
    };
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = p
        .parse_comma_separated(|p| p.parse_object_name(false))?
        .iter()
        .map(relation_name)
        .collect::<Result<Vec<_>>>()?;
    let cascade = if p.parse_keyword(Keyword::CASCADE) {
        true
    } else {
        let _ = p.parse_keyword(Keyword::RESTRICT);
        false
    };
    Ok(Statement::Drop(DropStmt {
        kind,
        names,
        if_exists,
        cascade,
    }))
}

/// The name a created type takes: an unqualified one in the first schema of the path.
fn created_type_name(name: &ObjectName) -> Result<String> {
    Ok(match name.0.as_slice() {
        [part] => {
            let n = part.as_ident().map(normalize_ident).unwrap_or_default();
            crate::sql::search_path::created(&n)?.unwrap_or(n)
        }
        _ => crate::catalog::user_types::user_type_name(name),
    })
}

/// `CHECK (expr) [NOT VALID]` after CHECK: the expression's text and NOT VALID.
fn parse_domain_check(p: &mut Parser) -> Result<(String, bool)> {
    p.expect_token(&Token::LParen)?;
    let mut e = p.parse_expr()?;
    p.expect_token(&Token::RParen)?;
    let not_valid = p.parse_keywords(&[Keyword::NOT, Keyword::VALID]);
    // `value` written as Postgres shows it: VALUE
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let ast::Expr::Identifier(id) = x
            && id.quote_style.is_none()
            && id.value.eq_ignore_ascii_case("value")
        {
            *id = Ident::new("VALUE");
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Ok((e.to_string(), not_valid))
}

/// `CREATE DOMAIN name [AS] type ...` (after `CREATE DOMAIN`): its clauses in any order, as
/// Postgres takes them (pg_dump writes `NOT NULL` before `DEFAULT`).
fn parse_create_domain(p: &mut Parser) -> Result<CreateDomain> {
    let name = created_type_name(&p.parse_object_name(false)?)?;
    let _ = p.parse_keyword(Keyword::AS);
    let base = p.parse_data_type()?;
    let mut d = CreateDomain {
        name,
        base,
        not_null: false,
        default: None,
        checks: vec![],
    };
    loop {
        if p.parse_keyword(Keyword::COLLATE) {
            p.parse_object_name(false)?;
            continue;
        }
        if p.parse_keyword(Keyword::DEFAULT) {
            if d.default.is_some() {
                return Err(WeirError::syntax("multiple default expressions"));
            }
            d.default = Some(p.parse_expr()?.to_string());
            continue;
        }
        let constraint = if p.parse_keyword(Keyword::CONSTRAINT) {
            Some(normalize_ident(&p.parse_identifier()?))
        } else {
            None
        };
        if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
            d.not_null = true;
        } else if p.parse_keyword(Keyword::NULL) {
            d.not_null = false;
        } else if p.parse_keyword(Keyword::CHECK) {
            let (e, not_valid) = parse_domain_check(p)?;
            if not_valid {
                return Err(WeirError::new(
                    crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
                    "check constraints for domains cannot be marked NOT VALID",
                ));
            }
            d.checks.push((constraint, e, false));
        } else if constraint.is_some() {
            return Err(syntax_near(&p.peek_token()));
        } else {
            break;
        }
    }
    Ok(d)
}

/// `ALTER DOMAIN name ...` (after `ALTER DOMAIN`).
fn parse_alter_domain(p: &mut Parser) -> Result<Statement> {
    let name = crate::catalog::user_types::user_type_name(&p.parse_object_name(false)?);
    let ident = |p: &mut Parser| -> Result<String> { Ok(normalize_ident(&p.parse_identifier()?)) };
    let op = if p.parse_keywords(&[Keyword::SET, Keyword::SCHEMA]) {
        AlterDomainOp::SetSchema(ident(p)?)
    } else if p.parse_keywords(&[Keyword::SET, Keyword::DEFAULT]) {
        AlterDomainOp::Default(Some(p.parse_expr()?.to_string()))
    } else if p.parse_keywords(&[Keyword::DROP, Keyword::DEFAULT]) {
        AlterDomainOp::Default(None)
    } else if p.parse_keywords(&[Keyword::SET, Keyword::NOT, Keyword::NULL]) {
        AlterDomainOp::NotNull(true)
    } else if p.parse_keywords(&[Keyword::DROP, Keyword::NOT, Keyword::NULL]) {
        AlterDomainOp::NotNull(false)
    } else if p.parse_keyword(Keyword::ADD) {
        let name = if p.parse_keyword(Keyword::CONSTRAINT) {
            Some(ident(p)?)
        } else {
            None
        };
        if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
            AlterDomainOp::NotNull(true)
        } else {
            p.expect_keyword_is(Keyword::CHECK)?;
            let (expr, not_valid) = parse_domain_check(p)?;
            AlterDomainOp::AddCheck {
                name,
                expr,
                not_valid,
            }
        }
    } else if p.parse_keywords(&[Keyword::DROP, Keyword::CONSTRAINT]) {
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = ident(p)?;
        if !p.parse_keyword(Keyword::CASCADE) {
            let _ = p.parse_keyword(Keyword::RESTRICT);
        }
        AlterDomainOp::DropConstraint { name, if_exists }
    } else if p.parse_keywords(&[Keyword::RENAME, Keyword::CONSTRAINT]) {
        let from = ident(p)?;
        p.expect_keyword_is(Keyword::TO)?;
        AlterDomainOp::RenameConstraint {
            from,
            to: ident(p)?,
        }
    } else if p.parse_keywords(&[Keyword::VALIDATE, Keyword::CONSTRAINT]) {
        AlterDomainOp::ValidateConstraint(ident(p)?)
    } else if p.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
        AlterDomainOp::Rename(ident(p)?)
    } else if p.parse_keywords(&[Keyword::OWNER, Keyword::TO]) {
        AlterDomainOp::Owner(ident(p)?)
    } else {
        return Err(WeirError::not_supported(
            "ALTER DOMAIN supports SET/DROP DEFAULT, SET/DROP NOT NULL, ADD/DROP/RENAME/VALIDATE CONSTRAINT, RENAME TO, OWNER TO and SET SCHEMA",
        ));
    };
    Ok(Statement::AlterDomain { name, op })
}

/// `ALTER TYPE name { ADD VALUE ... | RENAME VALUE 'a' TO 'b' | RENAME TO n | OWNER TO r }`
/// (after `ALTER TYPE`).
fn parse_alter_type(p: &mut Parser) -> Result<Statement> {
    let name = crate::catalog::user_types::user_type_name(&p.parse_object_name(false)?);
    let label = |p: &mut Parser| -> Result<String> { Ok(p.parse_literal_string()?) };
    let op = if p.parse_keyword(Keyword::ADD) {
        expect_word(p, "VALUE")?;
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let l = label(p)?;
        let position = if p.parse_keyword(Keyword::BEFORE) {
            crate::catalog::user_types::LabelPosition::Before(label(p)?)
        } else if p.parse_keyword(Keyword::AFTER) {
            crate::catalog::user_types::LabelPosition::After(label(p)?)
        } else {
            crate::catalog::user_types::LabelPosition::Last
        };
        AlterTypeOp::AddValue {
            label: l,
            if_not_exists,
            position,
        }
    } else if p.parse_keyword(Keyword::RENAME) {
        if parse_word(p, "VALUE") {
            let from = label(p)?;
            p.expect_keyword_is(Keyword::TO)?;
            AlterTypeOp::RenameValue {
                from,
                to: label(p)?,
            }
        } else {
            p.expect_keyword_is(Keyword::TO)?;
            AlterTypeOp::Rename(normalize_ident(&p.parse_identifier()?))
        }
    } else if p.parse_keyword(Keyword::OWNER) {
        p.expect_keyword_is(Keyword::TO)?;
        AlterTypeOp::Owner(normalize_ident(&p.parse_identifier()?))
    } else if p.parse_keywords(&[Keyword::SET, Keyword::SCHEMA]) {
        AlterTypeOp::SetSchema(normalize_ident(&p.parse_identifier()?))
    } else {
        return Err(WeirError::not_supported(
            "ALTER TYPE supports ADD VALUE, RENAME VALUE, RENAME TO, OWNER TO and SET SCHEMA",
        ));
    };
    Ok(Statement::AlterType { name, op })
}

fn parse_show(p: &mut Parser) -> Result<Statement> {
    let words = rest_words(p)?;
    let joined = words.join(" ");
    match joined.as_str() {
        "tables" => Ok(Statement::ShowRelations(RelationKindFilter::Tables)),
        "sources" => Ok(Statement::ShowRelations(RelationKindFilter::Sources)),
        "sinks" => Ok(Statement::ShowRelations(RelationKindFilter::Sinks)),
        "materialized views" => Ok(Statement::ShowRelations(
            RelationKindFilter::MaterializedViews,
        )),
        "" => Err(WeirError::syntax("syntax error at end of input")),
        _ => Ok(Statement::ShowVariable(joined)),
    }
}

fn parse_set(p: &mut Parser) -> Result<Statement> {
    // SET [SESSION | LOCAL] ...
    let local = !p.parse_keyword(Keyword::SESSION) && p.parse_keyword(Keyword::LOCAL);
    if let Some(s) = crate::sql::security::parse_set(p)? {
        return Ok(Statement::Security(Box::new(s)));
    }
    if p.parse_keywords(&[Keyword::TIME, Keyword::ZONE]) {
        let value = rest_value(p)?;
        return Ok(Statement::SetVariable {
            name: "timezone".into(),
            value,
            local,
        });
    }
    if p.parse_keywords(&[Keyword::CHARACTERISTICS, Keyword::AS, Keyword::TRANSACTION]) {
        let words = rest_words(p)?;
        return Ok(Statement::SetTransaction {
            session_default: true,
            modes: tx_modes(&words)?,
        });
    }
    if p.parse_keyword(Keyword::TRANSACTION) {
        let words = rest_words(p)?;
        if words.first().map(String::as_str) == Some("snapshot") {
            return Err(WeirError::not_supported(
                "SET TRANSACTION SNAPSHOT is not supported",
            ));
        }
        return Ok(Statement::SetTransaction {
            session_default: false,
            modes: tx_modes(&words)?,
        });
    }
    let mut name = normalize_ident(&p.parse_identifier()?);
    while p.consume_token(&Token::Period) {
        name.push('.');
        name.push_str(&normalize_ident(&p.parse_identifier()?));
    }
    if !p.consume_token(&Token::Eq) && !p.parse_keyword(Keyword::TO) {
        return Err(syntax_near(&p.peek_token()));
    }
    let value = rest_value(p)?;
    Ok(Statement::SetVariable { name, value, local })
}

/// The remaining tokens of a statement as lower-cased words (for SHOW/BEGIN/...).
/// `DO [LANGUAGE plpgsql] 'body'` (or the language after the body): the block
/// `sql::do_block` can run.
fn parse_do(p: &mut Parser) -> Result<crate::sql::do_block::DoBlock> {
    let mut body = None;
    loop {
        if matches!(p.peek_token().token, Token::SemiColon | Token::EOF) {
            break;
        }
        let t = p.next_token();
        match t.token {
            Token::SingleQuotedString(s) if body.is_none() => body = Some(s),
            Token::DollarQuotedString(d) if body.is_none() => body = Some(d.value),
            Token::Word(w)
                if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("language") =>
            {
                let lang = p.next_token();
                let ok = matches!(&lang.token, Token::Word(l) if l.value.eq_ignore_ascii_case("plpgsql"))
                    || matches!(&lang.token, Token::SingleQuotedString(l) if l.eq_ignore_ascii_case("plpgsql"));
                if !ok {
                    return Err(WeirError::new(
                        crate::error::sqlstate::UNDEFINED_OBJECT,
                        format!(
                            "language \"{}\" does not exist",
                            lang.token.to_string().trim_matches('"')
                        ),
                    ));
                }
            }
            _ => {
                return Err(WeirError::syntax(format!(
                    "syntax error at or near \"{t}\""
                )));
            }
        }
    }
    let body = body.ok_or_else(|| WeirError::syntax("DO needs a code block"))?;
    crate::sql::do_block::parse(&body)
}

fn rest_words(p: &mut Parser) -> Result<Vec<String>> {
    let mut out = Vec::new();
    loop {
        let t = p.peek_token();
        match &t.token {
            Token::SemiColon | Token::EOF => return Ok(out),
            Token::Word(w) => out.push(normalize_ident(&Ident {
                value: w.value.clone(),
                quote_style: w.quote_style,
                span: t.span,
            })),
            Token::Comma => out.push(",".into()),
            // a dotted (custom) setting name: glue the parts
            Token::Period => {
                let last = out.pop().unwrap_or_default();
                p.next_token();
                let next = p.peek_token();
                let part = match &next.token {
                    Token::Word(w) => normalize_ident(&Ident {
                        value: w.value.clone(),
                        quote_style: w.quote_style,
                        span: next.span,
                    }),
                    _ => return Err(syntax_near(&next)),
                };
                out.push(format!("{last}.{part}"));
            }
            Token::Number(n, _) => out.push(n.clone()),
            Token::SingleQuotedString(s) => out.push(s.clone()),
            Token::Mul => out.push("*".into()),
            _ => return Err(syntax_near(&t)),
        }
        p.next_token();
    }
}

/// The value of a SET: literals and words joined with ", " (as Postgres does for lists).
fn rest_value(p: &mut Parser) -> Result<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    loop {
        let t = p.peek_token();
        match &t.token {
            Token::SemiColon | Token::EOF => break,
            Token::Comma => {
                parts.push(std::mem::take(&mut current));
            }
            Token::Word(w) => {
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(&w.value);
            }
            Token::SingleQuotedString(s) => current.push_str(s),
            Token::Number(n, _) => current.push_str(n),
            Token::Minus => current.push('-'),
            Token::Plus => current.push('+'),
            _ => return Err(syntax_near(&t)),
        }
        p.next_token();
    }
    parts.push(current);
    Ok(parts.join(", "))
}

/// Maps sqlparser's (line, column) locations to byte offsets.
struct LineIndex<'a> {
    sql: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(sql: &'a str) -> Self {
        let mut line_starts = vec![0];
        for (i, b) in sql.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i + 1);
            }
        }
        LineIndex { sql, line_starts }
    }

    /// The character (from 1) at `loc`, as Postgres counts an error's position.
    fn position(&self, loc: Location) -> usize {
        let byte = self.offset(loc);
        self.sql
            .get(..byte)
            .map_or(1, |before| before.chars().count() + 1)
    }

    fn offset(&self, loc: Location) -> usize {
        if loc.line == 0 {
            return self.sql.len();
        }
        let Some(&start) = self.line_starts.get(loc.line as usize - 1) else {
            return self.sql.len();
        };
        let line = &self.sql[start..];
        let col = loc.column.saturating_sub(1) as usize;
        start
            + line
                .char_indices()
                .nth(col)
                .map(|(i, _)| i)
                .unwrap_or(line.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_with_text() {
        let v = parse("SELECT 1; select 'a;b' ;\n-- only a comment\n").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(&*v[0].text, "SELECT 1");
        assert_eq!(&*v[1].text, "select 'a;b'");
        // where each starts, in characters of the whole text (error positions count so)
        let v = parse("SELECT 'é'; SELECT 2;\n  SELECT 3").unwrap();
        let offsets: Vec<usize> = v.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [0, 12, 24]);
        assert!(parse("  -- nothing\n ; ;").unwrap().is_empty());
    }

    #[test]
    fn create_table_with_streaming_clauses() {
        let v = parse(
            "CREATE TABLE Clicks (user_id BIGINT NOT NULL, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '2 seconds') APPEND ONLY",
        )
        .unwrap();
        let Statement::CreateTable(ct) = &v[0].stmt else {
            panic!("not a create table")
        };
        assert_eq!(ct.name, "clicks");
        assert!(ct.append_only);
        assert_eq!(ct.watermark.as_ref().unwrap().column, "ts");
        assert!(ct.columns[0].not_null);
    }

    #[test]
    fn composite_primary_key() {
        let v = parse("create table t (a int, b text, primary key (a, b))").unwrap();
        let Statement::CreateTable(ct) = &v[0].stmt else {
            panic!()
        };
        assert_eq!(ct.primary_key, vec!["a", "b"]);
    }

    #[test]
    fn emit_on_window_close_and_temporal_tables() {
        let v = parse(
            "CREATE MATERIALIZED VIEW v AS SELECT count(*) FROM clicks EMIT ON WINDOW CLOSE; SELECT 1",
        )
        .unwrap();
        assert_eq!(v.len(), 2);
        let Statement::CreateView(cv) = &v[0].stmt else {
            panic!()
        };
        assert!(cv.emit_on_window_close);
        let v =
            parse("SELECT * FROM c JOIN users FOR SYSTEM_TIME AS OF PROCTIME() ON c.u = users.id")
                .unwrap();
        let Statement::Query(q) = &v[0].stmt else {
            panic!()
        };
        assert!(
            q.to_string().contains("__weir_temporal__users AS users"),
            "{q}"
        );
    }

    #[test]
    fn set_forms() {
        for (sql, name, value) in [
            ("SET extra_float_digits = 3", "extra_float_digits", "3"),
            (
                "set search_path to public, pg_catalog",
                "search_path",
                "public, pg_catalog",
            ),
            ("SET TIME ZONE 'UTC'", "timezone", "UTC"),
            (
                "SET SESSION application_name = 'x'",
                "application_name",
                "x",
            ),
        ] {
            match &parse(sql).unwrap()[0].stmt {
                Statement::SetVariable {
                    name: n, value: v, ..
                } => {
                    assert_eq!((n.as_str(), v.as_str()), (name, value), "{sql}")
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
    }
}
