//! `DO` blocks of the one shape migration tools write: a single statement, optionally with
//! an exception handler that ignores named errors —
//!
//! ```sql
//! DO $$ BEGIN
//!   CREATE TYPE "public"."mood" AS ENUM ('sad', 'ok');
//! EXCEPTION WHEN duplicate_object THEN null;
//! END $$;
//! ```
//!
//! (Drizzle's migrations for enums and foreign keys, Sequelize's `sync` for enums: "create
//! unless it exists"). The statement runs as if sent alone; an error whose condition a
//! handler names is dropped and the block succeeds, as PL/pgSQL's handler does (one
//! statement, so there is nothing else for the handler's subtransaction to undo). Anything
//! else — variables, control flow, `RAISE`, several statements, a handler doing something
//! — is refused with 0A000: Weir runs no procedural language.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Result, WeirError, sqlstate};

/// A `DO` block Weir can run: its statement and the SQLSTATEs its handler ignores.
#[derive(Debug, Clone, PartialEq)]
pub struct DoBlock {
    pub statement: String,
    pub ignored: Vec<&'static str>,
}

fn refused() -> WeirError {
    WeirError::not_supported(
        "DO is not supported: Weir runs no procedural language (write the statements themselves, or a SQL-bodied query); only a block of one statement with handlers that ignore errors (EXCEPTION WHEN duplicate_object THEN null) is run",
    )
}

/// PL/pgSQL's condition names for the errors such handlers ignore.
fn condition(name: &str) -> Option<&'static str> {
    Some(match name {
        "duplicate_object" => "42710",
        "duplicate_table" => "42P07",
        "duplicate_column" => "42701",
        "duplicate_schema" => "42P06",
        "duplicate_function" => "42723",
        "undefined_object" => "42704",
        "undefined_table" => sqlstate::UNDEFINED_TABLE,
        "undefined_column" => "42703",
        "unique_violation" => "23505",
        _ => return None,
    })
}

/// The block of a `DO` body, or 0A000 for any other body.
pub fn parse(body: &str) -> Result<DoBlock> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, body)
        .tokenize()
        .map_err(|_| refused())?;
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let word = |i: usize, w: &str| matches!(&tokens[i], Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    // BEGIN ... END [;]
    let mut end = sig.len();
    if end > 0 && tokens[sig[end - 1]] == Token::SemiColon {
        end -= 1;
    }
    if end < 3 || !word(sig[0], "BEGIN") || !word(sig[end - 1], "END") {
        return Err(refused());
    }
    let inner = &sig[1..end - 1];
    let mut depth = 0i32;
    let handler = inner.iter().position(|&i| {
        match tokens[i] {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        depth == 0 && word(i, "EXCEPTION")
    });
    let (body_part, handler_part) = match handler {
        Some(h) => (&inner[..h], &inner[h + 1..]),
        None => (inner, &[][..]),
    };
    // exactly one statement, ended by `;`
    let Some((&last, statement)) = body_part.split_last() else {
        return Err(refused());
    };
    if tokens[last] != Token::SemiColon
        || statement.is_empty()
        || statement.iter().any(|&i| tokens[i] == Token::SemiColon)
        || matches!(&tokens[statement[0]], Token::Word(w) if ["DECLARE", "IF", "LOOP", "FOR", "WHILE", "RAISE", "PERFORM", "RETURN", "EXECUTE", "BEGIN"].iter().any(|k| w.value.eq_ignore_ascii_case(k)))
    {
        return Err(refused());
    }
    let text: String = tokens[statement[0]..=statement[statement.len() - 1]]
        .iter()
        .map(|t| t.to_string())
        .collect();
    // WHEN cond [OR cond ...] THEN NULL; ...
    let mut ignored = Vec::new();
    let mut at = 0;
    while at < handler_part.len() {
        if !word(handler_part[at], "WHEN") {
            return Err(refused());
        }
        at += 1;
        loop {
            let Some(&i) = handler_part.get(at) else {
                return Err(refused());
            };
            let Token::Word(w) = &tokens[i] else {
                return Err(refused());
            };
            ignored.push(condition(&w.value.to_ascii_lowercase()).ok_or_else(refused)?);
            at += 1;
            match handler_part.get(at) {
                Some(&i) if word(i, "OR") => at += 1,
                _ => break,
            }
        }
        let then_null = handler_part.get(at).is_some_and(|&i| word(i, "THEN"))
            && handler_part.get(at + 1).is_some_and(|&i| word(i, "NULL"))
            && handler_part
                .get(at + 2)
                .is_some_and(|&i| tokens[i] == Token::SemiColon);
        if !then_null {
            return Err(refused());
        }
        at += 3;
    }
    if handler.is_some() && ignored.is_empty() {
        return Err(refused());
    }
    Ok(DoBlock {
        statement: text,
        ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_idiom_and_refuses_the_rest() {
        let b = parse(
            " BEGIN\n CREATE TYPE \"public\".\"mood\" AS ENUM('sad', 'ok');\nEXCEPTION\n WHEN duplicate_object THEN null;\nEND ",
        )
        .unwrap();
        assert_eq!(
            b.statement,
            "CREATE TYPE \"public\".\"mood\" AS ENUM('sad', 'ok')"
        );
        assert_eq!(b.ignored, vec!["42710"]);
        let b = parse("BEGIN ALTER TABLE a ADD CONSTRAINT f FOREIGN KEY (x) REFERENCES b(y); EXCEPTION WHEN duplicate_object OR duplicate_table THEN NULL; WHEN undefined_table THEN null; END;").unwrap();
        assert_eq!(b.ignored, vec!["42710", "42P07", "42P01"]);
        assert_eq!(
            parse("BEGIN INSERT INTO t VALUES (';'); END")
                .unwrap()
                .ignored,
            Vec::<&str>::new()
        );
        for bad in [
            "",
            "BEGIN END",
            "DECLARE x int; BEGIN x := 1; END",
            "BEGIN RAISE NOTICE 'x'; END",
            "BEGIN INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); END",
            "BEGIN CREATE TYPE m AS ENUM ('a'); EXCEPTION WHEN others THEN null; END",
            "BEGIN CREATE TYPE m AS ENUM ('a'); EXCEPTION WHEN duplicate_object THEN RAISE; END",
            "BEGIN IF true THEN CREATE TABLE t (a int); END IF; END",
        ] {
            assert_eq!(
                parse(bad).unwrap_err().code,
                sqlstate::FEATURE_NOT_SUPPORTED,
                "{bad}"
            );
        }
    }
}
