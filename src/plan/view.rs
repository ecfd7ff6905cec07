//! Lowering a view's optimized DataFusion `LogicalPlan` to a dataflow [`Graph`] of
//! incremental operators. Every construct without an incremental operator is refused here,
//! at CREATE time, with SQLSTATE 0A000 and its name.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::compute::{SortOptions, concat};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, NullEquality, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Distinct, Expr, ExprSchemable, FetchType, LogicalPlan, Operator as BinOp, SkipType, Volatility,
};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;

use crate::catalog::Catalog;
use crate::dataflow::changelog::Changelog;
use crate::dataflow::graph::{Graph, NodeId, NodeKind};
use crate::error::{Result, WeirError};
use crate::operators::aggregate::{AggSpec, Aggregate};
use crate::operators::filter::Filter;
use crate::operators::join::Join;
use crate::operators::merge::Merge;
use crate::operators::project::Project;
use crate::operators::top_n::{SortKey, TopN};
use crate::operators::{Operator, compile};

fn unsupported(what: impl Into<String>) -> WeirError {
    WeirError::not_supported(format!(
        "{} is not supported in a materialized view",
        what.into()
    ))
}

/// Refuse functions whose result is not a function of their arguments (`now()`,
/// `random()`): a view must equal its query over the same inputs at any time.
pub fn check_deterministic(plan: &LogicalPlan) -> Result<()> {
    let mut bad: Option<String> = None;
    plan.apply_with_subqueries(|p| {
        p.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e
                    && f.func.signature().volatility != Volatility::Immutable
                {
                    bad = Some(f.func.name().to_owned());
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    match bad {
        Some(f) => Err(WeirError::not_supported(format!(
            "function {f}() is not allowed in a materialized view: its result is not determined by its arguments"
        ))),
        None => Ok(()),
    }
}

pub struct Lowering<'a> {
    catalog: &'a Catalog,
    pub graph: Graph,
}

impl<'a> Lowering<'a> {
    pub fn new(catalog: &'a Catalog) -> Self {
        Lowering {
            catalog,
            graph: Graph::new(),
        }
    }

    /// Lower a whole plan; the graph's output is its root.
    pub fn lower_root(mut self, plan: &LogicalPlan) -> Result<Graph> {
        let root = self.lower(plan)?;
        self.graph.output = root;
        Ok(self.graph)
    }

    fn op(&mut self, op: impl Operator + 'static, inputs: Vec<NodeId>) -> NodeId {
        let schema = op.output_schema().clone();
        self.graph
            .add(NodeKind::Operator(Box::new(op)), inputs, schema)
    }

    fn lower(&mut self, plan: &LogicalPlan) -> Result<NodeId> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table();
                let entry = self.catalog.get(name).ok_or_else(|| {
                    unsupported(format!(
                        "reading \"{}\" (only tables and materialized views can be read)",
                        scan.table_name
                    ))
                })?;
                let schema = entry.desc.schema();
                let src = self.graph.add(
                    NodeKind::Source {
                        relation: entry.desc.oid,
                        name: entry.desc.name.clone(),
                    },
                    vec![],
                    schema.clone(),
                );
                if scan.fetch.is_some() {
                    return Err(unsupported("LIMIT without ORDER BY"));
                }
                let out_schema: SchemaRef = Arc::new(scan.projected_schema.as_arrow().clone());
                let node = match &scan.projection {
                    Some(cols)
                        if cols.len() != schema.fields().len()
                            || cols.iter().enumerate().any(|(i, c)| i != *c) =>
                    {
                        let exprs = cols
                            .iter()
                            .map(|c| {
                                Arc::new(datafusion::physical_expr::expressions::Column::new(
                                    schema.field(*c).name(),
                                    *c,
                                ))
                                    as Arc<dyn datafusion::physical_expr::PhysicalExpr>
                            })
                            .collect();
                        let names: Vec<&str> = cols
                            .iter()
                            .map(|c| schema.field(*c).name().as_str())
                            .collect();
                        self.op(Project::new(exprs, out_schema, names.join(", ")), vec![src])
                    }
                    _ => src,
                };
                let mut node = node;
                for f in &scan.filters {
                    let pred = compile(f, &scan.projected_schema)?;
                    node = self.op(
                        Filter::new(pred, self.graph.nodes[node].schema.clone(), f.to_string()),
                        vec![node],
                    );
                }
                Ok(node)
            }
            LogicalPlan::Projection(p) => {
                let input = self.lower(&p.input)?;
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| compile(e, p.input.schema()))
                    .collect::<Result<Vec<_>>>()?;
                let text: Vec<String> = p.expr.iter().map(|e| e.to_string()).collect();
                Ok(self.op(
                    Project::new(
                        exprs,
                        Arc::new(p.schema.as_arrow().clone()),
                        text.join(", "),
                    ),
                    vec![input],
                ))
            }
            LogicalPlan::Filter(f) => {
                if let LogicalPlan::Window(w) = f.input.as_ref()
                    && let Some(node) = self.row_number_top_n(w, &f.predicate)?
                {
                    return Ok(node);
                }
                let input = self.lower(&f.input)?;
                let pred = compile(&f.predicate, f.input.schema())?;
                Ok(self.op(
                    Filter::new(
                        pred,
                        Arc::new(f.input.schema().as_arrow().clone()),
                        f.predicate.to_string(),
                    ),
                    vec![input],
                ))
            }
            LogicalPlan::Aggregate(a) => {
                let input = self.lower(&a.input)?;
                self.aggregate(input, &a.input, &a.group_expr, &a.aggr_expr, &a.schema)
            }
            LogicalPlan::Distinct(Distinct::All(inner)) => {
                let input = self.lower(inner)?;
                let cols: Vec<Expr> = inner
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                self.aggregate(input, inner, &cols, &[], inner.schema())
            }
            LogicalPlan::Distinct(Distinct::On(_)) => Err(unsupported("DISTINCT ON")),
            LogicalPlan::Join(j) => {
                if j.null_aware {
                    return Err(unsupported(
                        "NOT IN (subquery) (use NOT EXISTS, which does not depend on NULLs)",
                    ));
                }
                let left = self.lower(&j.left)?;
                let right = self.lower(&j.right)?;
                let mut lk = Vec::new();
                let mut rk = Vec::new();
                let mut types = Vec::new();
                for (l, r) in &j.on {
                    let lt = l.get_type(j.left.schema())?;
                    let rt = r.get_type(j.right.schema())?;
                    let (l, r) = if lt == rt {
                        (l.clone(), r.clone())
                    } else {
                        (
                            l.clone().cast_to(&lt, j.left.schema())?,
                            r.clone().cast_to(&lt, j.right.schema())?,
                        )
                    };
                    lk.push(compile(&l, j.left.schema())?);
                    rk.push(compile(&r, j.right.schema())?);
                    types.push(lt);
                }
                let filter = match &j.filter {
                    Some(f) => {
                        let both = j.left.schema().join(j.right.schema())?;
                        Some(compile(f, &both)?)
                    }
                    None => None,
                };
                let on: Vec<String> = j.on.iter().map(|(l, r)| format!("{l} = {r}")).collect();
                let mut text = format!("{} on [{}]", j.join_type, on.join(", "));
                if let Some(f) = &j.filter {
                    text.push_str(&format!(" filter {f}"));
                }
                let op = Join::new(
                    j.join_type,
                    Arc::new(j.left.schema().as_arrow().clone()),
                    Arc::new(j.right.schema().as_arrow().clone()),
                    lk,
                    rk,
                    types,
                    j.null_equality == NullEquality::NullEqualsNull,
                    filter,
                    Arc::new(j.schema.as_arrow().clone()),
                    text,
                )?;
                Ok(self.op(op, vec![left, right]))
            }
            LogicalPlan::SubqueryAlias(s) => self.lower(&s.input),
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<Result<Vec<_>>>()?;
                let n = inputs.len();
                Ok(self.op(Merge::new(Arc::new(u.schema.as_arrow().clone()), n), inputs))
            }
            LogicalPlan::Sort(s) => match s.fetch {
                None => self.lower(&s.input),
                Some(fetch) => self.top_n(&s.input, &s.expr, 0, fetch),
            },
            LogicalPlan::Limit(l) => {
                let skip = match l.get_skip_type()? {
                    SkipType::Literal(n) => n,
                    SkipType::UnsupportedExpr => return Err(unsupported("a non-constant OFFSET")),
                };
                let fetch = match l.get_fetch_type()? {
                    FetchType::Literal(Some(n)) => n,
                    FetchType::Literal(None) => usize::MAX,
                    FetchType::UnsupportedExpr => return Err(unsupported("a non-constant LIMIT")),
                };
                match l.input.as_ref() {
                    LogicalPlan::Sort(s) => {
                        let fetch = s.fetch.map_or(fetch, |f| f.saturating_sub(skip).min(fetch));
                        self.top_n(&s.input, &s.expr, skip, fetch)
                    }
                    _ => Err(unsupported("LIMIT/OFFSET without ORDER BY")),
                }
            }
            LogicalPlan::EmptyRelation(e) => {
                let schema: SchemaRef = Arc::new(e.schema.as_arrow().clone());
                let rows = if e.produce_one_row { 1 } else { 0 };
                let batch = RecordBatch::try_new_with_options(
                    schema.clone(),
                    vec![],
                    &RecordBatchOptions::new().with_row_count(Some(rows)),
                )?;
                Ok(self.constant(Changelog::inserts(batch), schema))
            }
            LogicalPlan::Values(v) => {
                let schema: SchemaRef = Arc::new(v.schema.as_arrow().clone());
                let empty = DFSchema::empty();
                let one = RecordBatch::try_new_with_options(
                    Arc::new(Schema::empty()),
                    vec![],
                    &RecordBatchOptions::new().with_row_count(Some(1)),
                )?;
                let mut cols: Vec<Vec<ArrayRef>> = vec![Vec::new(); schema.fields().len()];
                for row in &v.values {
                    for (i, e) in row.iter().enumerate() {
                        let e = e.clone().cast_to(schema.field(i).data_type(), &empty)?;
                        cols[i].push(crate::operators::evaluate(&compile(&e, &empty)?, &one)?);
                    }
                }
                let arrays = cols
                    .iter()
                    .map(|parts| {
                        let refs: Vec<&dyn datafusion::arrow::array::Array> =
                            parts.iter().map(|a| a.as_ref()).collect();
                        concat(&refs)
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let batch = RecordBatch::try_new_with_options(
                    schema.clone(),
                    arrays,
                    &RecordBatchOptions::new().with_row_count(Some(v.values.len())),
                )?;
                Ok(self.constant(Changelog::inserts(batch), schema))
            }
            LogicalPlan::Window(_) => Err(unsupported(
                "a window function other than ROW_NUMBER() ... <= n",
            )),
            other => Err(unsupported(other.display().to_string())),
        }
    }

    fn constant(&mut self, rows: Changelog, schema: SchemaRef) -> NodeId {
        self.op(
            Constant {
                rows: Some(rows),
                schema,
            },
            vec![],
        )
    }

    fn aggregate(
        &mut self,
        input: NodeId,
        input_plan: &LogicalPlan,
        group_expr: &[Expr],
        aggr_expr: &[Expr],
        schema: &DFSchema,
    ) -> Result<NodeId> {
        let in_schema = input_plan.schema();
        if group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))) {
            return Err(unsupported("GROUPING SETS / ROLLUP / CUBE"));
        }
        let groups = group_expr
            .iter()
            .map(|e| compile(e, in_schema))
            .collect::<Result<Vec<_>>>()?;
        let types = group_expr
            .iter()
            .map(|e| e.get_type(in_schema))
            .collect::<std::result::Result<Vec<DataType>, _>>()?;
        let physical_in = in_schema.as_arrow();
        let props = ExecutionProps::new();
        let ctx = PhysicalPlanningContext::default();
        let mut specs = Vec::new();
        for e in aggr_expr {
            let inner = match e {
                Expr::Alias(a) => a.expr.as_ref(),
                other => other,
            };
            if !matches!(inner, Expr::AggregateFunction(AggregateFunction { .. })) {
                return Err(unsupported(format!("aggregate expression {e}")));
            }
            let lowered =
                LoweredAggregateBuilder::new(e, in_schema, physical_in, &props, &ctx).build()?;
            specs.push(AggSpec {
                func: lowered.aggregate,
                filter: lowered.filter,
                order_by: lowered.order_bys.into_iter().map(|s| s.expr).collect(),
                text: e.to_string(),
            });
        }
        let group_text: Vec<String> = group_expr.iter().map(|e| e.to_string()).collect();
        let op = Aggregate::new(
            groups,
            types,
            group_text.join(", "),
            specs,
            Arc::new(schema.as_arrow().clone()),
        )?;
        Ok(self.op(op, vec![input]))
    }

    fn top_n(
        &mut self,
        input_plan: &LogicalPlan,
        sort: &[datafusion::logical_expr::SortExpr],
        skip: usize,
        fetch: usize,
    ) -> Result<NodeId> {
        let input = self.lower(input_plan)?;
        let schema = input_plan.schema();
        let keys = self.sort_keys(sort, schema)?;
        let text = format!(
            "order by [{}] offset {skip} limit {}",
            sort.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if fetch == usize::MAX {
                "all".into()
            } else {
                fetch.to_string()
            }
        );
        let out: SchemaRef = Arc::new(schema.as_arrow().clone());
        let op = TopN::new(
            vec![],
            vec![],
            keys,
            skip,
            fetch,
            false,
            out.clone(),
            out,
            text,
        )?;
        Ok(self.op(op, vec![input]))
    }

    fn sort_keys(
        &self,
        sort: &[datafusion::logical_expr::SortExpr],
        schema: &DFSchema,
    ) -> Result<Vec<SortKey>> {
        sort.iter()
            .map(|s| {
                Ok(SortKey {
                    expr: compile(&s.expr, schema)?,
                    data_type: s.expr.get_type(schema)?,
                    options: SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                })
            })
            .collect()
    }

    /// `Filter(rn <= n)` over `Window(row_number() OVER (PARTITION BY .. ORDER BY ..))`.
    fn row_number_top_n(
        &mut self,
        w: &datafusion::logical_expr::Window,
        predicate: &Expr,
    ) -> Result<Option<NodeId>> {
        if w.window_expr.len() != 1 {
            return Ok(None);
        }
        let (wexpr, alias) = match &w.window_expr[0] {
            Expr::Alias(a) => (a.expr.as_ref(), Some(a.name.clone())),
            e => (e, None),
        };
        let Expr::WindowFunction(wf) = wexpr else {
            return Ok(None);
        };
        let WindowFunction { fun, params } = wf.as_ref();
        if fun.name() != "row_number" {
            return Ok(None);
        }
        let rn_name = alias.unwrap_or_else(|| w.window_expr[0].schema_name().to_string());
        let rn_col = w.schema.columns().last().cloned();
        // conjuncts of the predicate: one bounds the row number, the rest filter after
        let mut conjuncts = Vec::new();
        split_and(predicate, &mut conjuncts);
        let mut limit: Option<usize> = None;
        let mut rest = Vec::new();
        for c in conjuncts {
            match rn_bound(c, rn_col.as_ref(), &rn_name) {
                Some(n) if limit.is_none() => limit = Some(n),
                _ => rest.push(c.clone()),
            }
        }
        let Some(fetch) = limit else {
            return Ok(None);
        };
        let input = self.lower(&w.input)?;
        let in_schema = w.input.schema();
        let parts = params
            .partition_by
            .iter()
            .map(|e| compile(e, in_schema))
            .collect::<Result<Vec<_>>>()?;
        let part_types = params
            .partition_by
            .iter()
            .map(|e| e.get_type(in_schema))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let keys = self.sort_keys(&params.order_by, in_schema)?;
        let text = format!(
            "row_number() partition by [{}] order by [{}] <= {fetch}",
            params
                .partition_by
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            params
                .order_by
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let out: SchemaRef = Arc::new(w.schema.as_arrow().clone());
        let op = TopN::new(
            parts,
            part_types,
            keys,
            0,
            fetch,
            true,
            Arc::new(in_schema.as_arrow().clone()),
            out.clone(),
            text,
        )?;
        let mut node = self.op(op, vec![input]);
        for c in rest {
            let pred = compile(&c, &w.schema)?;
            node = self.op(Filter::new(pred, out.clone(), c.to_string()), vec![node]);
        }
        Ok(Some(node))
    }
}

fn split_and<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    if let Expr::BinaryExpr(b) = e
        && b.op == BinOp::And
    {
        split_and(&b.left, out);
        split_and(&b.right, out);
    } else {
        out.push(e);
    }
}

/// `rn <= n`, `rn < n`, `n >= rn`, `n > rn`, `rn = 1`: the number of rows kept.
fn rn_bound(e: &Expr, rn: Option<&datafusion::common::Column>, rn_name: &str) -> Option<usize> {
    let Expr::BinaryExpr(b) = e else { return None };
    let is_rn = |x: &Expr| match x {
        Expr::Column(c) => Some(c) == rn || c.name == rn_name,
        Expr::Cast(c) => {
            matches!(c.expr.as_ref(), Expr::Column(col) if Some(col) == rn || col.name == rn_name)
        }
        _ => false,
    };
    let lit = |x: &Expr| -> Option<i64> {
        match x {
            Expr::Literal(v, _) => scalar_i64(v),
            Expr::Cast(c) => match c.expr.as_ref() {
                Expr::Literal(v, _) => scalar_i64(v),
                _ => None,
            },
            _ => None,
        }
    };
    let (op, n) = if is_rn(&b.left) {
        (b.op, lit(&b.right)?)
    } else if is_rn(&b.right) {
        (b.op.swap()?, lit(&b.left)?)
    } else {
        return None;
    };
    let n = match op {
        BinOp::LtEq => n,
        BinOp::Lt => n - 1,
        BinOp::Eq if n == 1 => 1,
        _ => return None,
    };
    Some(n.max(0) as usize)
}

fn scalar_i64(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::Int64(Some(n)) => Some(*n),
        ScalarValue::Int32(Some(n)) => Some(*n as i64),
        ScalarValue::UInt64(Some(n)) => Some(*n as i64),
        ScalarValue::Int16(Some(n)) => Some(*n as i64),
        ScalarValue::Int8(Some(n)) => Some(*n as i64),
        ScalarValue::UInt32(Some(n)) => Some(*n as i64),
        _ => None,
    }
}

/// Rows that exist from the start (a query without FROM, or VALUES): emitted once, in the
/// first epoch.
struct Constant {
    rows: Option<Changelog>,
    schema: SchemaRef,
}

impl Operator for Constant {
    fn name(&self) -> &'static str {
        "Constant"
    }
    fn details(&self) -> String {
        String::new()
    }
    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn on_changes(&mut self, _port: usize, _input: Changelog) -> Result<Vec<Changelog>> {
        Ok(vec![])
    }
    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        Ok(self.rows.take().into_iter().collect())
    }
}

/// Unused-import guard for helper types kept for later operators.
#[allow(dead_code)]
fn _types(_: HashMap<u32, Int64Array>) {}
