//! Planning: from parsed statements to what runs. DataFusion binds and optimizes; this
//! module lowers what is Weir-specific (DML onto the table store now; dataflow graphs for
//! materialized views later).

pub mod apply;
pub mod asof;
pub mod dml;
pub mod insert_values;
pub mod match_recognize;
pub mod shared;
pub mod view;

/// An expression with its types coerced and simplified, as DataFusion's analyzer and
/// optimizer leave a planned query's (some functions, e.g. `coalesce`, only run once
/// simplified): for expressions made physical without a plan around them.
pub fn coerced_and_simplified(
    expr: datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> crate::error::Result<datafusion::logical_expr::Expr> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    let s = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(std::sync::Arc::new(schema.clone()))
            .build(),
    );
    let e = s.coerce(expr, schema)?;
    Ok(s.simplify(e)?)
}
