//! `array_agg(x)` and `ARRAY[x, ...]` typed as Postgres types them: an array of `x`'s own
//! type. (`ARRAY[...]` is DataFusion's `make_array` with a hook, `sql/hooked.rs`, typing its
//! result the same way; `catalog/pg_semantics.rs` puts it in place of the SQL planner's.)
//!
//! `array_agg(x)`: DataFusion's
//! `array_agg` (which does all the work: ORDER BY, DISTINCT, FILTER, its groups
//! accumulator) makes a list of the Arrow type alone, so `array_agg(uuid)`,
//! `array_agg(jsonb)` or `array_agg(varchar)` came back as `text[]` (psycopg handing out
//! strings where Postgres gives UUIDs and dicts). Here the result field says the array
//! type (`uuid[]`) in its metadata ([`crate::sql::types::PG_TYPE_KEY`], where every Weir
//! type that Arrow alone cannot tell is kept); the values are untouched (the element
//! field inside the list stays as DataFusion makes it, so the list's Arrow type does not
//! change).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Expr, GroupsAccumulator, Operator,
    ReturnFieldArgs, ReversedUDAF, ScalarFunctionArgs, ScalarUDF, SetMonotonicity, Signature,
};

use crate::sql::hooked::{CallHook, Hooked};
use crate::sql::types::{PG_TYPE_KEY, SqlType, field_sql_type};

/// DataFusion's `array_agg`, with its result typed by its argument's Postgres type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgArrayAgg {
    inner: Arc<AggregateUDF>,
}

impl PgArrayAgg {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(PgArrayAgg {
            inner: datafusion::functions_aggregate::array_agg::array_agg_udaf(),
        })
    }

    fn wrap(inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
        Arc::new(PgArrayAgg {
            inner: Arc::new(AggregateUDF::new_from_shared_impl(inner)),
        })
    }
}

/// The array type of an element field whose Postgres type its metadata says (`uuid` →
/// `uuid[]`); None where the Arrow type says it all.
fn array_type_name(element: &Field) -> Option<String> {
    element.metadata().get(PG_TYPE_KEY)?;
    let t = field_sql_type(element)?;
    Some(SqlType::Array(Box::new(t)).display_name())
}

/// `field` saying it is an array of `element`'s Postgres type, where that type is one only
/// the metadata tells.
fn typed_by(field: FieldRef, element: Option<&FieldRef>) -> FieldRef {
    let Some(name) = element.and_then(|f| array_type_name(f)) else {
        return field;
    };
    let mut meta = field.metadata().clone();
    meta.insert(PG_TYPE_KEY.to_owned(), name);
    Arc::new(field.as_ref().clone().with_metadata(meta))
}

/// DataFusion's `make_array` (`ARRAY[...]`), its result typed by its elements.
pub fn make_array() -> Arc<ScalarUDF> {
    static TYPED: std::sync::OnceLock<Arc<ScalarUDF>> = std::sync::OnceLock::new();
    TYPED
        .get_or_init(|| {
            Arc::new(Hooked::udf(
                datafusion::functions_nested::make_array::make_array_udf(),
                ElementTyped,
            ))
        })
        .clone()
}

/// `ARRAY[a, b]`: typed by its elements' fields when they all say the same Postgres type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ElementTyped;

impl CallHook for ElementTyped {
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        inner.invoke_with_args(args)
    }
    fn return_field(&self, inner: &ScalarUDF, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let first = args.arg_fields.first().cloned();
        let declared = |f: &FieldRef| f.metadata().get(PG_TYPE_KEY).cloned();
        let same = args
            .arg_fields
            .iter()
            .all(|f| declared(f) == first.as_ref().and_then(declared));
        let element = first.filter(|_| same);
        Ok(typed_by(
            inner.return_field_from_args(args)?,
            element.as_ref(),
        ))
    }
    /// Text elements beside elements of one other type are read as that type, as Postgres
    /// reads an untyped literal beside typed ones (`ARRAY[d, '2030-01-01']` of a date `d`),
    /// where DataFusion finds no common type.
    fn coerce_types(&self, inner: &ScalarUDF, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        inner.coerce_types(arg_types).or_else(|e| {
            let text = |t: &DataType| {
                matches!(
                    t,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
                )
            };
            let mut typed = arg_types.iter().filter(|t| !text(t));
            match typed.next() {
                Some(t) if typed.all(|x| x == t) => Ok(vec![t.clone(); arg_types.len()]),
                _ => Err(e),
            }
        })
    }
}

impl AggregateUDFImpl for PgArrayAgg {
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
    fn return_field(&self, arg_fields: &[FieldRef]) -> DfResult<FieldRef> {
        let field = self.inner.inner().return_field(arg_fields)?;
        Ok(typed_by(field, arg_fields.first()))
    }
    fn accumulator(&self, acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        self.inner.accumulator(acc_args)
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.inner().schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.inner().human_display(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.inner().display_name(params)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }
    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> DfResult<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(self.inner.inner())
            .with_beneficial_ordering(beneficial_ordering)?
            .map(Self::wrap))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }
    fn simplify(
        &self,
    ) -> Option<datafusion::logical_expr::function::AggregateFunctionSimplification> {
        self.inner.simplify()
    }
    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> DfResult<Option<Expr>> {
        self.inner
            .inner()
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.inner().reverse_expr() {
            ReversedUDAF::Reversed(r) => ReversedUDAF::Reversed(Arc::new(
                AggregateUDF::new_from_shared_impl(Self::wrap(Arc::clone(r.inner()))),
            )),
            other => other,
        }
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.inner().supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.inner().supports_within_group_clause()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}
