//! Postgres' `void`, what `pg_sleep`, `pg_notify`, `pg_advisory_lock` and
//! `pg_advisory_unlock_all` return: empty texts whose field names the type `void`
//! ([`crate::sql::types::PG_TYPE_KEY`]). A client gets the type's OID (2278) and an empty
//! value, not NULL (`IS NULL` is false, `::text` is `''`); `pg_typeof` says `void`.
//! [`void`] wraps a function called for its effect (its own result is dropped).

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

use crate::sql::types::{PG_TYPE_KEY, SqlType};

#[derive(Debug, PartialEq, Eq, Hash)]
struct Void {
    inner: ScalarUDF,
}

impl ScalarUDFImpl for Void {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(std::sync::Arc::new(
            Field::new(self.name(), DataType::Utf8, false)
                .with_metadata([(PG_TYPE_KEY.to_owned(), SqlType::Void.display_name())].into()),
        ))
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        // (the inner function answers its own type, checked against this field)
        args.return_field = std::sync::Arc::new(Field::new(self.name(), DataType::Null, true));
        self.inner.invoke_with_args(args)?;
        Ok(ColumnarValue::Array(std::sync::Arc::new(
            StringArray::from_iter_values(std::iter::repeat_n("", rows)),
        )))
    }
}

/// `inner` (a function called for its effect) typed `void`.
pub fn void(inner: ScalarUDF) -> ScalarUDF {
    ScalarUDF::new_from_impl(Void { inner })
}
