//! A DataFusion function registered under its own name with a hook around its call, and
//! every other method (name, aliases, signature, typing, simplification, bounds, ordering)
//! DataFusion's own, so that everything recognising the function by name still does. The
//! one way Weir changes what a DataFusion function does at its call: `date_trunc` keeping
//! the infinities (`sql/date_trunc.rs`), the functions whose output size is checked first
//! (`catalog/value_limits.rs`), `ARRAY[...]` typed by its elements (`sql/typed_arrays.rs`).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// What runs in place of the wrapped function's call; `inner` is the function itself.
pub trait CallHook: Debug + PartialEq + Eq + Hash + Send + Sync + 'static {
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue>;
    /// The result's field: the function's own, unless the hook says more about it (its
    /// Postgres type, in the metadata).
    fn return_field(&self, inner: &ScalarUDF, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        inner.return_field_from_args(args)
    }
    /// The types the arguments are coerced to: the function's own, unless the hook reads
    /// them as Postgres does where the function refuses them.
    fn coerce_types(&self, inner: &ScalarUDF, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        inner.coerce_types(arg_types)
    }
}

/// `inner` with `hook` around its call.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Hooked<H> {
    inner: Arc<ScalarUDF>,
    hook: H,
}

impl<H: CallHook> Hooked<H> {
    pub fn udf(inner: Arc<ScalarUDF>, hook: H) -> ScalarUDF {
        ScalarUDF::new_from_impl(Hooked { inner, hook })
    }
}

impl<H: CallHook> ScalarUDFImpl for Hooked<H> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.hook.return_field(&self.inner, args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.hook.coerce_types(&self.inner, arg_types)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }
    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        self.inner.evaluate_bounds(input)
    }
    fn output_ordering(&self, inputs: &[ExprProperties]) -> DfResult<SortProperties> {
        self.inner.output_ordering(inputs)
    }
    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.hook.call(&self.inner, args)
    }
}
