//! Postgres' JSON operators on `jsonb` (text holding JSON): `->` (field or element, as
//! jsonb), `->>` (as text), `#>` and `#>>` (by path, `'{a,0,b}'`). The query rewriter turns
//! the operators into calls of these functions (`weir_json_get` and friends).
//!
//! Like Postgres: a missing key, an index out of range or a non-container gives NULL; a
//! negative index counts from the end; `->>` of a JSON string is the string itself, of
//! JSON null is SQL NULL; a jsonb result is in its canonical form (`[1, 2]`, `1.50` kept),
//! a `json` one (the operators on a `json` value) as its document writes it.
//! A value that is not valid JSON is an error (22P02), as a bad jsonb literal would be.
//! Each row's document is parsed ([`crate::sql::jsonb`]) for each call.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::SessionContext;

use crate::sql::jsonb::Step;
use crate::sql::types::{PG_TYPE_KEY, SqlType, field_sql_type};

/// (function name, by path, result as text)
pub const FUNCTIONS: [(&str, bool, bool); 4] = [
    ("weir_json_get", false, false),
    ("weir_json_get_text", false, true),
    ("weir_json_path", true, false),
    ("weir_json_path_text", true, true),
];

pub fn register(ctx: &SessionContext) {
    for (name, path, text) in FUNCTIONS {
        ctx.register_udf(ScalarUDF::new_from_impl(JsonFn {
            name,
            path,
            text,
            signature: Signature::any(2, Volatility::Immutable),
        }));
    }
}

/// `weir_json_get` (`doc -> key`), for the planner of jsonb subscripts (`doc['key']`).
pub fn json_get() -> ScalarUDF {
    let (name, path, text) = FUNCTIONS[0];
    ScalarUDF::new_from_impl(JsonFn {
        name,
        path,
        text,
        signature: Signature::any(2, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonFn {
    name: &'static str,
    path: bool,
    text: bool,
    signature: Signature,
}

impl ScalarUDFImpl for JsonFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let f = Field::new(self.name, DataType::Utf8, true);
        // `json -> k` is json, `jsonb -> k` jsonb
        let ty = match args.arg_fields.first().map(|f| field_sql_type(f)) {
            Some(Some(SqlType::Json)) => SqlType::Json,
            _ => SqlType::Jsonb,
        };
        Ok(Arc::new(if self.text {
            f
        } else {
            f.with_metadata(HashMap::from([(PG_TYPE_KEY.to_owned(), ty.display_name())]))
        }))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { args.number_rows };
        let docs = args.args[0].to_array(n)?;
        let docs = datafusion::arrow::compute::cast(&docs, &DataType::Utf8)?;
        let docs = docs.as_string::<i32>();
        // a constant key (the usual `doc -> 'field'`) is read once
        let fixed = match &args.args[1] {
            ColumnarValue::Scalar(s) => Some(self.steps(&s.to_array()?, 0)?),
            ColumnarValue::Array(_) => None,
        };
        let keys: ArrayRef = args.args[1].to_array(n)?;
        // a `json` document is cut as written; a `jsonb` one is in its canonical form
        let json = args
            .arg_fields
            .first()
            .is_some_and(|f| field_sql_type(f) == Some(SqlType::Json));
        let get = match json {
            true => crate::sql::jsonb::get_json,
            false => crate::sql::jsonb::get,
        };
        let mut out = StringBuilder::with_capacity(n, n * 8);
        for i in 0..n {
            let row_steps;
            let steps = match &fixed {
                Some(s) => s.as_ref(),
                None => {
                    row_steps = self.steps(&keys, i)?;
                    row_steps.as_ref()
                }
            };
            let (true, Some(steps)) = (docs.is_valid(i), steps) else {
                out.append_null();
                continue;
            };
            let found = get(docs.value(i), steps, self.text)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            out.append_option(found);
        }
        let a: ArrayRef = Arc::new(out.finish());
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&a, 0)?)
        } else {
            ColumnarValue::Array(a)
        })
    }
}

impl JsonFn {
    /// The lookup steps of row `i` (None: a NULL key).
    fn steps(&self, keys: &ArrayRef, i: usize) -> DfResult<Option<Vec<Step>>> {
        if keys.is_null(i) {
            return Ok(None);
        }
        let text = |a: &ArrayRef| -> DfResult<String> {
            let s = datafusion::arrow::compute::cast(&a.slice(i, 1), &DataType::Utf8)?;
            Ok(s.as_string::<i32>().value(0).to_owned())
        };
        Ok(Some(match (self.path, keys.data_type()) {
            // a text[], or an array literal's text (`'{a,0,b}'`)
            (true, _) => crate::sql::pg_functions::text_list_at(keys, i)?
                .iter()
                .map(|s| Step::of(s))
                .collect(),
            (false, t) if t.is_integer() => {
                let s = text(keys)?;
                vec![Step::Index(s.parse().unwrap_or(i64::MAX))]
            }
            (false, _) => vec![Step::Key(text(keys)?)],
        }))
    }
}
