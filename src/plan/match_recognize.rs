//! `MATCH_RECOGNIZE`: row pattern recognition over an ordered partition, as in the SQL
//! standard (and Flink, Snowflake, Oracle):
//!
//! ```sql
//! SELECT * FROM events MATCH_RECOGNIZE (
//!     PARTITION BY card ORDER BY ts
//!     MEASURES FIRST(a.ts) AS first_ts, LAST(b.amount) AS amount, COUNT(b.*) AS n
//!     ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
//!     PATTERN (a b+ c?) WITHIN INTERVAL '30 minutes'
//!     DEFINE a AS kind = 'charge', b AS b.amount > PREV(b.amount), c AS country <> 'NL'
//! ) AS m
//! ```
//!
//! - Rows of a partition are ordered by the one ORDER BY column (integers, dates or
//!   timestamps; ties by the whole row, so the order is deterministic); rows whose time
//!   is NULL take no part.
//! - From each start row in order, the preferred match (greedy quantifiers, the leftmost
//!   alternative first) is taken; `AFTER MATCH SKIP PAST LAST ROW` (default) resumes after
//!   it, `TO NEXT ROW` at the row after its first. A pattern that can match no rows is
//!   refused. Quantifiers `* + ? {n} {n,} {,m} {n,m}`, alternation `|`, groups and `$`.
//! - `WITHIN <interval>` (Flink's clause) bounds a match to rows with `ts < first ts +
//!   interval`; `$` matches where the partition has no further row inside that bound,
//!   which is how an absence is written: `PATTERN (o quiet* $) WITHIN INTERVAL '2 days'`
//!   with `quiet AS kind <> 'shipment'` is an order not followed by a shipment within two
//!   days.
//! - DEFINE (running semantics): a column, or `v.col` of the variable being defined, is
//!   the current row's; `w.col` / `LAST(w.col)` is the last row classified `w` so far,
//!   `FIRST(w.col)` the first; `PREV(col [, n])` the row n before the current one. A
//!   variable without DEFINE matches any row.
//! - MEASURES (ONE ROW PER MATCH, final semantics): `v.col` / `LAST(v.col)`, `FIRST(v.col)`,
//!   an unqualified column (the match's last row), `PREV(...)`, `count`, `sum`, `avg`,
//!   `min`, `max` over a variable's rows (`COUNT(v.*)`) or all of them, `MATCH_NUMBER()`,
//!   `CLASSIFIER()`. The output is the PARTITION BY columns, then the measures.
//!
//! The parser (`sql::parser`) parses it with the Postgres dialect plus this one clause and
//! moves `WITHIN` into DEFINE; [`prepare`] replaces each `MATCH_RECOGNIZE` table by a call
//! of the table function `__weir_match_recognize(id)`, whose plan is a
//! [`MatchRecognizeNode`] over the planned input. A one-shot query runs it with
//! [`MatchRecognizeExec`]; a view lowers it to the `MatchRecognize` operator
//! (`operators/match_recognize.rs`), which also has the watermark semantics.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DFSchema, DFSchemaRef, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    Expr, ExprSchemable, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use datafusion::sql::sqlparser::ast::{
    self, AfterMatchSkip, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    MatchRecognizePattern, MatchRecognizeSymbol, RepetitionQuantifier, RowsPerMatch, TableFactor,
    VisitMut, VisitorMut,
};
use parking_lot::Mutex;

use crate::error::{Result, WeirError};
use crate::operators::match_recognize::{
    ColRef, Define, Inst, MeasureRef, Recognizer, RowRef, Skip,
};
use crate::sql::parser::{WITHIN_SYMBOL, normalize_ident};

/// The table function a `MATCH_RECOGNIZE` is replaced by while its statement is planned.
pub const TABLE_FUNCTION: &str = "__weir_match_recognize";

/// Most instructions a pattern may compile to (counted quantifiers repeat their body).
const MAX_PROGRAM: usize = 10_000;

/// Plans of `MATCH_RECOGNIZE` tables of statements being planned, by id.
static PENDING: LazyLock<Mutex<HashMap<u64, LogicalPlan>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Removes a statement's pending plans once it is planned (or failed).
pub struct Pending(Vec<u64>);

impl Drop for Pending {
    fn drop(&mut self) {
        let mut p = PENDING.lock();
        for id in &self.0 {
            p.remove(id);
        }
    }
}

fn unsupported(what: impl fmt::Display) -> WeirError {
    WeirError::not_supported(format!("MATCH_RECOGNIZE: {what} is not supported"))
}

fn invalid(what: impl Into<String>) -> WeirError {
    WeirError::new(
        crate::error::sqlstate::SYNTAX_ERROR,
        format!("MATCH_RECOGNIZE: {}", what.into()),
    )
}

/// How a statement's planning plans the input of a `MATCH_RECOGNIZE` (a query AST to a
/// logical plan, with the same rewrites as the statement).
pub type PlanInput<'a> =
    &'a (dyn Fn(ast::Statement) -> futures::future::BoxFuture<'a, Result<LogicalPlan>> + Sync);

/// Replace every `MATCH_RECOGNIZE` table of `stmt` by `__weir_match_recognize(id)`, with
/// its node planned (inputs through `plan_input`). Keep the returned guard until the
/// statement is planned.
pub async fn prepare(
    stmt: &mut ast::Statement,
    state: &SessionState,
    plan_input: PlanInput<'_>,
) -> Result<Pending> {
    struct Collect(Vec<(u64, TableFactor)>);
    impl VisitorMut for Collect {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::MatchRecognize { alias, .. } = t {
                let id = NEXT_ID.fetch_add(1, AtomicOrdering::Relaxed);
                let alias = alias.take().or_else(|| {
                    Some(ast::TableAlias {
                        explicit: true,
                        at: None,
                        name: Ident::new("match_recognize"),
                        columns: vec![],
                    })
                });
                let call = TableFactor::Table {
                    name: ast::ObjectName::from(vec![Ident::new(TABLE_FUNCTION)]),
                    alias,
                    args: Some(ast::TableFunctionArgs {
                        args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(
                            ast::Expr::value(ast::Value::Number(id.to_string(), false)),
                        ))],
                        settings: None,
                    }),
                    with_hints: vec![],
                    version: None,
                    with_ordinality: false,
                    partitions: vec![],
                    json_path: None,
                    sample: None,
                    index_hints: vec![],
                };
                self.0.push((id, std::mem::replace(t, call)));
            }
            ControlFlow::Continue(())
        }
    }
    // the statement's common table expressions, as written (an input may name one)
    let ctes: Vec<ast::Cte> = match stmt {
        ast::Statement::Query(q) => q.with.as_ref().map(|w| w.cte_tables.clone()),
        _ => None,
    }
    .unwrap_or_default();
    let mut c = Collect(Vec::new());
    let _ = stmt.visit(&mut c);
    let guard = Pending(c.0.iter().map(|(id, _)| *id).collect());
    for (id, factor) in c.0 {
        let node = build(factor, &ctes, state, plan_input).await?;
        PENDING.lock().insert(
            id,
            LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            }),
        );
    }
    Ok(guard)
}

/// `__weir_match_recognize(id)`: the pending plan `id`, inlined by DataFusion's planner.
#[derive(Debug)]
pub struct MatchRecognizeFunction;

impl TableFunctionImpl for MatchRecognizeFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::common::Result<Arc<dyn TableProvider>> {
        let id = match args.exprs() {
            [Expr::Literal(v, _)] => v.to_string().parse::<u64>().ok(),
            _ => None,
        };
        let plan = id
            .and_then(|id| PENDING.lock().get(&id).cloned())
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Plan(format!(
                    "{TABLE_FUNCTION} is used by MATCH_RECOGNIZE only"
                ))
            })?;
        Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
            plan, None,
        )))
    }
}

/// A `MATCH_RECOGNIZE` over its planned input.
#[derive(Debug, Clone)]
pub struct MatchRecognizeNode {
    pub input: LogicalPlan,
    pub schema: DFSchemaRef,
    pub spec: Arc<Spec>,
}

/// Column references of a measure or DEFINE, as planned.
#[derive(Debug, Clone)]
pub enum LRef {
    Col(ColRef),
    /// An aggregate over the input columns, over the rows of a variable (None: all).
    Agg(Option<u16>, Expr),
    MatchNumber,
    Classifier,
}

/// The planned clauses; expressions are DataFusion's, over the input's columns followed by
/// one column `__r<i>` per reference.
#[derive(Debug)]
pub struct Spec {
    pub partition_by: Vec<Expr>,
    pub time: Expr,
    pub within_us: Option<i64>,
    pub vars: Vec<String>,
    pub program: Vec<Inst>,
    pub defines: Vec<Option<(Expr, Vec<ColRef>, DFSchemaRef)>>,
    pub refs: Vec<LRef>,
    pub refs_schema: DFSchemaRef,
    pub measures: Vec<Expr>,
    pub skip: Skip,
    pub max_back: usize,
    pub text: String,
}

impl PartialEq for MatchRecognizeNode {
    fn eq(&self, other: &Self) -> bool {
        self.spec.text == other.spec.text && self.input == other.input
    }
}
impl Eq for MatchRecognizeNode {}
impl Hash for MatchRecognizeNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.spec.text.hash(state);
        self.input.hash(state);
    }
}
impl PartialOrd for MatchRecognizeNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.spec.text.partial_cmp(&other.spec.text)? {
            Ordering::Equal => self.input.partial_cmp(&other.input),
            o => Some(o),
        }
    }
}

impl UserDefinedLogicalNodeCore for MatchRecognizeNode {
    fn name(&self) -> &str {
        "MatchRecognize"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MatchRecognize: {}", self.spec.text)
    }
    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> datafusion::common::Result<Self> {
        let input = inputs.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("MatchRecognize without input".into())
        })?;
        if input.schema().fields() != self.input.schema().fields() {
            return Err(datafusion::error::DataFusionError::Internal(
                "MatchRecognize's input changed its columns".into(),
            ));
        }
        Ok(MatchRecognizeNode {
            input,
            schema: self.schema.clone(),
            spec: self.spec.clone(),
        })
    }
}

/// The input's columns without qualifiers (what DEFINE and MEASURES name).
fn unqualified(input: &DFSchema) -> Result<DFSchema> {
    Ok(DFSchema::try_from(Schema::new(
        input
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))?)
}

fn plan_expr(state: &SessionState, e: ast::Expr, schema: &DFSchema) -> Result<Expr> {
    let e = state.create_logical_expr_from_sql_expr(
        ast::ExprWithAlias {
            expr: e,
            alias: None,
        },
        schema,
    )?;
    crate::catalog::table_exprs::coerced_and_simplified(e, schema)
}

async fn build(
    factor: TableFactor,
    ctes: &[ast::Cte],
    state: &SessionState,
    plan_input: PlanInput<'_>,
) -> Result<MatchRecognizeNode> {
    let TableFactor::MatchRecognize {
        table,
        partition_by,
        order_by,
        measures,
        rows_per_match,
        after_match_skip,
        pattern,
        symbols,
        alias: _,
    } = factor
    else {
        return Err(WeirError::internal("not a MATCH_RECOGNIZE"));
    };
    let text = format!(
        "PARTITION BY {} ORDER BY {} PATTERN ({pattern}){}",
        partition_by
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        order_by
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        symbols
            .iter()
            .find(|s| s.symbol.value == WITHIN_SYMBOL)
            .map(|s| format!(" WITHIN {}", s.definition))
            .unwrap_or_default(),
    );
    if let Some(RowsPerMatch::AllRows(_)) = rows_per_match {
        return Err(unsupported("ALL ROWS PER MATCH (use ONE ROW PER MATCH)"));
    }
    // the input, planned on its own
    // an input that names a CTE of the statement is planned with it
    let with = match table.as_ref() {
        TableFactor::Table {
            name, args: None, ..
        } => ctes
            .iter()
            .find(|c| {
                name.0.len() == 1
                    && name.0[0]
                        .as_ident()
                        .is_some_and(|i| normalize_ident(i) == normalize_ident(&c.alias.name))
            })
            .map(|c| ast::With {
                with_token: ast::helpers::attached_token::AttachedToken::empty(),
                recursive: false,
                cte_tables: vec![c.clone()],
            }),
        _ => None,
    };
    let query = ast::Query {
        with,
        body: Box::new(ast::SetExpr::Select(Box::new(ast::Select {
            select_token: ast::helpers::attached_token::AttachedToken::empty(),
            optimizer_hints: vec![],
            distinct: None,
            select_modifiers: None,
            top: None,
            top_before_distinct: false,
            projection: vec![ast::SelectItem::Wildcard(
                ast::WildcardAdditionalOptions::default(),
            )],
            exclude: None,
            into: None,
            from: vec![ast::TableWithJoins {
                relation: *table,
                joins: vec![],
            }],
            lateral_views: vec![],
            prewhere: None,
            selection: None,
            group_by: ast::GroupByExpr::Expressions(vec![], vec![]),
            cluster_by: vec![],
            distribute_by: vec![],
            sort_by: vec![],
            having: None,
            named_window: vec![],
            qualify: None,
            window_before_qualify: false,
            value_table_mode: None,
            connect_by: vec![],
            flavor: ast::SelectFlavor::Standard,
        }))),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: vec![],
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: vec![],
    };
    let input = plan_input(ast::Statement::Query(Box::new(query))).await?;
    let in_schema = unqualified(input.schema())?;

    // variables: those of the pattern, then those only in DEFINE
    let mut vars: Vec<String> = Vec::new();
    pattern_vars(&pattern, &mut vars)?;
    let skip_to = |v: &Ident| -> Result<u16> {
        let n = normalize_ident(v);
        vars.iter()
            .position(|x| *x == n)
            .map(|i| i as u16)
            .ok_or_else(|| {
                invalid(format!(
                    "AFTER MATCH SKIP TO {n}: {n} is not a pattern variable"
                ))
            })
    };
    let skip = match &after_match_skip {
        None | Some(AfterMatchSkip::PastLastRow) => Skip::PastLastRow,
        Some(AfterMatchSkip::ToNextRow) => Skip::ToNextRow,
        Some(AfterMatchSkip::ToFirst(v)) => Skip::ToFirst(skip_to(v)?),
        Some(AfterMatchSkip::ToLast(v)) => Skip::ToLast(skip_to(v)?),
    };
    let mut within_us = None;
    let mut defs: Vec<(String, ast::Expr)> = Vec::new();
    for s in symbols {
        let name = normalize_ident(&s.symbol);
        if s.symbol.value == WITHIN_SYMBOL {
            within_us = Some(interval_us(state, s.definition)?);
            continue;
        }
        if defs.iter().any(|(n, _)| *n == name) {
            return Err(invalid(format!("variable {name} is defined twice")));
        }
        if !vars.contains(&name) {
            return Err(invalid(format!(
                "DEFINE {name}: {name} is not a variable of the PATTERN"
            )));
        }
        defs.push((name, s.definition));
    }
    if vars.len() > u16::MAX as usize {
        return Err(unsupported("a pattern with that many variables"));
    }
    if nullable(&pattern) {
        return Err(invalid(
            "the PATTERN can match no rows at all (every match needs at least one row)",
        ));
    }
    let mut program = Vec::new();
    compile(&pattern, &vars, &mut program)?;
    program.push(Inst::Match);

    // ORDER BY: one time column, ascending
    let [order] = order_by.as_slice() else {
        return Err(unsupported(
            "ORDER BY with other than one column (order by the event time alone; ties are ordered by the whole row)",
        ));
    };
    if order.options.asc == Some(false) {
        return Err(unsupported(
            "ORDER BY ... DESC (rows are matched in time order)",
        ));
    }
    let time = plan_expr(state, order.expr.clone(), &in_schema)?;
    let time_type = time.get_type(&in_schema)?;
    if !crate::operators::asof_join::time_type_supported(&time_type) {
        return Err(unsupported(format!(
            "ORDER BY a column of type {time_type} (order by an integer, date or timestamp)"
        )));
    }
    if within_us.is_some()
        && !matches!(
            time_type,
            DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
        )
    {
        return Err(unsupported(format!(
            "WITHIN over an ORDER BY column of type {time_type} (WITHIN needs a date or timestamp)"
        )));
    }

    let mut partition = Vec::with_capacity(partition_by.len());
    let mut out_fields: Vec<Field> = Vec::new();
    for p in partition_by {
        let e = plan_expr(state, p, &in_schema)?;
        let Expr::Column(c) = &e else {
            return Err(unsupported(format!(
                "PARTITION BY {e} (partition by columns)"
            )));
        };
        out_fields.push(
            in_schema
                .field_with_unqualified_name(&c.name)?
                .as_ref()
                .clone(),
        );
        partition.push(e);
    }

    // DEFINE
    let mut max_back = 0usize;
    let mut defines: Vec<Option<(Expr, Vec<ColRef>, DFSchemaRef)>> = vec![None; vars.len()];
    for (name, def) in defs {
        let v = vars.iter().position(|x| *x == name).unwrap_or_default() as u16;
        let mut rw = Rewriter::new(&vars, &in_schema, Some(v));
        let def = rw.rewrite(def)?;
        let refs: Vec<ColRef> = rw
            .refs
            .iter()
            .map(|r| match r.0 {
                RefKind::Col(c) => Ok(c),
                _ => Err(unsupported(
                    "aggregates, MATCH_NUMBER or CLASSIFIER in DEFINE",
                )),
            })
            .collect::<Result<_>>()?;
        max_back = max_back.max(refs.iter().map(|r| r.back).max().unwrap_or(0));
        let schema = context_schema(&in_schema, &refs)?;
        let e = plan_expr(state, def, &schema)?;
        if e.get_type(&schema)? != DataType::Boolean {
            return Err(WeirError::new(
                crate::error::sqlstate::DATATYPE_MISMATCH,
                format!("MATCH_RECOGNIZE: DEFINE {name} must be a boolean condition"),
            ));
        }
        defines[v as usize] = Some((e, refs, Arc::new(schema)));
    }

    // MEASURES
    let mut rw = Rewriter::new(&vars, &in_schema, None);
    let mut planned_measures = Vec::with_capacity(measures.len());
    let mut measure_asts = Vec::with_capacity(measures.len());
    for m in measures {
        measure_asts.push((normalize_ident(&m.alias), rw.rewrite(m.expr)?));
    }
    let mut refs: Vec<LRef> = Vec::with_capacity(rw.refs.len());
    let mut ref_fields: Vec<Field> = Vec::with_capacity(rw.refs.len());
    for (i, (kind, ast_agg)) in rw.refs.iter().enumerate() {
        let name = format!("__r{i}");
        match kind {
            RefKind::Col(c) => {
                max_back = max_back.max(c.back);
                ref_fields.push(Field::new(
                    name,
                    in_schema.field(c.col).data_type().clone(),
                    true,
                ));
                refs.push(LRef::Col(*c));
            }
            RefKind::Agg(var) => {
                let agg = ast_agg
                    .clone()
                    .ok_or_else(|| WeirError::internal("aggregate without its call"))?;
                let e = match plan_expr(state, agg, &in_schema)? {
                    Expr::Alias(a) => *a.expr,
                    e => e,
                };
                if !matches!(e, Expr::AggregateFunction(_)) {
                    return Err(unsupported(format!("{e} as an aggregate")));
                }
                ref_fields.push(Field::new(name, e.get_type(&in_schema)?, true));
                refs.push(LRef::Agg(*var, e));
            }
            RefKind::MatchNumber => {
                ref_fields.push(Field::new(name, DataType::Int64, false));
                refs.push(LRef::MatchNumber);
            }
            RefKind::Classifier => {
                ref_fields.push(Field::new(name, DataType::Utf8, false));
                refs.push(LRef::Classifier);
            }
        }
    }
    let refs_schema = DFSchema::try_from(Schema::new(ref_fields))?;
    for (alias, e) in measure_asts {
        let e = plan_expr(state, e, &refs_schema)?;
        if out_fields.iter().any(|f| *f.name() == alias) {
            return Err(WeirError::new(
                crate::error::sqlstate::DUPLICATE_COLUMN,
                format!("MATCH_RECOGNIZE: column \"{alias}\" specified more than once"),
            ));
        }
        out_fields.push(Field::new(alias, e.get_type(&refs_schema)?, true));
        planned_measures.push(e);
    }
    let schema = Arc::new(DFSchema::try_from(Schema::new(out_fields))?);
    Ok(MatchRecognizeNode {
        input,
        schema,
        spec: Arc::new(Spec {
            partition_by: partition,
            time,
            within_us,
            vars,
            program,
            defines,
            refs,
            refs_schema: Arc::new(refs_schema),
            measures: planned_measures,
            skip,
            max_back,
            text,
        }),
    })
}

/// The input's columns, then one per reference.
fn context_schema(input: &DFSchema, refs: &[ColRef]) -> Result<DFSchema> {
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    for (i, r) in refs.iter().enumerate() {
        fields.push(Field::new(
            format!("__r{i}"),
            input.field(r.col).data_type().clone(),
            true,
        ));
    }
    Ok(DFSchema::try_from(Schema::new(fields))?)
}

fn interval_us(state: &SessionState, e: ast::Expr) -> Result<i64> {
    let bad =
        || invalid("WITHIN needs a constant positive interval, e.g. WITHIN INTERVAL '30 minutes'");
    let planned = plan_expr(state, e, &DFSchema::empty())?;
    let s = ExprSimplifier::new(SimplifyContext::builder().build());
    let v = match s.simplify(planned)? {
        Expr::Literal(v, _) => v,
        _ => return Err(bad()),
    };
    let us = match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            i.days as i64 * 86_400_000_000 + i.nanoseconds / 1000
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            i.days as i64 * 86_400_000_000 + i.milliseconds as i64 * 1000
        }
        ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalYearMonth(_) => {
            return Err(unsupported(
                "WITHIN an interval of months or years (a month has no fixed length)",
            ));
        }
        _ => return Err(bad()),
    };
    if us <= 0 {
        return Err(bad());
    }
    Ok(us)
}

fn pattern_vars(p: &MatchRecognizePattern, out: &mut Vec<String>) -> Result<()> {
    match p {
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Named(i)) => {
            let n = normalize_ident(i);
            if !out.contains(&n) {
                out.push(n);
            }
            Ok(())
        }
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::End) => Ok(()),
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Start) => Err(unsupported(
            "^ in PATTERN (a stream's partition has no first row to anchor to)",
        )),
        MatchRecognizePattern::Exclude(_) => Err(unsupported("{- ... -} in PATTERN")),
        MatchRecognizePattern::Permute(_) => Err(unsupported("PERMUTE in PATTERN")),
        MatchRecognizePattern::Concat(ps) | MatchRecognizePattern::Alternation(ps) => {
            ps.iter().try_for_each(|p| pattern_vars(p, out))
        }
        MatchRecognizePattern::Group(p) | MatchRecognizePattern::Repetition(p, _) => {
            pattern_vars(p, out)
        }
    }
}

/// Whether a pattern can match without consuming a row.
fn nullable(p: &MatchRecognizePattern) -> bool {
    use RepetitionQuantifier as Q;
    match p {
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Named(_)) => false,
        MatchRecognizePattern::Symbol(_) => true,
        MatchRecognizePattern::Exclude(_) | MatchRecognizePattern::Permute(_) => false,
        MatchRecognizePattern::Concat(ps) => ps.iter().all(nullable),
        MatchRecognizePattern::Alternation(ps) => ps.iter().any(nullable),
        MatchRecognizePattern::Group(p) => nullable(p),
        MatchRecognizePattern::Repetition(p, q) => match q {
            Q::ZeroOrMore | Q::AtMostOne | Q::AtMost(_) | Q::Exactly(0) | Q::AtLeast(0) => true,
            Q::Range(0, _) => true,
            _ => nullable(p),
        },
    }
}

fn compile(p: &MatchRecognizePattern, vars: &[String], out: &mut Vec<Inst>) -> Result<()> {
    use RepetitionQuantifier as Q;
    if out.len() > MAX_PROGRAM {
        return Err(unsupported(format!(
            "a PATTERN this large (more than {MAX_PROGRAM} steps once its counted repetitions are written out)"
        )));
    }
    match p {
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Named(i)) => {
            let n = normalize_ident(i);
            let v = vars.iter().position(|x| *x == n).unwrap_or_default();
            out.push(Inst::Var(v as u16));
        }
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::End) => out.push(Inst::End),
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Start)
        | MatchRecognizePattern::Exclude(_)
        | MatchRecognizePattern::Permute(_) => {
            return Err(unsupported(format!("{p} in PATTERN")));
        }
        MatchRecognizePattern::Concat(ps) => {
            for p in ps {
                compile(p, vars, out)?;
            }
        }
        MatchRecognizePattern::Group(p) => compile(p, vars, out)?,
        MatchRecognizePattern::Alternation(ps) => {
            let mut jumps = Vec::new();
            for (k, p) in ps.iter().enumerate() {
                if k + 1 < ps.len() {
                    let split = out.len();
                    out.push(Inst::Split(split + 1, 0));
                    compile(p, vars, out)?;
                    jumps.push(out.len());
                    out.push(Inst::Jmp(0));
                    let next = out.len();
                    out[split] = Inst::Split(split + 1, next);
                } else {
                    compile(p, vars, out)?;
                }
            }
            let end = out.len();
            for j in jumps {
                out[j] = Inst::Jmp(end);
            }
        }
        MatchRecognizePattern::Repetition(body, q) => {
            if nullable(body) {
                return Err(unsupported(format!(
                    "a quantifier over {body}, which can match no rows"
                )));
            }
            let (min, max) = match *q {
                Q::ZeroOrMore => (0, None),
                Q::OneOrMore => (1, None),
                Q::AtMostOne => (0, Some(1)),
                Q::Exactly(n) => (n, Some(n)),
                Q::AtLeast(n) => (n, None),
                Q::AtMost(m) => (0, Some(m)),
                Q::Range(n, m) => {
                    if m < n {
                        return Err(invalid(format!("quantifier {{{n},{m}}}: {m} < {n}")));
                    }
                    (n, Some(m))
                }
            };
            if min as usize > MAX_PROGRAM || max.is_some_and(|m| m as usize > MAX_PROGRAM) {
                return Err(unsupported(format!("the quantifier {q}")));
            }
            for _ in 0..min {
                compile(body, vars, out)?;
            }
            match max {
                None => {
                    // L: Split(L+1, out); body; Jmp(L); out:
                    let l = out.len();
                    out.push(Inst::Split(l + 1, 0));
                    compile(body, vars, out)?;
                    out.push(Inst::Jmp(l));
                    let end = out.len();
                    out[l] = Inst::Split(l + 1, end);
                }
                Some(m) => {
                    // (body (body (...)?)?)? : each further copy only after the one before
                    let mut splits = Vec::new();
                    for _ in min..m {
                        splits.push(out.len());
                        out.push(Inst::Split(0, 0));
                        compile(body, vars, out)?;
                    }
                    let end = out.len();
                    for s in splits {
                        out[s] = Inst::Split(s + 1, end);
                    }
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefKind {
    Col(ColRef),
    Agg(Option<u16>),
    MatchNumber,
    Classifier,
}

/// Replaces pattern navigation in an expression by columns `__r<i>`.
struct Rewriter<'a> {
    vars: &'a [String],
    input: &'a DFSchema,
    /// DEFINE of this variable (running semantics); None: MEASURES.
    defining: Option<u16>,
    refs: Vec<(RefKind, Option<ast::Expr>)>,
}

const AGGREGATES: [&str; 5] = ["count", "sum", "avg", "min", "max"];

impl<'a> Rewriter<'a> {
    fn new(vars: &'a [String], input: &'a DFSchema, defining: Option<u16>) -> Self {
        Rewriter {
            vars,
            input,
            defining,
            refs: Vec::new(),
        }
    }

    fn rewrite(&mut self, mut e: ast::Expr) -> Result<ast::Expr> {
        struct V<'r, 'a>(&'r mut Rewriter<'a>);
        impl VisitorMut for V<'_, '_> {
            type Break = WeirError;
            fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<WeirError> {
                match self.0.replace(e) {
                    Ok(Some(new)) => {
                        *e = new;
                        ControlFlow::Continue(())
                    }
                    Ok(None) => ControlFlow::Continue(()),
                    Err(err) => ControlFlow::Break(err),
                }
            }
        }
        if let ControlFlow::Break(err) = e.visit(&mut V(self)) {
            return Err(err);
        }
        Ok(e)
    }

    fn var(&self, i: &Ident) -> Result<u16> {
        let n = normalize_ident(i);
        self.vars
            .iter()
            .position(|v| *v == n)
            .map(|v| v as u16)
            .ok_or_else(|| invalid(format!("{n} is not a pattern variable")))
    }

    fn col(&self, i: &Ident) -> Result<usize> {
        let n = normalize_ident(i);
        self.input
            .fields()
            .iter()
            .position(|f| *f.name() == n)
            .ok_or_else(|| {
                WeirError::new(
                    crate::error::sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{n}\" does not exist"),
                )
            })
    }

    fn push(&mut self, kind: RefKind, call: Option<ast::Expr>) -> ast::Expr {
        let i = match self.refs.iter().position(|(k, c)| *k == kind && *c == call) {
            Some(i) => i,
            None => {
                self.refs.push((kind, call));
                self.refs.len() - 1
            }
        };
        ast::Expr::Identifier(Ident::new(format!("__r{i}")))
    }

    /// `v.col` or `col` as (variable, column).
    fn target(&self, e: &ast::Expr) -> Result<(Option<u16>, usize)> {
        match e {
            ast::Expr::Identifier(i) => Ok((None, self.col(i)?)),
            ast::Expr::CompoundIdentifier(p) if p.len() == 2 => {
                Ok((Some(self.var(&p[0])?), self.col(&p[1])?))
            }
            other => Err(unsupported(format!(
                "{other} as the argument of FIRST, LAST or PREV (name a column or variable.column)"
            ))),
        }
    }

    fn replace(&mut self, e: &ast::Expr) -> Result<Option<ast::Expr>> {
        match e {
            ast::Expr::CompoundIdentifier(p) if p.len() == 2 => {
                let v = self.var(&p[0])?;
                let col = self.col(&p[1])?;
                if self.defining == Some(v) {
                    // the current row's column
                    return Ok(Some(ast::Expr::Identifier(Ident::with_quote(
                        '"',
                        self.input.field(col).name(),
                    ))));
                }
                Ok(Some(self.push(
                    RefKind::Col(ColRef {
                        row: RowRef::Last(Some(v)),
                        back: 0,
                        col,
                    }),
                    None,
                )))
            }
            ast::Expr::Identifier(i) if self.defining.is_none() => {
                if i.value.starts_with("__r") {
                    return Ok(None);
                }
                let col = self.col(i)?;
                Ok(Some(self.push(
                    RefKind::Col(ColRef {
                        row: RowRef::Last(None),
                        back: 0,
                        col,
                    }),
                    None,
                )))
            }
            ast::Expr::Function(f) => {
                let name = f.name.to_string().to_lowercase();
                let args: Vec<&ast::Expr> = match &f.args {
                    FunctionArguments::List(l) => l
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                            _ => None,
                        })
                        .collect(),
                    FunctionArguments::None => vec![],
                    FunctionArguments::Subquery(_) => vec![],
                };
                match name.as_str() {
                    "prev" | "first" | "last" => {
                        let (target, back) = match (name.as_str(), args.as_slice()) {
                            ("prev", [t]) => (*t, 1),
                            ("prev", [t, n]) => (*t, const_offset(n)?),
                            (_, [t]) => (*t, 0),
                            _ => {
                                return Err(unsupported(format!(
                                    "{} with these arguments",
                                    name.to_uppercase()
                                )));
                            }
                        };
                        let (var, col) = self.target(target)?;
                        let row = match name.as_str() {
                            "first" => RowRef::First(var),
                            "last" => RowRef::Last(var),
                            _ => match (self.defining, var) {
                                (Some(_), None) => RowRef::Current,
                                (Some(d), Some(v)) if d == v => RowRef::Current,
                                (_, v) => RowRef::Last(v),
                            },
                        };
                        Ok(Some(
                            self.push(RefKind::Col(ColRef { row, back, col }), None),
                        ))
                    }
                    "next" => Err(unsupported(
                        "NEXT (matches are decided on rows up to the current one)",
                    )),
                    "match_number" if self.defining.is_none() => {
                        Ok(Some(self.push(RefKind::MatchNumber, None)))
                    }
                    "classifier" if self.defining.is_none() => {
                        Ok(Some(self.push(RefKind::Classifier, None)))
                    }
                    "match_number" | "classifier" => {
                        Err(unsupported(format!("{} in DEFINE", name.to_uppercase())))
                    }
                    a if AGGREGATES.contains(&a) => {
                        if self.defining.is_some() {
                            return Err(unsupported("aggregates in DEFINE"));
                        }
                        // the variable its arguments name, and the call over plain columns
                        let mut call = f.clone();
                        let mut var: Option<Option<u16>> = None;
                        let mut err = None;
                        let mut note = |v: Option<u16>| match var {
                            None => var = Some(v),
                            Some(x) if x == v => {}
                            Some(_) => {
                                err = Some(unsupported(
                                    "an aggregate over rows of more than one variable",
                                ))
                            }
                        };
                        if let FunctionArguments::List(l) = &mut call.args {
                            for a in &mut l.args {
                                match a {
                                    FunctionArg::Unnamed(FunctionArgExpr::QualifiedWildcard(q)) => {
                                        let parts = &q.0;
                                        let v = match parts.as_slice() {
                                            [p] => p.as_ident().map(|i| self.var(i)).transpose()?,
                                            _ => None,
                                        };
                                        note(Some(v.ok_or_else(|| {
                                            invalid(format!("{q}.* is not a pattern variable"))
                                        })?));
                                        *a = FunctionArg::Unnamed(FunctionArgExpr::Wildcard);
                                    }
                                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => note(None),
                                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => {
                                        let mut found: Vec<Option<u16>> = Vec::new();
                                        let mut fail = None;
                                        let _ = x.visit(&mut StripVars {
                                            rw: self,
                                            found: &mut found,
                                            fail: &mut fail,
                                        });
                                        if let Some(e) = fail {
                                            return Err(e);
                                        }
                                        if found.is_empty() {
                                            found.push(None);
                                        }
                                        for v in found {
                                            note(v);
                                        }
                                    }
                                    _ => return Err(unsupported(format!("{f}"))),
                                }
                            }
                        }
                        if let Some(e) = err {
                            return Err(e);
                        }
                        let var = var.flatten();
                        Ok(Some(
                            self.push(RefKind::Agg(var), Some(ast::Expr::Function(call))),
                        ))
                    }
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }
}

/// Turns `v.col` into `col` inside an aggregate's argument, noting the variables.
struct StripVars<'r, 'a> {
    rw: &'r Rewriter<'a>,
    found: &'r mut Vec<Option<u16>>,
    fail: &'r mut Option<WeirError>,
}

impl VisitorMut for StripVars<'_, '_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
        match e {
            ast::Expr::CompoundIdentifier(p) if p.len() == 2 => match self.rw.var(&p[0]) {
                Ok(v) => {
                    if !self.found.contains(&Some(v)) {
                        self.found.push(Some(v));
                    }
                    *e = ast::Expr::Identifier(p[1].clone());
                }
                Err(err) => {
                    *self.fail = Some(err);
                    return ControlFlow::Break(());
                }
            },
            ast::Expr::Identifier(_) if !self.found.contains(&None) => self.found.push(None),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn const_offset(e: &ast::Expr) -> Result<usize> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= 1000)
                .ok_or_else(|| invalid(format!("PREV offset {n} (0 to 1000)"))),
            _ => Err(invalid("PREV's offset must be an integer constant")),
        },
        _ => Err(invalid("PREV's offset must be an integer constant")),
    }
}

impl Spec {
    /// Compile for execution over `input` (the node's input schema).
    pub fn recognizer(&self, input: &DFSchema, output: &DFSchema) -> Result<Recognizer> {
        use crate::operators::compile;
        use datafusion::execution::context::ExecutionProps;
        use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
        use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
        let in_schema = unqualified(input)?;
        let partition = self
            .partition_by
            .iter()
            .map(|e| compile(e, &in_schema))
            .collect::<Result<Vec<_>>>()?;
        let partition_types = self
            .partition_by
            .iter()
            .map(|e| e.get_type(&in_schema))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let defines = self
            .defines
            .iter()
            .map(|d| {
                d.as_ref()
                    .map(|(e, refs, schema)| -> Result<Define> {
                        Ok(Define {
                            expr: compile(e, schema)?,
                            refs: refs.clone(),
                            per_batch: refs.iter().all(|r| r.row == RowRef::Current),
                            schema: Arc::new(schema.as_arrow().clone()),
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let props = ExecutionProps::new();
        let ctx = PhysicalPlanningContext::default();
        let physical_in = in_schema.as_arrow();
        let refs = self
            .refs
            .iter()
            .map(|r| -> Result<MeasureRef> {
                Ok(match r {
                    LRef::Col(c) => MeasureRef::Col(*c),
                    LRef::MatchNumber => MeasureRef::MatchNumber,
                    LRef::Classifier => MeasureRef::Classifier,
                    LRef::Agg(var, e) => {
                        let lowered =
                            LoweredAggregateBuilder::new(e, &in_schema, physical_in, &props, &ctx)
                                .build()?;
                        MeasureRef::Agg {
                            var: *var,
                            spec: crate::operators::aggregate::AggSpec {
                                func: lowered.aggregate,
                                filter: lowered.filter,
                                order_by: lowered.order_bys.into_iter().map(|s| s.expr).collect(),
                                text: e.to_string(),
                            },
                        }
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let measures = self
            .measures
            .iter()
            .map(|e| compile(e, &self.refs_schema))
            .collect::<Result<Vec<_>>>()?;
        Ok(Recognizer {
            partition,
            partition_types,
            time: compile(&self.time, &in_schema)?,
            within: self.within_us,
            vars: self.vars.clone(),
            program: self.program.clone(),
            defines,
            refs,
            refs_schema: Arc::new(self.refs_schema.as_arrow().clone()),
            measures,
            skip: self.skip,
            input_schema: Arc::new(in_schema.as_arrow().clone()),
            output_schema: Arc::new(output.as_arrow().clone()),
            max_back: self.max_back,
            uses_match_number: self.refs.iter().any(|r| matches!(r, LRef::MatchNumber)),
            text: self.text.clone(),
        })
    }
}

/// Plans [`MatchRecognizeNode`]s of one-shot queries as [`MatchRecognizeExec`].
#[derive(Debug)]
pub struct MatchRecognizePlanner;

#[async_trait::async_trait]
impl ExtensionPlanner for MatchRecognizePlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session_state: &dyn datafusion::catalog::Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> datafusion::common::Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<MatchRecognizeNode>() else {
            return Ok(None);
        };
        let (Some(input), Some(logical)) = (physical_inputs.first(), logical_inputs.first()) else {
            return Ok(None);
        };
        let rec = n
            .spec
            .recognizer(logical.schema(), &n.schema)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        Ok(Some(Arc::new(MatchRecognizeExec::new(
            input.clone(),
            Arc::new(rec),
        ))))
    }
}

/// Reads its whole input, then emits the matches (`recognize_all`).
#[derive(Debug)]
pub struct MatchRecognizeExec {
    input: Arc<dyn ExecutionPlan>,
    rec: Arc<Recognizer>,
    props: Arc<PlanProperties>,
}

impl fmt::Debug for Recognizer {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Recognizer({})", self.text)
    }
}

impl MatchRecognizeExec {
    fn new(input: Arc<dyn ExecutionPlan>, rec: Arc<Recognizer>) -> Self {
        use datafusion::physical_expr::EquivalenceProperties;
        use datafusion::physical_plan::Partitioning;
        use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(rec.output_schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        MatchRecognizeExec { input, rec, props }
    }
}

impl DisplayAs for MatchRecognizeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MatchRecognizeExec: {}", self.rec.text)
    }
}

impl ExecutionPlan for MatchRecognizeExec {
    fn name(&self) -> &str {
        "MatchRecognizeExec"
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> datafusion::common::Result<
            datafusion::common::tree_node::TreeNodeRecursion,
        >,
    ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let input = children.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("MatchRecognizeExec without input".into())
        })?;
        Ok(Arc::new(MatchRecognizeExec::new(input, self.rec.clone())))
    }
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> datafusion::common::Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "MatchRecognizeExec has one partition, not {partition}"
            )));
        }
        let input = self.input.clone();
        let rec = self.rec.clone();
        let schema: SchemaRef = rec.output_schema.clone();
        let fut = async move {
            let in_schema = input.schema();
            let n = input.output_partitioning().partition_count();
            let mut batches = Vec::new();
            for p in 0..n {
                let s = input.execute(p, context.clone())?;
                batches.extend(datafusion::physical_plan::common::collect(s).await?);
            }
            let all = datafusion::arrow::compute::concat_batches(&in_schema, &batches)?;
            let all = datafusion::arrow::record_batch::RecordBatch::try_new_with_options(
                rec.input_schema.clone(),
                all.columns().to_vec(),
                &datafusion::arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(all.num_rows())),
            )?;
            crate::operators::match_recognize::recognize_all(&rec, &all)
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(fut),
        )))
    }
}

/// The query planner of sessions: DataFusion's, with the MATCH_RECOGNIZE node and the
/// correlated subqueries DataFusion leaves (`crate::plan::apply`).
#[derive(Debug)]
pub struct WeirQueryPlanner;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for WeirQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn datafusion::catalog::Session,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let planner =
            datafusion::physical_planner::DefaultPhysicalPlanner::with_extension_planners(vec![
                Arc::new(MatchRecognizePlanner),
                Arc::new(crate::plan::apply::ApplyPlanner),
            ]);
        if crate::plan::apply::needed(logical_plan) {
            let plan = crate::plan::apply::rewrite(logical_plan.clone())?;
            return planner.create_physical_plan(&plan, session_state).await;
        }
        planner
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}

/// [`prepare`] with the inputs planned as a statement is (`asof` in `mode`).
pub async fn prepare_statement(
    stmt: &mut ast::Statement,
    state: &SessionState,
    mode: crate::plan::asof::Mode,
) -> Result<Pending> {
    let plan_input = |s: ast::Statement| -> futures::future::BoxFuture<'_, Result<LogicalPlan>> {
        Box::pin(async move {
            let plan = state
                .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(s)))
                .await?;
            let plan = crate::catalog::pg_semantics::fix_planned(plan)?;
            crate::plan::asof::plan(plan, mode)
        })
    };
    prepare(stmt, state, &plan_input).await
}
