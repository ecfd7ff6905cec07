//! Postgres' enum support functions: `enum_first(x)`, `enum_last(x)`, `enum_range(x)` and
//! `enum_range(a, b)`, whose argument's value does not matter, only its enum type (usually
//! `NULL::mood`). The type comes from the argument's field (`sql::types::ENUM_KEY`), so the
//! answer is known without reading any row.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::sql::types::{EnumType, SqlType, field_enum_type};

#[derive(Debug, PartialEq, Eq, Hash)]
struct EnumFunction {
    name: &'static str,
    signature: Signature,
}

fn not_an_enum(name: &str) -> DataFusionError {
    DataFusionError::External(Box::new(crate::error::WeirError::new(
        crate::error::sqlstate::UNDEFINED_FUNCTION,
        format!("function {name} needs an argument of an enum type (such as NULL::mood)"),
    )))
}

fn label_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

impl EnumFunction {
    fn enum_of(&self, fields: &[FieldRef]) -> DfResult<EnumType> {
        fields
            .iter()
            .find_map(|f| field_enum_type(f))
            .ok_or_else(|| not_an_enum(self.name))
    }
}

impl ScalarUDFImpl for EnumFunction {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(match self.name {
            "enum_range" => label_list(),
            _ => DataType::Utf8,
        })
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let t = self.enum_of(args.arg_fields)?;
        Ok(Arc::new(match self.name {
            "enum_range" => Field::new(self.name, label_list(), true),
            _ => SqlType::Enum(t).field(self.name, true),
        }))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let t = self.enum_of(&args.arg_fields)?;
        let label = |v: &ColumnarValue| -> DfResult<Option<String>> {
            let ColumnarValue::Scalar(s) = v else {
                return Err(DataFusionError::NotImplemented(format!(
                    "{} over a column: give it constants (NULL::type, 'label'::type)",
                    self.name
                )));
            };
            Ok(match s {
                ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                    v.clone()
                }
                _ => None,
            })
        };
        Ok(ColumnarValue::Scalar(match self.name {
            "enum_first" => ScalarValue::Utf8(t.labels.first().cloned()),
            "enum_last" => ScalarValue::Utf8(t.labels.last().cloned()),
            _ => {
                // enum_range(x): all; enum_range(a, b): a..=b, a NULL end open
                let pos = |l: Option<String>| l.and_then(|l| t.labels.iter().position(|x| *x == l));
                let (from, to) = match args.args.as_slice() {
                    [a, b] => (
                        pos(label(a)?).unwrap_or(0),
                        pos(label(b)?).map_or(t.labels.len(), |p| p + 1),
                    ),
                    _ => (0, t.labels.len()),
                };
                let mut b = ListBuilder::new(StringBuilder::new());
                for l in t.labels.get(from..to.max(from)).unwrap_or_default() {
                    b.values().append_value(l);
                }
                b.append(true);
                let list: ArrayRef = Arc::new(b.finish());
                ScalarValue::try_from_array(&list, 0)?
            }
        }))
    }
}

pub fn register(ctx: &SessionContext) {
    for (name, n) in [
        ("enum_first", vec![1]),
        ("enum_last", vec![1]),
        ("enum_range", vec![1, 2]),
    ] {
        let signature = Signature::one_of(
            n.into_iter().map(TypeSignature::Any).collect(),
            Volatility::Immutable,
        );
        ctx.register_udf(ScalarUDF::new_from_impl(EnumFunction { name, signature }));
    }
}
