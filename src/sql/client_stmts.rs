//! Statements clients send that are not queries: `SUBSCRIBE`, cursors (`DECLARE`, `FETCH`,
//! `CLOSE`), `COPY`, and savepoints. Parsed here from sqlparser's tokens; run by the engine
//! and the wire handler.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{Result, WeirError};
use crate::sql::parser::{normalize_ident, parse_with_options, relation_name, syntax_near};

/// `SUBSCRIBE [TO] view [WITH (snapshot = true|false)]`.
#[derive(Debug, Clone)]
pub struct Subscribe {
    pub view: String,
    /// Send the view's rows at the start (default true).
    pub snapshot: bool,
}

/// What a cursor reads.
#[derive(Debug, Clone)]
pub enum CursorQuery {
    Query(Box<ast::Statement>),
    Subscribe(Subscribe),
}

/// `DECLARE name [NO SCROLL] CURSOR [WITH|WITHOUT HOLD] FOR query|SUBSCRIBE ...`.
#[derive(Debug, Clone)]
pub struct Declare {
    pub name: String,
    pub query: CursorQuery,
    pub hold: bool,
}

/// `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] name [WITH (timeout = '1s')]`.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub cursor: String,
    /// `None` for ALL.
    pub count: Option<u64>,
    /// How long a FETCH on a subscription waits for its first row; `None` waits until one
    /// arrives.
    pub timeout: Option<std::time::Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
}

/// The options of a COPY, with Postgres' defaults per format.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub delimiter: u8,
    pub null: String,
    pub header: bool,
    /// `HEADER MATCH`: the header line's names must be the columns'.
    pub header_match: bool,
    pub quote: u8,
    pub escape: u8,
    /// `FORCE_QUOTE (cols) | *` (CSV, TO): non-NULL values of these always quoted.
    pub force_quote: Option<ForceColumns>,
    /// `FORCE_NULL (cols)` (CSV, FROM): a quoted value equal to the NULL string is NULL.
    pub force_null: Vec<String>,
    /// `FORCE_NOT_NULL (cols)` (CSV, FROM): no value is NULL, an empty one is ''.
    pub force_not_null: Vec<String>,
}

/// The columns a FORCE option names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceColumns {
    All,
    Columns(Vec<String>),
}

impl ForceColumns {
    pub fn includes(&self, column: &str) -> bool {
        match self {
            ForceColumns::All => true,
            ForceColumns::Columns(c) => c.iter().any(|x| x == column),
        }
    }
}

impl CopyOptions {
    fn defaults(format: CopyFormat) -> CopyOptions {
        match format {
            CopyFormat::Text => CopyOptions {
                format,
                delimiter: b'\t',
                null: "\\N".into(),
                header: false,
                header_match: false,
                quote: b'"',
                escape: b'"',
                force_quote: None,
                force_null: Vec::new(),
                force_not_null: Vec::new(),
            },
            CopyFormat::Csv => CopyOptions {
                format,
                delimiter: b',',
                null: String::new(),
                header: false,
                header_match: false,
                quote: b'"',
                escape: b'"',
                force_quote: None,
                force_null: Vec::new(),
                force_not_null: Vec::new(),
            },
        }
    }
}

/// What a `COPY ... TO STDOUT` reads.
#[derive(Debug, Clone)]
pub enum CopySource {
    Table(String),
    Query(Box<ast::Statement>),
    Subscribe(Subscribe),
}

#[derive(Debug, Clone)]
pub enum Copy {
    /// `COPY table [(cols)] FROM STDIN ...`
    From {
        table: String,
        columns: Vec<String>,
        options: CopyOptions,
    },
    /// `COPY table [(cols)] | (query) TO STDOUT ...`
    To {
        source: CopySource,
        columns: Vec<String>,
        options: CopyOptions,
    },
}

fn word(p: &mut Parser, w: &str) -> bool {
    if matches!(&p.peek_token().token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    {
        p.next_token();
        true
    } else {
        false
    }
}

fn is_word(t: &Token, w: &str) -> bool {
    matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
}

/// Does the statement at the parser start with `SUBSCRIBE`?
pub fn at_subscribe(p: &Parser) -> bool {
    is_word(&p.peek_token().token, "subscribe")
}

/// `SUBSCRIBE [TO] view [WITH (snapshot = ...)]`, at the SUBSCRIBE keyword.
pub fn parse_subscribe(p: &mut Parser) -> Result<Subscribe> {
    if !word(p, "subscribe") {
        return Err(syntax_near(&p.peek_token()));
    }
    let _ = p.parse_keyword(Keyword::TO);
    if p.peek_token().token == Token::LParen {
        return Err(WeirError::not_supported(
            "SUBSCRIBE to a query is not supported; create a materialized view and subscribe to it",
        ));
    }
    let view = relation_name(&p.parse_object_name(false)?)?;
    let mut snapshot = true;
    if p.parse_keyword(Keyword::WITH) {
        for (k, v) in parse_with_options(p)? {
            match k.as_str() {
                "snapshot" => snapshot = parse_bool(&k, &v)?,
                other => {
                    return Err(WeirError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        format!("unknown SUBSCRIBE option \"{other}\" (known: snapshot)"),
                    ));
                }
            }
        }
    }
    Ok(Subscribe { view, snapshot })
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_lowercase().as_str() {
        "true" | "on" | "1" | "t" | "yes" => Ok(true),
        "false" | "off" | "0" | "f" | "no" => Ok(false),
        _ => Err(WeirError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            format!("{key} requires a Boolean value, not '{v}'"),
        )),
    }
}

/// `DECLARE ...`, at the DECLARE keyword.
pub fn parse_declare(p: &mut Parser) -> Result<Declare> {
    p.expect_keyword_is(Keyword::DECLARE)?;
    let name = normalize_ident(&p.parse_identifier()?);
    loop {
        if word(p, "binary") {
            return Err(WeirError::not_supported("binary cursors are not supported"));
        }
        if p.parse_keyword(Keyword::SCROLL) {
            return Err(WeirError::not_supported(
                "scrollable cursors are not supported",
            ));
        }
        if p.parse_keywords(&[Keyword::NO, Keyword::SCROLL])
            || p.parse_keyword(Keyword::INSENSITIVE)
            || p.parse_keyword(Keyword::ASENSITIVE)
        {
            continue;
        }
        break;
    }
    p.expect_keyword_is(Keyword::CURSOR)?;
    let mut hold = false;
    if p.parse_keyword(Keyword::WITH) {
        p.expect_keyword_is(Keyword::HOLD)?;
        hold = true;
    } else if p.parse_keyword(Keyword::WITHOUT) {
        p.expect_keyword_is(Keyword::HOLD)?;
    }
    p.expect_keyword_is(Keyword::FOR)?;
    let query = if at_subscribe(p) {
        CursorQuery::Subscribe(parse_subscribe(p)?)
    } else {
        let q = p.parse_query()?;
        CursorQuery::Query(Box::new(ast::Statement::Query(q)))
    };
    Ok(Declare { name, query, hold })
}

/// `FETCH ...` (or `MOVE`-less forms clients use), at the FETCH keyword.
pub fn parse_fetch(p: &mut Parser) -> Result<Fetch> {
    p.expect_keyword_is(Keyword::FETCH)?;
    let mut count = Some(1);
    let _ = p.parse_keyword(Keyword::FORWARD);
    let t = p.peek_token();
    match &t.token {
        Token::Number(n, _) => {
            p.next_token();
            count = Some(n.parse::<u64>().map_err(|_| syntax_near(&t))?);
        }
        Token::Word(w) if w.keyword == Keyword::ALL => {
            p.next_token();
            count = None;
        }
        Token::Word(w) if w.keyword == Keyword::NEXT => {
            p.next_token();
        }
        Token::Word(w)
            if matches!(
                w.keyword,
                Keyword::PRIOR
                    | Keyword::FIRST
                    | Keyword::LAST
                    | Keyword::ABSOLUTE
                    | Keyword::RELATIVE
                    | Keyword::BACKWARD
            ) =>
        {
            return Err(WeirError::not_supported(
                "cursors only move forward (FETCH [FORWARD] n | ALL | NEXT)",
            ));
        }
        _ => {}
    }
    let _ = p.parse_keyword(Keyword::FROM) || p.parse_keyword(Keyword::IN);
    let cursor = normalize_ident(&p.parse_identifier()?);
    let mut timeout = None;
    if p.parse_keyword(Keyword::WITH) {
        for (k, v) in parse_with_options(p)? {
            match k.as_str() {
                "timeout" => {
                    let text = if v.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        format!("{v} seconds")
                    } else {
                        v.replace("ms", " milliseconds")
                    };
                    let us = crate::sql::time::interval_micros(&text)?.max(0);
                    timeout = Some(std::time::Duration::from_micros(us as u64));
                }
                other => {
                    return Err(WeirError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        format!("unknown FETCH option \"{other}\" (known: timeout)"),
                    ));
                }
            }
        }
    }
    Ok(Fetch {
        cursor,
        count,
        timeout,
    })
}

/// `CLOSE name | ALL`, at the CLOSE keyword; `None` for ALL.
pub fn parse_close(p: &mut Parser) -> Result<Option<String>> {
    p.expect_keyword_is(Keyword::CLOSE)?;
    if p.parse_keyword(Keyword::ALL) {
        return Ok(None);
    }
    Ok(Some(normalize_ident(&p.parse_identifier()?)))
}

/// `SAVEPOINT name` / `RELEASE [SAVEPOINT] name` / `ROLLBACK [WORK|TRANSACTION] TO
/// [SAVEPOINT] name`: the savepoint's name, after the leading keywords.
pub fn parse_savepoint_name(p: &mut Parser) -> Result<String> {
    let _ = p.parse_keyword(Keyword::SAVEPOINT);
    Ok(normalize_ident(&p.parse_identifier()?))
}

/// `COPY ...`, at the COPY keyword.
pub fn parse_copy(p: &mut Parser) -> Result<Copy> {
    p.expect_keyword_is(Keyword::COPY)?;
    let source = if p.consume_token(&Token::LParen) {
        let s = if at_subscribe(p) {
            CopySource::Subscribe(parse_subscribe(p)?)
        } else {
            CopySource::Query(Box::new(ast::Statement::Query(p.parse_query()?)))
        };
        p.expect_token(&Token::RParen)?;
        s
    } else {
        CopySource::Table(relation_name(&p.parse_object_name(false)?)?)
    };
    let mut columns = Vec::new();
    if p.consume_token(&Token::LParen) {
        loop {
            columns.push(normalize_ident(&p.parse_identifier()?));
            if p.consume_token(&Token::Comma) {
                continue;
            }
            p.expect_token(&Token::RParen)?;
            break;
        }
    }
    let from = if p.parse_keyword(Keyword::FROM) {
        true
    } else if p.parse_keyword(Keyword::TO) {
        false
    } else {
        return Err(syntax_near(&p.peek_token()));
    };
    let target = p.next_token();
    let ok = if from {
        is_word(&target.token, "stdin")
    } else {
        is_word(&target.token, "stdout")
    };
    if !ok {
        return Err(match target.token {
            // nothing in SQL reads or writes the server's files or runs its programs
            Token::SingleQuotedString(_) | Token::Word(_) => WeirError::new(
                crate::error::sqlstate::INSUFFICIENT_PRIVILEGE,
                format!(
                    "permission denied to COPY {} a file or program",
                    if from { "from" } else { "to" }
                ),
            )
            .with_hint(format!(
                "Weir never reads or writes files on the server from SQL; use COPY ... {} (psql's \\copy).",
                if from { "FROM STDIN" } else { "TO STDOUT" }
            )),
            _ => syntax_near(&target),
        });
    }
    let options = parse_copy_options(p)?;
    // Postgres' checks of the FORCE options and HEADER MATCH against the direction
    let wrong_way = |what: &str, only: &str| {
        WeirError::new(
            crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
            format!("COPY {what} only available using COPY {only}"),
        )
    };
    if from && options.force_quote.is_some() {
        return Err(wrong_way("force quote", "TO"));
    }
    if !from && !options.force_null.is_empty() {
        return Err(wrong_way("force null", "FROM"));
    }
    if !from && !options.force_not_null.is_empty() {
        return Err(wrong_way("force not null", "FROM"));
    }
    if !from && options.header_match {
        return Err(WeirError::new(
            crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
            "cannot use \"match\" with HEADER in COPY TO",
        ));
    }
    if from {
        let CopySource::Table(table) = source else {
            return Err(WeirError::syntax("COPY FROM needs a table name"));
        };
        Ok(Copy::From {
            table,
            columns,
            options,
        })
    } else {
        if !columns.is_empty() && !matches!(source, CopySource::Table(_)) {
            return Err(WeirError::syntax("a column list goes with a table name"));
        }
        Ok(Copy::To {
            source,
            columns,
            options,
        })
    }
}

/// `[WITH] (FORMAT csv, HEADER, DELIMITER ',', NULL '', QUOTE '"', ESCAPE '"')` or the old
/// form `[WITH] [BINARY] [DELIMITER [AS] 'c'] [NULL [AS] 's'] [CSV [HEADER] [QUOTE 'q']
/// [ESCAPE 'e']]`.
fn parse_copy_options(p: &mut Parser) -> Result<CopyOptions> {
    let _ = p.parse_keyword(Keyword::WITH);
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    let mut forced: Vec<(String, ForceColumns)> = Vec::new();
    if p.consume_token(&Token::LParen) {
        loop {
            let key = normalize_ident(&p.parse_identifier()?).to_lowercase();
            let t = p.peek_token();
            // FORCE_QUOTE / FORCE_NULL / FORCE_NOT_NULL take `(columns)` or `*`
            if key.starts_with("force_") {
                let cols = if p.consume_token(&Token::Mul) {
                    ForceColumns::All
                } else if p.consume_token(&Token::LParen) {
                    let mut cols = Vec::new();
                    loop {
                        cols.push(normalize_ident(&p.parse_identifier()?));
                        if !p.consume_token(&Token::Comma) {
                            break;
                        }
                    }
                    p.expect_token(&Token::RParen)?;
                    ForceColumns::Columns(cols)
                } else {
                    return Err(WeirError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        format!("argument to option \"{key}\" must be a list of column names"),
                    ));
                };
                forced.push((key, cols));
                if p.consume_token(&Token::Comma) {
                    continue;
                }
                p.expect_token(&Token::RParen)?;
                break;
            }
            let value = match &t.token {
                Token::Comma | Token::RParen => None,
                Token::SingleQuotedString(s) => {
                    p.next_token();
                    Some(s.clone())
                }
                Token::Word(w) => {
                    p.next_token();
                    Some(w.value.to_lowercase())
                }
                Token::Number(n, _) => {
                    p.next_token();
                    Some(n.clone())
                }
                _ => return Err(syntax_near(&t)),
            };
            pairs.push((key, value));
            if p.consume_token(&Token::Comma) {
                continue;
            }
            p.expect_token(&Token::RParen)?;
            break;
        }
    } else {
        loop {
            let t = p.peek_token();
            let Token::Word(w) = &t.token else { break };
            let key = w.value.to_lowercase();
            p.next_token();
            match key.as_str() {
                "binary" => pairs.push(("format".into(), Some("binary".into()))),
                "csv" => pairs.push(("format".into(), Some("csv".into()))),
                "header" => pairs.push(("header".into(), None)),
                "force" => {
                    let key = if word(p, "quote") {
                        "force_quote"
                    } else if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                        "force_not_null"
                    } else if p.parse_keyword(Keyword::NULL) {
                        "force_null"
                    } else {
                        return Err(syntax_near(&p.peek_token()));
                    };
                    let cols = if p.consume_token(&Token::Mul) {
                        ForceColumns::All
                    } else {
                        ForceColumns::Columns(
                            p.parse_comma_separated(|p| p.parse_identifier())?
                                .iter()
                                .map(normalize_ident)
                                .collect(),
                        )
                    };
                    forced.push((key.into(), cols));
                }
                "delimiter" | "null" | "quote" | "escape" => {
                    let _ = p.parse_keyword(Keyword::AS);
                    let v = p.next_token();
                    let Token::SingleQuotedString(s) = v.token else {
                        return Err(syntax_near(&v));
                    };
                    pairs.push((key, Some(s)));
                }
                _ => return Err(syntax_near(&t)),
            }
        }
    }
    let format = match pairs
        .iter()
        .find(|(k, _)| k == "format")
        .and_then(|(_, v)| v.as_deref())
    {
        None | Some("text") => CopyFormat::Text,
        Some("csv") => CopyFormat::Csv,
        Some("binary") => {
            return Err(WeirError::not_supported(
                "COPY in binary format is not supported (use text or csv)",
            ));
        }
        Some(other) => {
            return Err(WeirError::new(
                crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                format!("COPY format \"{other}\" not recognized"),
            ));
        }
    };
    let mut o = CopyOptions::defaults(format);
    // ESCAPE defaults to QUOTE (a doubled quote), whatever QUOTE is
    let escape_given = pairs.iter().any(|(k, _)| k == "escape");
    for (k, v) in pairs {
        let one_byte = |what: &str, v: &Option<String>| -> Result<u8> {
            match v.as_deref().map(str::as_bytes) {
                Some([b]) if b.is_ascii() && *b != b'\n' && *b != b'\r' => Ok(*b),
                _ => Err(WeirError::new(
                    "22023",
                    format!("COPY {what} must be a single one-byte character"),
                )),
            }
        };
        match k.as_str() {
            "format" => {}
            "delimiter" => o.delimiter = one_byte("delimiter", &v)?,
            "null" => o.null = v.unwrap_or_default(),
            "header" => {
                o.header = match v {
                    None => true,
                    Some(v) if v == "match" => {
                        o.header_match = true;
                        true
                    }
                    Some(v) => parse_bool("header", &v)?,
                }
            }
            "quote" | "escape" if format != CopyFormat::Csv => {
                return Err(WeirError::new(
                    "0A000",
                    format!("COPY {k} available only in CSV mode"),
                ));
            }
            "quote" => {
                o.quote = one_byte("quote", &v)?;
                if !escape_given {
                    o.escape = o.quote;
                }
            }
            "escape" => o.escape = one_byte("escape", &v)?,
            "encoding" => {
                if !matches!(
                    v.as_deref().map(str::to_lowercase).as_deref(),
                    Some("utf8" | "utf-8")
                ) {
                    return Err(WeirError::not_supported(
                        "COPY supports ENCODING 'UTF8' only",
                    ));
                }
            }
            other => {
                return Err(WeirError::new(
                    "42601",
                    format!("option \"{other}\" not recognized"),
                ));
            }
        }
    }
    for (k, cols) in forced {
        let what = k.replace('_', " ");
        if format != CopyFormat::Csv {
            return Err(WeirError::new(
                crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
                format!("COPY {what} available only in CSV mode"),
            ));
        }
        match (k.as_str(), cols) {
            ("force_quote", c) => o.force_quote = Some(c),
            ("force_null" | "force_not_null", ForceColumns::All) => {
                return Err(WeirError::new(
                    crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                    format!("argument to option \"{k}\" must be a list of column names"),
                ));
            }
            ("force_null", ForceColumns::Columns(c)) => o.force_null = c,
            ("force_not_null", ForceColumns::Columns(c)) => o.force_not_null = c,
            (other, _) => {
                return Err(WeirError::new(
                    "42601",
                    format!("option \"{other}\" not recognized"),
                ));
            }
        }
    }
    Ok(o)
}
