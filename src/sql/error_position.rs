//! Where in a statement's text an error points, as Postgres reports it (the `P` field of
//! ErrorResponse: psql prints `LINE 1: ...` and a caret, JDBC `Position: n`).
//!
//! Postgres knows the place from its parse tree. Here the error names what it is about
//! (`column "nme" does not exist`, `relation "x" does not exist`, `function f(integer)
//! does not exist`, `invalid input syntax for type integer: "abc"`), and the statement's
//! tokens are searched for it: the place is given only when exactly one token (or one
//! `qualifier.name` pair, one `name(` call, one literal) matches, so a caret is never at
//! the wrong one of two. Syntax errors carry their place from the parser already
//! (`sql/parser.rs`).

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::error::{WeirError, sqlstate};

/// What an error is about, as it can be found among the tokens.
#[derive(Debug, PartialEq)]
enum Target {
    /// an identifier, `qualifier.name` when qualified
    Name {
        qualifier: Option<String>,
        name: String,
    },
    /// a function's name followed by `(`
    Call(String),
    /// a quoted literal's value
    Literal(String),
    /// a quoted literal that is no JSON, for this reason (Postgres' message names no value)
    BadJson(String),
    /// a number written as it is (`ORDER BY 5`)
    Number(String),
    /// an operator's symbol (`operator does not exist: integer = text`)
    Operator(String),
    /// a subquery's `(SELECT`
    Subquery,
}

fn target(e: &WeirError, is_dml: bool) -> Option<Target> {
    let m = e.message.as_str();
    let name = |text: &str| {
        let (qualifier, name) = match text.rsplit_once('.') {
            Some((q, n)) => (Some(q.to_owned()), n.to_owned()),
            None => (None, text.to_owned()),
        };
        Target::Name { qualifier, name }
    };
    match e.code {
        // (an INSERT's or UPDATE's target column)
        // (Postgres places it in an INSERT or UPDATE, not in ALTER TABLE)
        sqlstate::UNDEFINED_COLUMN if m.contains("\" of relation \"") => {
            if !is_dml {
                return None;
            }
            let rest = m.strip_prefix("column \"")?;
            let (column, _) = rest.split_once("\" of relation \"")?;
            Some(Target::Name {
                qualifier: None,
                name: column.to_owned(),
            })
        }
        sqlstate::UNDEFINED_COLUMN => {
            let rest = m.strip_prefix("column ")?.strip_suffix(" does not exist")?;
            match rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
                Some(unqualified) => Some(Target::Name {
                    qualifier: None,
                    name: unqualified.to_owned(),
                }),
                None => Some(name(rest)),
            }
        }
        sqlstate::UNDEFINED_TABLE => {
            let rest = m
                .strip_prefix("relation \"")?
                .strip_suffix("\" does not exist")?;
            Some(Target::Name {
                qualifier: None,
                name: rest.to_owned(),
            })
        }
        sqlstate::FEATURE_NOT_SUPPORTED if m == "cannot use subquery in DEFAULT expression" => {
            Some(Target::Subquery)
        }
        // a type named in a cast or a column definition (`type "mood[]"`: at `mood`)
        sqlstate::UNDEFINED_OBJECT if e.undefined_type_name().is_some() => Some(Target::Name {
            qualifier: None,
            name: e.undefined_type_name()?.trim_end_matches("[]").to_owned(),
        }),
        sqlstate::AMBIGUOUS_COLUMN => {
            let rest = m
                .strip_prefix("column reference \"")?
                .strip_suffix("\" is ambiguous")?;
            Some(name(rest))
        }
        sqlstate::GROUPING_ERROR => {
            let rest = m.strip_prefix("column \"")?;
            let (column, _) = rest.split_once("\" must appear in the GROUP BY clause")?;
            Some(name(column))
        }
        sqlstate::UNDEFINED_FUNCTION if m.starts_with("operator does not exist: ") => {
            // `integer = text`: the symbol between the two type names (a prefix
            // operator's message has one name)
            let words: Vec<&str> = m["operator does not exist: ".len()..].split(' ').collect();
            let op = words
                .iter()
                .find(|w| !w.is_empty() && w.chars().all(|c| "+-*/<>=~!@#%^&|`?".contains(c)))?;
            Some(Target::Operator((*op).to_owned()))
        }
        sqlstate::UNDEFINED_FUNCTION | sqlstate::AMBIGUOUS_FUNCTION => {
            let rest = m.strip_prefix("function ")?;
            let f = match rest.split_once('(') {
                Some((f, _)) => f,
                None => rest.strip_suffix(" does not exist")?,
            };
            Some(Target::Call(f.rsplit('.').next().unwrap_or(f).to_owned()))
        }
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE => {
            // `'9999999999'::int`
            let rest = m.strip_prefix("value \"")?;
            let (value, _) = rest.split_once("\" is out of range for type ")?;
            Some(Target::Literal(value.to_owned()))
        }
        "42P10" => {
            let n = m
                .strip_prefix("ORDER BY position ")?
                .strip_suffix(" is not in select list")?;
            Some(Target::Number(n.to_owned()))
        }
        sqlstate::INVALID_TEXT_REPRESENTATION if m == "invalid input syntax for type json" => {
            Some(Target::BadJson(e.detail.clone()?))
        }
        sqlstate::INVALID_TEXT_REPRESENTATION
        | sqlstate::INVALID_DATETIME_FORMAT
        | sqlstate::DATETIME_FIELD_OVERFLOW => {
            let (_, value) = m.split_once(": \"")?;
            let value = value.strip_suffix('"')?;
            let known = m.starts_with("invalid input syntax for type ")
                || m.starts_with("malformed array literal")
                || m.starts_with("date/time field value out of range")
                || m.starts_with("invalid value for ")
                || m.starts_with("invalid cidr value");
            known.then(|| Target::Literal(value.to_owned()))
        }
        _ => None,
    }
}

/// Whether a token is the identifier `name` as Postgres folds it (an unquoted word in any
/// case; a quoted one exactly).
fn is_name(t: &Token, name: &str) -> bool {
    match t {
        Token::Word(w) if w.quote_style.is_some() => w.value == name,
        Token::Word(w) => w.value.to_lowercase() == name,
        _ => false,
    }
}

/// `e` pointing at its place in `text` (`offset` characters into the query string), when
/// it has none yet and exactly one place is what it names; a relation written with its
/// schema is named so (`relation "public.t" does not exist`), as Postgres names it.
pub fn place(e: WeirError, text: &str, offset: usize) -> WeirError {
    if e.position.is_some() {
        return e;
    }
    match locate(&e, text) {
        Some((p, Some((code, message)))) => {
            let e = WeirError { code, message, ..e };
            match p {
                Some(p) => e.with_position(offset + p),
                None => e,
            }
        }
        Some((Some(p), None)) => e.with_position(offset + p),
        _ => e,
    }
}

/// The character (from 1) of `text` the error `e` points at, when exactly one place in
/// the text is what the error names; and the message as Postgres words it where that
/// depends on the text: a relation written `schema.name` is named so, a column qualified
/// by a rewrite (`rewrite.rs`, an ORDER BY expression's name) as it was written.
/// Where an error points (None: nowhere, as Postgres places no error of the statement)
/// and its message as Postgres words it (None: as it is).
type Located = (Option<usize>, Option<(&'static str, String)>);

fn locate(e: &WeirError, text: &str) -> Option<Located> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let first_word = words.first().cloned().unwrap_or_default();
    // Postgres places no error of these utility statements (their names are looked up
    // without a place in the text)
    let second = words.get(1).cloned().unwrap_or_default();
    // (but the type of a column ALTER TABLE adds, as in CREATE TABLE)
    let added_column_type = e.code == sqlstate::UNDEFINED_OBJECT
        && first_word == "alter"
        && words.iter().any(|w| w == "add")
        && !words.iter().any(|w| w == "type");
    // (their messages are still worded as Postgres words them: an unknown function's
    // arguments)
    let unplaced = (matches!(
        first_word.as_str(),
        "alter" | "truncate" | "comment" | "grant" | "revoke" | "drop"
    ) && !added_column_type)
        || (first_word == "create" && matches!(second.as_str(), "index" | "unique"));
    if unplaced && e.code != sqlstate::UNDEFINED_FUNCTION {
        return None;
    }
    // a type named by CREATE DOMAIN or CREATE TYPE is not placed either
    if e.code == sqlstate::UNDEFINED_OBJECT
        && first_word == "create"
        && matches!(second.as_str(), "domain" | "type")
    {
        return None;
    }
    // nor of COPY of a table (COPY (query) TO places an error of its query)
    if first_word == "copy"
        && !text
            .trim_start()
            .get(4..)
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    {
        return None;
    }
    let target = target(
        e,
        matches!(first_word.as_str(), "insert" | "update" | "with"),
    )?;
    let tokens: Vec<TokenWithSpan> = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize_with_location()
        .ok()?
        .into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let next = |i: usize| tokens.get(i).map(|t| &t.token);
    let after_period = |i: usize| i > 0 && tokens[i - 1].token == Token::Period;
    let matches = |target: &Target| -> Vec<usize> {
        (0..tokens.len())
            .filter(|&i| {
                let t = &tokens[i].token;
                match target {
                    // `q.name`, pointed at from q
                    Target::Name {
                        qualifier: Some(q),
                        name,
                    } => {
                        is_name(t, q)
                            && next(i + 1) == Some(&Token::Period)
                            && next(i + 2).is_some_and(|n| is_name(n, name))
                    }
                    // a name that is no call, no qualifier and (but for a relation, which
                    // may be schema-qualified) not qualified itself
                    Target::Name {
                        qualifier: None,
                        name,
                    } => {
                        is_name(t, name)
                            && (!matches!(next(i + 1), Some(Token::LParen | Token::Period))
                                || (e.code == sqlstate::UNDEFINED_OBJECT
                                    && next(i + 1) == Some(&Token::LParen)))
                            && (!after_period(i)
                                || matches!(
                                    e.code,
                                    sqlstate::UNDEFINED_TABLE | sqlstate::UNDEFINED_OBJECT
                                ))
                    }
                    Target::Call(f) => is_name(t, f) && next(i + 1) == Some(&Token::LParen),
                    Target::BadJson(why) => matches!(
                        t,
                        Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s)
                            if crate::sql::jsonb::check(s)
                                .is_err_and(|e| e.detail.as_deref() == Some(why.as_str()))
                    ),
                    Target::Number(v) => matches!(t, Token::Number(n, _) if n == v),
                    Target::Subquery => {
                        *t == Token::LParen
                            && matches!(next(i + 1), Some(Token::Word(w)) if w.keyword == Keyword::SELECT)
                    }
                    Target::Operator(op) => {
                        !matches!(t, Token::Word(_) | Token::Number(..)) && t.to_string() == *op
                    }
                    Target::Literal(v) => matches!(
                        t,
                        Token::SingleQuotedString(s)
                        | Token::EscapedStringLiteral(s)
                        | Token::NationalStringLiteral(s) if s == v
                    ),
                }
            })
            .collect()
    };
    let mut found = matches(&target);
    let mut message = None;
    // a column named `t.id` written `id` (not where it names an output: `AS id`)
    if found.is_empty()
        && let Target::Name {
            qualifier: Some(_),
            name,
        } = &target
    {
        let after_as = |i: usize| {
            i > 0 && matches!(&tokens[i - 1].token, Token::Word(w) if w.keyword == Keyword::AS)
        };
        found = matches(&Target::Name {
            qualifier: None,
            name: name.clone(),
        });
        let output_name = found.iter().any(|&i| after_as(i));
        found.retain(|&i| !after_as(i));
        // (an output name qualified by the ORDER BY rewrite: no such column; DataFusion
        // may find it missing from GROUP BY before it finds it missing)
        if e.code == sqlstate::UNDEFINED_COLUMN
            || (e.code == sqlstate::GROUPING_ERROR && output_name)
        {
            message = Some((
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{name}\" does not exist"),
            ));
        }
    }
    let [mut i] = found[..] else {
        return None;
    };
    // a schema-qualified relation or type is pointed at from its schema, and named so
    if matches!(
        e.code,
        sqlstate::UNDEFINED_TABLE | sqlstate::UNDEFINED_OBJECT
    ) && after_period(i)
        && i >= 2
        && let (Token::Word(schema), Token::Word(name)) = (&tokens[i - 2].token, &tokens[i].token)
    {
        let written = format!("{}.{}", folded(schema), folded(name));
        message = Some(match e.code {
            sqlstate::UNDEFINED_TABLE => (e.code, format!("relation \"{written}\" does not exist")),
            _ => {
                let array = match e.undefined_type_name() {
                    Some(n) if n.ends_with("[]") => "[]",
                    _ => "",
                };
                (e.code, format!("type \"{written}{array}\" does not exist"))
            }
        });
        i -= 2;
    }
    // an unknown function DataFusion named without its arguments' types: Postgres' types
    // of literal arguments (`f()`, `f(1, 'a')`: `integer, unknown`)
    if e.code == sqlstate::UNDEFINED_FUNCTION
        && let Target::Call(f) = &target
        && e.message.starts_with(&format!("function {f}"))
        && let Some(types) = literal_argument_types(&tokens[i + 1..])
    {
        message = Some((
            e.code,
            format!("function {f}({}) does not exist", types.join(", ")),
        ));
    }
    let first = &tokens[i];
    // (sqlparser counts columns in characters, from 1)
    let start = first.span.start;
    let before: usize = text
        .split('\n')
        .take(start.line.saturating_sub(1) as usize)
        .map(|l| l.chars().count() + 1)
        .sum();
    if unplaced {
        return message.is_some().then_some((None, message));
    }
    Some((Some(before + start.column as usize), message))
}

/// The types Postgres gives the arguments of a call (`tokens` from its `(`) when each is
/// one literal: a number (`integer`, `bigint` past 32 bits, `numeric` with a point or
/// past 64), a quoted string or NULL (`unknown`), TRUE or FALSE (`boolean`). None for
/// anything else.
fn literal_argument_types(tokens: &[TokenWithSpan]) -> Option<Vec<&'static str>> {
    if tokens.first()?.token != Token::LParen {
        return None;
    }
    let mut types = Vec::new();
    let mut i = 1;
    if tokens.get(i)?.token == Token::RParen {
        return Some(types);
    }
    loop {
        let mut t = &tokens.get(i)?.token;
        if *t == Token::Minus {
            i += 1;
            t = &tokens.get(i)?.token;
            if !matches!(t, Token::Number(..)) {
                return None;
            }
        }
        types.push(match t {
            Token::Number(n, _) if n.contains(['.', 'e', 'E']) => "numeric",
            Token::Number(n, _) => match n.parse::<i64>() {
                Ok(v) if i32::try_from(v).is_ok() => "integer",
                Ok(_) => "bigint",
                Err(_) => "numeric",
            },
            Token::SingleQuotedString(_) | Token::EscapedStringLiteral(_) => "unknown",
            Token::Word(w) if w.quote_style.is_none() => match w.keyword {
                Keyword::NULL => "unknown",
                Keyword::TRUE | Keyword::FALSE => "boolean",
                _ => return None,
            },
            _ => return None,
        });
        i += 1;
        match &tokens.get(i)?.token {
            Token::Comma => i += 1,
            Token::RParen => return Some(types),
            _ => return None,
        }
    }
}

/// An identifier as Postgres folds it: unquoted in lower case, quoted as written.
fn folded(w: &datafusion::sql::sqlparser::tokenizer::Word) -> String {
    match w.quote_style {
        Some(_) => w.value.clone(),
        None => w.value.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(code: &'static str, message: &str, text: &str) -> Option<usize> {
        locate(&WeirError::new(code, message), text).and_then(|(p, _)| p)
    }

    #[test]
    fn points_at_the_one_place_named() {
        let col = |m: &str, t: &str| at(sqlstate::UNDEFINED_COLUMN, m, t);
        assert_eq!(
            col("column \"nosuch\" does not exist", "select nosuch from t"),
            Some(8)
        );
        assert_eq!(
            col("column \"nosuch\" does not exist", "select NoSuch from t"),
            Some(8)
        );
        assert_eq!(
            col("column t.x does not exist", "select a,\n  t.x from t"),
            Some(13)
        );
        // twice: no place rather than perhaps the wrong one
        assert_eq!(
            col("column \"x\" does not exist", "select x from t where x > 1"),
            None
        );
        // a string with the name in it is no reference to it
        assert_eq!(
            col("column \"x\" does not exist", "select 'x', x from t"),
            Some(13)
        );
        assert_eq!(
            at(
                sqlstate::UNDEFINED_TABLE,
                "relation \"nosuch\" does not exist",
                "select * from public.nosuch"
            ),
            Some(15)
        );
        assert_eq!(
            at(
                sqlstate::UNDEFINED_FUNCTION,
                "function nofn(integer) does not exist",
                "select nofn(1), nofn"
            ),
            Some(8)
        );
        assert_eq!(
            at(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                "invalid input syntax for type integer: \"abc\"",
                "insert into t values (1, 'abc')"
            ),
            Some(26)
        );
        assert_eq!(
            at(
                sqlstate::GROUPING_ERROR,
                "column \"t.id\" must appear in the GROUP BY clause or be used in an aggregate function",
                "select id from t group by name"
            ),
            Some(8)
        );
        assert_eq!(
            at(
                "42P10",
                "ORDER BY position 5 is not in select list",
                "select a from g order by 1, 5"
            ),
            Some(29)
        );
        // an error that names nothing in the text has no place
        assert_eq!(
            at(sqlstate::DIVISION_BY_ZERO, "division by zero", "select 1/0"),
            None
        );
    }
}
