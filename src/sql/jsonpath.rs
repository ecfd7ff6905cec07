//! SQL/JSON path queries over `jsonb`, as Postgres has them: `jsonb_path_exists`,
//! `jsonb_path_match`, `jsonb_path_query` (a set-returning function: a list here, unnested
//! by the rewrite as the other set-returning JSON functions are), `jsonb_path_query_array`,
//! `jsonb_path_query_first`, each `(target, path [, vars [, silent]])`, and the operators
//! `jsonb @? jsonpath` (`jsonb_path_exists` silent) and `jsonb @@ jsonpath`
//! (`jsonb_path_match` silent), which the expression planner maps to these functions.
//!
//! The path language (lax/strict, accessors, filters, arithmetic, item methods) is the
//! `sql-json-path` crate's (RisingWave's implementation, tested against Postgres' own
//! jsonpath regression tests); this module reads each row's document and path, maps the
//! crate's errors to Postgres' SQLSTATEs and writes the results as canonical jsonb text.
//! A `jsonpath` value is its text (a cast to `jsonpath` checks that it parses).
//!
//! The crate walks our own jsonb tree (`sql::jsonb::Node`, through the crate's `Json`
//! traits implemented here), so what a path selects comes back as stored: `1.50` stays
//! `1.50`, keys in Postgres' order. Where it is not Postgres: arithmetic and comparisons
//! see a number as a 64-bit integer or a double (Postgres' are `numeric`), `.**` does not
//! repeat what lax mode reaches twice, and `.datetime()` and the `_tz` functions are not
//! there.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, ListBuilder, StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::TypeSignature;
use sql_json_path::json::{ArrayRef as JsonArray, Json, JsonRef, ObjectRef};
use sql_json_path::{EvalError, JsonPath};

use crate::sql::jsonb::Node;
use crate::sql::pg_functions::{PgFunction, immutable, pg_error};

/// The list `jsonb_path_query` is computed as (the rewrite unnests it).
pub const PATH_QUERY: &str = "weir_jsonb_path_query";
/// A cast to `jsonpath`: the text, checked to parse.
pub const JSONPATH_IN: &str = "weir_jsonpath_in";
/// The `vars` argument the operators `@?` and `@@` pass: no variables given, so each one the
/// path names is JSON null, as in Postgres (`$.a ? (@ > $x)` matches nothing; a function
/// given `vars` without `x` is 42704 instead).
pub const OPERATOR_VARS: &str = "weir_operator_vars";

/// What one function gives for one row's matches.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Exists,
    Match,
    Query,
    Array,
    First,
}

/// The functions of this module.
pub(crate) fn definitions() -> Vec<PgFunction> {
    let args = || TypeSignature::OneOf((2..=4).map(TypeSignature::Any).collect());
    let mut out = Vec::new();
    for (name, kind) in [
        ("jsonb_path_exists", Kind::Exists),
        ("jsonb_path_match", Kind::Match),
        (PATH_QUERY, Kind::Query),
        ("jsonb_path_query_array", Kind::Array),
        ("jsonb_path_query_first", Kind::First),
    ] {
        out.push(immutable(
            name,
            args(),
            move |_| match kind {
                Kind::Exists | Kind::Match => DataType::Boolean,
                Kind::Query => {
                    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
                }
                Kind::Array | Kind::First => DataType::Utf8,
            },
            move |args, rows| path_function(kind, args, rows),
        ));
    }
    out.push(immutable(
        JSONPATH_IN,
        TypeSignature::Any(1),
        |_| DataType::Utf8,
        |args, _| {
            let paths = cast(&args[0], &DataType::Utf8)?;
            for p in paths.as_string::<i32>().iter().flatten() {
                parse(p)?;
            }
            Ok(paths)
        },
    ));
    out
}

/// A path's text parsed, or Postgres' 42601.
fn parse(text: &str) -> DfResult<JsonPath> {
    JsonPath::new(text).map_err(|e| {
        pg_error(
            crate::error::sqlstate::SYNTAX_ERROR,
            format!("syntax error in jsonpath input \"{text}\": {e}"),
        )
    })
}

/// A path evaluation's error with Postgres' SQLSTATE.
fn eval_error(e: EvalError) -> DataFusionError {
    let code = match &e {
        EvalError::NoKey(_) | EvalError::MemberAccess | EvalError::WildcardMemberAccess => "2203A",
        EvalError::ArrayAccess | EvalError::WildcardArrayAccess | EvalError::SizeNotArray => {
            "22039"
        }
        EvalError::ArrayIndexOutOfBounds | EvalError::ArrayIndexOutOfRange => "22033",
        EvalError::NoVariable(_) => "42704",
        EvalError::VarsNotObject => "22023",
        EvalError::KeyValueNotObject => "2203C",
        EvalError::DivisionByZero => "22012",
        EvalError::DoubleOutOfRange => "22003",
        EvalError::InvalidDouble | EvalError::DoubleTypeError | EvalError::MethodNotNumeric(_) => {
            "2203B"
        }
        _ => "22038",
    };
    pg_error(code, e.to_string())
}

/// A jsonb document's text read for the path (22P02 if it is not JSON).
fn document(text: &str) -> DfResult<Node> {
    crate::sql::jsonb::parse(text).map_err(|e| DataFusionError::External(Box::new(e)))
}

/// One match as jsonb text (a number the path computed in its canonical `numeric` text).
fn jsonb_text(v: &Node) -> DfResult<String> {
    let text = crate::sql::jsonb::text_of(v);
    match v {
        Node::Number(_) => {
            crate::sql::jsonb::normalize(&text).map_err(|e| DataFusionError::External(Box::new(e)))
        }
        _ => Ok(text),
    }
}

fn path_function(kind: Kind, args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let text = |i: usize| -> DfResult<Option<StringArray>> {
        match args.get(i) {
            Some(a) => Ok(Some(cast(a, &DataType::Utf8)?.as_string::<i32>().clone())),
            None => Ok(None),
        }
    };
    let (docs, paths, vars) = (text(0)?, text(1)?, text(2)?);
    let (Some(docs), Some(paths)) = (docs, paths) else {
        return Err(pg_error(
            "42883",
            "a jsonpath function takes a target and a path",
        ));
    };
    let silent = match args.get(3) {
        Some(a) => Some(cast(a, &DataType::Boolean)?.as_boolean().clone()),
        None => None,
    };
    // a constant path (the usual case) is parsed once: (its text, the path, the null
    // variables the operators give it)
    let mut parsed: Option<(String, JsonPath, Node)> = None;
    let mut bools = BooleanBuilder::with_capacity(rows);
    let mut texts = StringBuilder::new();
    let mut lists = ListBuilder::new(StringBuilder::new());
    for i in 0..rows {
        let (Some(doc), Some(path)) = (
            docs.is_valid(i).then(|| docs.value(i)),
            paths.is_valid(i).then(|| paths.value(i)),
        ) else {
            push_null(kind, &mut bools, &mut texts, &mut lists);
            continue;
        };
        // a NULL vars or silent argument makes the result NULL (the functions are strict)
        let vars = match &vars {
            Some(a) if a.is_null(i) => {
                push_null(kind, &mut bools, &mut texts, &mut lists);
                continue;
            }
            Some(a) => Some(a.value(i)),
            None => None,
        };
        let silent = match &silent {
            Some(s) if s.is_null(i) => {
                push_null(kind, &mut bools, &mut texts, &mut lists);
                continue;
            }
            Some(s) => s.value(i),
            None => false,
        };
        let (_, jp, nulls) = match &mut parsed {
            Some(p) if p.0 == path => &*p,
            slot => &*slot.insert((path.to_owned(), parse(path)?, null_variables(path))),
        };
        let doc = document(doc)?;
        let given;
        let vars = match vars {
            Some(OPERATOR_VARS) => Some(nulls),
            Some(v) => {
                given = document(v)?;
                Some(&given)
            }
            None => None,
        };
        let found = match vars {
            Some(v) => jp.query_with_vars(&doc, v),
            None => jp.query(&doc),
        };
        let found: Vec<Node> = match found {
            Ok(nodes) => nodes.into_iter().map(|n| n.into_owned()).collect(),
            // silent: the errors Postgres suppresses give no match (NULL for exists/match)
            Err(e) if silent && e.can_silent() => {
                match kind {
                    Kind::Exists | Kind::Match => bools.append_null(),
                    Kind::Query => lists.append(true),
                    Kind::Array => texts.append_value("[]"),
                    Kind::First => texts.append_null(),
                }
                continue;
            }
            Err(e) => return Err(eval_error(e)),
        };
        match kind {
            Kind::Exists => bools.append_value(!found.is_empty()),
            Kind::Match => match found.as_slice() {
                [Node::Bool(b)] => bools.append_value(*b),
                [Node::Null] => bools.append_null(),
                _ if silent => bools.append_null(),
                _ => return Err(eval_error(EvalError::ExpectSingleBoolean)),
            },
            Kind::Query => {
                for v in &found {
                    lists.values().append_value(jsonb_text(v)?);
                }
                lists.append(true);
            }
            Kind::Array => texts.append_value(jsonb_text(&Node::Array(found))?),
            Kind::First => match found.first() {
                Some(v) => texts.append_value(jsonb_text(v)?),
                None => texts.append_null(),
            },
        }
    }
    Ok(match kind {
        Kind::Exists | Kind::Match => Arc::new(bools.finish()),
        Kind::Query => Arc::new(lists.finish()),
        Kind::Array | Kind::First => Arc::new(texts.finish()),
    })
}

/// An object giving JSON null to every variable `path` names (`$x`, `$"x"`).
fn null_variables(path: &str) -> Node {
    let mut vars: Vec<(String, Node)> = Vec::new();
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // a string literal of the path: skipped, escapes included
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'$' => {
                i += 1;
                let start = i;
                if b.get(i) == Some(&b'"') {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    if let Some(name) = path.get(start + 1..i.min(b.len())) {
                        vars.push((name.to_owned(), Node::Null));
                    }
                    i += 1;
                    continue;
                }
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if i > start {
                    vars.push((path[start..i].to_owned(), Node::Null));
                }
            }
            _ => i += 1,
        }
    }
    Node::Object(vars)
}

fn push_null(
    kind: Kind,
    bools: &mut BooleanBuilder,
    texts: &mut StringBuilder,
    lists: &mut ListBuilder<StringBuilder>,
) {
    match kind {
        Kind::Exists | Kind::Match => bools.append_null(),
        Kind::Query => lists.append(false),
        Kind::Array | Kind::First => texts.append_null(),
    }
}

// The crate's view of our jsonb tree: numbers are read as 64-bit integers or doubles for
// arithmetic and comparisons; what a path selects is the stored node itself.

impl Json for Node {
    type Borrowed<'a> = &'a Node;

    fn as_ref(&self) -> &Node {
        self
    }

    fn null() -> Self {
        Node::Null
    }

    fn bool(b: bool) -> Self {
        Node::Bool(b)
    }

    fn from_u64(v: u64) -> Self {
        Node::Number(v.to_string())
    }

    fn from_i64(v: i64) -> Self {
        Node::Number(v.to_string())
    }

    fn from_f64(v: f64) -> Self {
        // (non-finite numbers are no JSON: the crate computes only finite ones into values)
        serde_json::Number::from_f64(v)
            .map(|n| Node::Number(n.to_string()))
            .unwrap_or(Node::Null)
    }

    fn from_number(n: serde_json::Number) -> Self {
        Node::Number(n.to_string())
    }

    fn from_string(s: &str) -> Self {
        Node::Str(s.to_owned())
    }

    fn object<'a, I: IntoIterator<Item = (&'a str, Self)>>(i: I) -> Self {
        let mut fields: Vec<(String, Node)> =
            i.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        crate::sql::jsonb::key_order(&mut fields);
        Node::Object(fields)
    }
}

/// An array of the tree, borrowed.
#[derive(Clone, Copy)]
pub(crate) struct Items<'a>(&'a [Node]);

/// An object of the tree, borrowed (its keys unique, in Postgres' order).
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a>(&'a [(String, Node)]);

impl<'a> JsonRef<'a> for &'a Node {
    type Owned = Node;
    type Array = Items<'a>;
    type Object = Fields<'a>;

    fn to_owned(self) -> Node {
        self.clone()
    }

    fn null() -> Self {
        &Node::Null
    }

    fn as_bool(self) -> Option<bool> {
        match self {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn as_number(self) -> Option<serde_json::Number> {
        match self {
            Node::Number(text) => text
                .parse::<i64>()
                .map(serde_json::Number::from)
                .ok()
                .or_else(|| {
                    text.parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                }),
            _ => None,
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_array(self) -> Option<Items<'a>> {
        match self {
            Node::Array(items) => Some(Items(items)),
            _ => None,
        }
    }

    fn as_object(self) -> Option<Fields<'a>> {
        match self {
            Node::Object(fields) => Some(Fields(fields)),
            _ => None,
        }
    }

    fn is_null(self) -> bool {
        matches!(self, Node::Null)
    }
}

impl<'a> JsonArray<'a> for Items<'a> {
    type JsonRef = &'a Node;

    fn len(self) -> usize {
        self.0.len()
    }

    fn get(self, index: usize) -> Option<&'a Node> {
        self.0.get(index)
    }

    fn list(self) -> Vec<&'a Node> {
        self.0.iter().collect()
    }
}

impl<'a> ObjectRef<'a> for Fields<'a> {
    type JsonRef = &'a Node;

    fn len(self) -> usize {
        self.0.len()
    }

    fn get(self, key: &str) -> Option<&'a Node> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn list(self) -> Vec<(&'a str, &'a Node)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v)).collect()
    }

    fn list_value(self) -> Vec<&'a Node> {
        self.0.iter().map(|(_, v)| v).collect()
    }
}
