//! Large `INSERT INTO t [(cols)] VALUES (literal, ...), ...` statements read straight from
//! their text into one string column per target column, without sqlparser's tokens and
//! tree (which take about a hundred times the statement's size: a 75 MB statement of five
//! million rows would need gigabytes). Only literals are read here: numbers, `'strings'`,
//! `NULL`, `TRUE`/`FALSE`; anything else (expressions, casts, `DEFAULT`, `E'...'`, several
//! statements, `ON CONFLICT`, `RETURNING`) makes [`scan`] return `None` and the statement
//! takes the general path.
//!
//! The values become typed columns in `plan::insert_values`, with the same rules as the
//! general path's literal rows.

use datafusion::arrow::array::{StringArray, StringBuilder};

/// Statements shorter than this take the general path (it handles them quickly).
pub const MIN_BYTES: usize = 256 * 1024;

/// Which kinds of literal a column's values were (Postgres types a number or a Boolean
/// literal before assigning it; a string literal is untyped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kinds {
    pub number: bool,
    pub boolean: bool,
}

#[derive(Debug, Clone)]
pub struct ScannedColumn {
    /// Literal texts (NULL as null), one per row.
    pub texts: StringArray,
    pub kinds: Kinds,
}

#[derive(Debug, Clone)]
pub struct ScannedInsert {
    /// Table name as the catalog spells it (unquoted names lower-cased).
    pub table: String,
    /// Target columns (empty: all, in order).
    pub columns: Vec<String>,
    /// One per value position of a row.
    pub values: Vec<ScannedColumn>,
    pub rows: usize,
    /// The statement's text, for the general path when a column type needs it.
    pub source: std::sync::Arc<str>,
}

struct Scanner<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn skip_space(&mut self) {
        loop {
            while self.at < self.s.len() && self.s[self.at].is_ascii_whitespace() {
                self.at += 1;
            }
            if self.s[self.at..].starts_with(b"--") {
                while self.at < self.s.len() && self.s[self.at] != b'\n' {
                    self.at += 1;
                }
            } else if self.s[self.at..].starts_with(b"/*") {
                match self.s[self.at + 2..].windows(2).position(|w| w == b"*/") {
                    Some(p) => self.at += 2 + p + 2,
                    None => {
                        self.at = self.s.len();
                        return;
                    }
                }
            } else {
                return;
            }
        }
    }

    fn keyword(&mut self, w: &str) -> Option<()> {
        self.skip_space();
        let end = self.at + w.len();
        let word = self.s.get(self.at..end)?;
        if !word.eq_ignore_ascii_case(w.as_bytes()) {
            return None;
        }
        if self
            .s
            .get(end)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
        {
            return None;
        }
        self.at = end;
        Some(())
    }

    fn punct(&mut self, c: u8) -> bool {
        self.skip_space();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let c = *self.s.get(self.at)?;
        if c == b'"' {
            let mut out = Vec::new();
            self.at += 1;
            loop {
                let c = *self.s.get(self.at)?;
                self.at += 1;
                if c == b'"' {
                    if self.s.get(self.at) == Some(&b'"') {
                        out.push(b'"');
                        self.at += 1;
                    } else {
                        break;
                    }
                } else {
                    out.push(c);
                }
            }
            return String::from_utf8(out).ok();
        }
        if !(c.is_ascii_alphabetic() || c == b'_') {
            return None;
        }
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
        {
            self.at += 1;
        }
        let w = std::str::from_utf8(&self.s[start..self.at]).ok()?;
        Some(w.to_ascii_lowercase())
    }

    /// One literal: Ok(Some(text)), Ok(None) for NULL; the kind it was.
    fn literal(&mut self) -> Option<(Option<&'a str>, Option<String>, u8)> {
        self.skip_space();
        let c = *self.s.get(self.at)?;
        match c {
            b'\'' => {
                self.at += 1;
                let start = self.at;
                // the common case: no doubled quotes, borrow the text
                let mut owned: Option<Vec<u8>> = None;
                loop {
                    let c = *self.s.get(self.at)?;
                    if c == b'\'' {
                        if self.s.get(self.at + 1) == Some(&b'\'') {
                            let o = owned.get_or_insert_with(|| self.s[start..self.at].to_vec());
                            o.push(b'\'');
                            self.at += 2;
                            continue;
                        }
                        let end = self.at;
                        self.at += 1;
                        // 'a' 'b' continued on the next line: the general path
                        let save = self.at;
                        self.skip_space();
                        if self.s.get(self.at) == Some(&b'\'') {
                            return None;
                        }
                        self.at = save;
                        return match owned {
                            Some(o) => Some((None, Some(String::from_utf8(o).ok()?), b's')),
                            None => Some((
                                Some(std::str::from_utf8(&self.s[start..end]).ok()?),
                                None,
                                b's',
                            )),
                        };
                    }
                    if let Some(o) = owned.as_mut() {
                        o.push(c);
                    }
                    self.at += 1;
                }
            }
            b'-' | b'+' | b'.' | b'0'..=b'9' => {
                let start = self.at;
                if c == b'-' || c == b'+' {
                    self.at += 1;
                    self.skip_space();
                }
                let num_start = self.at;
                let mut digits = 0;
                while self.s.get(self.at).is_some_and(|c| c.is_ascii_digit()) {
                    self.at += 1;
                    digits += 1;
                }
                if self.s.get(self.at) == Some(&b'.') {
                    self.at += 1;
                    while self.s.get(self.at).is_some_and(|c| c.is_ascii_digit()) {
                        self.at += 1;
                        digits += 1;
                    }
                }
                if digits == 0 {
                    return None;
                }
                if matches!(self.s.get(self.at), Some(b'e' | b'E')) {
                    self.at += 1;
                    if matches!(self.s.get(self.at), Some(b'+' | b'-')) {
                        self.at += 1;
                    }
                    let e = self.at;
                    while self.s.get(self.at).is_some_and(|c| c.is_ascii_digit()) {
                        self.at += 1;
                    }
                    if e == self.at {
                        return None;
                    }
                }
                // a number runs into a name (12abc) or an operator: the general path
                if self
                    .s
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    return None;
                }
                let body = std::str::from_utf8(&self.s[num_start..self.at]).ok()?;
                if c == b'-' {
                    let _ = start;
                    Some((None, Some(format!("-{body}")), b'n'))
                } else {
                    Some((Some(body), None, b'n'))
                }
            }
            _ => {
                let w = self.ident()?;
                match w.as_str() {
                    "null" => Some((None, None, b'0')),
                    "true" => Some((Some("true"), None, b'b')),
                    "false" => Some((Some("false"), None, b'b')),
                    _ => None,
                }
            }
        }
    }
}

/// Read a whole statement text as one literal multi-row INSERT, or `None`.
pub fn scan(sql: &str) -> Option<ScannedInsert> {
    let mut p = Scanner {
        s: sql.as_bytes(),
        at: 0,
    };
    p.keyword("insert")?;
    p.keyword("into")?;
    let mut table = p.ident()?;
    if p.punct(b'.') {
        if table != "public" {
            return None;
        }
        table = p.ident()?;
    }
    let mut columns = Vec::new();
    if p.punct(b'(') {
        loop {
            columns.push(p.ident()?);
            if p.punct(b')') {
                break;
            }
            if !p.punct(b',') {
                return None;
            }
        }
    }
    p.keyword("values")?;
    let mut builders: Vec<StringBuilder> = Vec::new();
    let mut kinds: Vec<Kinds> = Vec::new();
    let mut rows = 0usize;
    loop {
        if !p.punct(b'(') {
            return None;
        }
        let mut k = 0usize;
        loop {
            let (borrowed, owned, kind) = p.literal()?;
            if rows == 0 {
                builders.push(StringBuilder::with_capacity(1024, sql.len() / 4));
                kinds.push(Kinds::default());
            }
            let b = builders.get_mut(k)?;
            match (borrowed, owned) {
                (Some(t), _) => b.append_value(t),
                (None, Some(t)) => b.append_value(t),
                (None, None) => b.append_null(),
            }
            match kind {
                b'n' => kinds[k].number = true,
                b'b' => kinds[k].boolean = true,
                _ => {}
            }
            k += 1;
            if p.punct(b')') {
                break;
            }
            if !p.punct(b',') {
                return None;
            }
        }
        if k != builders.len() || k == 0 {
            return None;
        }
        rows += 1;
        if !p.punct(b',') {
            break;
        }
    }
    // nothing but an optional semicolon (and comments) may follow
    while p.punct(b';') {}
    p.skip_space();
    if p.at != p.s.len() {
        return None;
    }
    Some(ScannedInsert {
        table,
        columns,
        values: builders
            .into_iter()
            .zip(kinds)
            .map(|(mut b, kinds)| ScannedColumn {
                texts: b.finish(),
                kinds,
            })
            .collect(),
        rows,
        source: sql.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Array;

    #[test]
    fn literal_rows_are_read() {
        let s = scan("insert into T (a, \"B\") values (1, 'x''y'), (-2.5e3, NULL) ,(TRUE,'z');")
            .unwrap();
        assert_eq!(s.table, "t");
        assert_eq!(s.columns, vec!["a", "B"]);
        assert_eq!(s.rows, 3);
        let a = &s.values[0];
        assert_eq!(a.texts.value(0), "1");
        assert_eq!(a.texts.value(1), "-2.5e3");
        assert_eq!(a.texts.value(2), "true");
        assert!(a.kinds.number && a.kinds.boolean);
        let b = &s.values[1];
        assert_eq!(b.texts.value(0), "x'y");
        assert!(b.texts.is_null(1));
        assert_eq!(b.kinds, Kinds::default());
    }

    #[test]
    fn anything_else_takes_the_general_path() {
        for sql in [
            "insert into t values (1 + 1)",
            "insert into t values (now())",
            "insert into t values (1), (1, 2)",
            "insert into t values (1); select 1",
            "insert into t values (1) returning a",
            "insert into t values ('1'::int)",
            "insert into t values (E'a')",
            "insert into t values ('a' 'b')",
            "insert into s.t values (1)",
            "insert into t select 1",
            "insert into t values (DEFAULT)",
        ] {
            assert!(scan(sql).is_none(), "{sql}");
        }
        assert!(scan("INSERT INTO t VALUES (1) -- done\n").is_some());
    }
}
