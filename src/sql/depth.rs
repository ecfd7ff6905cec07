//! How deep a statement nests, judged from its tokens before it is parsed.
//!
//! Parsing builds `a + b + c ...` and `x OR y OR ...` as left-deep trees (one level per
//! operator) and `UNION ALL` chains one level per branch, in loops, so the parser's
//! recursion limit does not bound them; but everything after it (planning, rewriting,
//! cloning and dropping the tree) recurses once per level. A statement whose tree could
//! be deeper than [`MAX_STATEMENT_DEPTH`] is refused with 54001 before a tree exists, so no
//! later step can run out of stack.
//!
//! The estimate is an upper bound: per bracket level, the tokens that can add a level
//! (operators and keywords, not names, literals or commas) between two commas or set
//! operations, plus the depth of the brackets inside, plus the set operations of the
//! level. Lists (select lists, `IN (...)`, `VALUES` rows, arguments) are siblings, so a
//! comma starts a new count: a 100,000-element IN list is shallow.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{Result, WeirError, sqlstate};

/// Deepest expression or set-operation nesting a statement may have. 1,000-term OR chains
/// and 1,000-branch UNION ALLs (what ORMs generate) are well below it.
pub const MAX_STATEMENT_DEPTH: usize = 10_000;

/// Nesting limit of the parser's recursive descent (parentheses, subqueries, function
/// calls inside each other).
pub const MAX_PARSER_RECURSION: usize = 500;

#[derive(Default, Clone, Copy)]
struct Level {
    /// Depth added by the current element (since the last comma or set operation).
    cur: usize,
    /// Deepest element so far.
    best: usize,
    /// Set operations at this level (each is one level of the tree).
    setops: usize,
}

impl Level {
    fn depth(&self) -> usize {
        self.best.max(self.cur) + self.setops
    }
}

/// Estimate each statement's depth (statements end at `;` outside brackets) and refuse
/// the first one deeper than the limit.
pub fn check<'a>(tokens: impl IntoIterator<Item = &'a Token>) -> Result<()> {
    let mut stack: Vec<Level> = vec![Level::default()];
    let finish = |stack: &mut Vec<Level>| -> Result<()> {
        // unbalanced brackets: fold what is open into the outer level
        while stack.len() > 1 {
            let child = stack.pop().unwrap_or_default();
            if let Some(parent) = stack.last_mut() {
                parent.cur += child.depth() + 1;
            }
        }
        let d = stack[0].depth();
        stack[0] = Level::default();
        if d > MAX_STATEMENT_DEPTH {
            Err(too_deep(d))
        } else {
            Ok(())
        }
    };
    for t in tokens {
        match t {
            Token::LParen | Token::LBracket | Token::LBrace => stack.push(Level::default()),
            Token::RParen | Token::RBracket | Token::RBrace => {
                if stack.len() > 1 {
                    let child = stack.pop().unwrap_or_default();
                    if let Some(parent) = stack.last_mut() {
                        parent.cur += child.depth() + 1;
                    }
                }
            }
            Token::SemiColon if stack.len() == 1 => finish(&mut stack)?,
            Token::Comma => {
                if let Some(l) = stack.last_mut() {
                    l.best = l.best.max(l.cur);
                    l.cur = 0;
                }
            }
            Token::Word(w)
                if matches!(
                    w.keyword,
                    Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT
                ) =>
            {
                if let Some(l) = stack.last_mut() {
                    l.best = l.best.max(l.cur);
                    l.cur = 0;
                    l.setops += 1;
                }
            }
            // names and literals are leaves
            Token::Word(w) if w.keyword == Keyword::NoKeyword || w.quote_style.is_some() => {}
            Token::Whitespace(_)
            | Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::DollarQuotedString(_)
            | Token::Placeholder(_)
            | Token::Period
            | Token::EOF => {}
            _ => {
                if let Some(l) = stack.last_mut() {
                    l.cur += 1;
                }
            }
        }
    }
    finish(&mut stack)
}

pub fn too_deep(depth: usize) -> WeirError {
    WeirError::new(
        sqlstate::STATEMENT_TOO_COMPLEX,
        format!(
            "statement is too complex: it nests about {depth} levels deep (the limit is {MAX_STATEMENT_DEPTH})"
        ),
    )
    .with_hint("Write long OR/AND chains as IN (...) or a join with a VALUES list, and split very long UNION ALL chains.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn depth_ok(sql: &str) -> bool {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize()
            .unwrap();
        check(&tokens).is_ok()
    }

    #[test]
    fn long_chains_are_deep_long_lists_are_not() {
        let chain = |n: usize, op: &str| {
            format!(
                "SELECT 1 WHERE {}",
                (0..n)
                    .map(|i| format!("a = {i}"))
                    .collect::<Vec<_>>()
                    .join(op)
            )
        };
        assert!(depth_ok(&chain(1000, " OR ")));
        assert!(!depth_ok(&chain(20_000, " OR ")));
        let list = format!(
            "SELECT 1 WHERE a IN ({})",
            (0..200_000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(depth_ok(&list));
        let values = format!(
            "INSERT INTO t VALUES {}",
            (0..100_000)
                .map(|i| format!("({i}, 'x', {i} + 1)"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(depth_ok(&values));
        let unions = |n: usize| {
            (0..n)
                .map(|i| format!("SELECT a, b FROM t WHERE a = {i} AND b > 2"))
                .collect::<Vec<_>>()
                .join(" UNION ALL ")
        };
        assert!(depth_ok(&unions(1000)));
        assert!(!depth_ok(&unions(12_000)));
        let parens = format!("SELECT {}1{}", "(".repeat(20_000), ")".repeat(20_000));
        assert!(!depth_ok(&parens));
        // each statement of a message counts on its own
        let many = vec![chain(4000, " AND "); 4].join(";");
        assert!(depth_ok(&many));
    }
}
