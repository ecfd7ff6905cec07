//! `jsonb` text as Postgres stores it: checked, then written in its canonical form.
//!
//! - Objects print as `{"a": 1, "bb": 2}` with keys ordered as Postgres orders them
//!   (shorter first, then bytewise) and a repeated key keeping its last value; arrays as
//!   `[1, 2]`.
//! - Numbers keep their decimal value and scale, as `numeric` does: `1.50` stays `1.50`,
//!   `1e2` becomes `100`, `1.5e-1` becomes `0.15`.
//! - Strings are decoded (`\u00e9` becomes `é`) and printed with `"`, `\` and control
//!   characters escaped; `\u0000` is refused (22P05), as Postgres refuses it.
//!
//! Anything that is not one JSON value is an error naming what was wrong (22P02). Nesting
//! deeper than [`MAX_DEPTH`] is refused (54001) rather than recursed into.

use crate::error::{WeirError, sqlstate};

pub const MAX_DEPTH: usize = 1000;

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    /// Canonical numeric text.
    Number(String),
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    /// `json`'s reading: an object's keys as written, repeated ones kept (else `jsonb`'s:
    /// the last of a repeated key, in Postgres' key order).
    document: bool,
}

type Res<T> = Result<T, WeirError>;

/// Postgres' error for text that is no JSON: `invalid input syntax for type json`, the
/// problem as its lexer or parser words it in the DETAIL, and where in the CONTEXT (`JSON
/// data, line 1: {"a":x...`): the line up to the end of the offending token, at most 49
/// bytes of it (`...` before when cut, and after when more input follows on that line).
fn syntax_at(s: &[u8], detail: String, end: usize) -> WeirError {
    let end = end.min(s.len());
    let line_start = s[..end]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let line = 1 + s[..end].iter().filter(|&&c| c == b'\n').count();
    let mut start = line_start;
    while end - start >= 50 {
        start += 1;
        // (never inside a character)
        while start < end && (s[start] & 0xC0) == 0x80 {
            start += 1;
        }
    }
    if start - line_start <= 3 {
        start = line_start;
    }
    let prefix = if start > line_start { "..." } else { "" };
    let suffix = if end < s.len() && !matches!(s[end], b'\n' | b'\r') {
        "..."
    } else {
        ""
    };
    WeirError::new(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        "invalid input syntax for type json",
    )
    .with_detail(detail)
    .with_context(format!(
        "JSON data, line {line}: {prefix}{}{suffix}",
        String::from_utf8_lossy(&s[start..end])
    ))
}

/// A byte of a JSON word (Postgres' `JSON_ALPHANUMERIC_CHAR`).
fn word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// The token at a place, as Postgres' JSON lexer reads it.
enum Lexed {
    End,
    /// a well-formed token, up to `end`
    Token {
        end: usize,
    },
    /// no token: what Postgres says (`Token "x" is invalid.`) and where it stops
    Invalid {
        detail: String,
        end: usize,
    },
}

impl<'a> Parser<'a> {
    /// The token starting at `self.at`, without moving.
    fn lex(&self) -> Lexed {
        let s = self.s;
        let at = self.at;
        let Some(&c) = s.get(at) else {
            return Lexed::End;
        };
        let invalid = |end: usize| Lexed::Invalid {
            detail: format!(
                "Token \"{}\" is invalid.",
                String::from_utf8_lossy(&s[at..end])
            ),
            end,
        };
        match c {
            b'{' | b'}' | b'[' | b']' | b',' | b':' => Lexed::Token { end: at + 1 },
            b'"' => {
                let mut p = Parser {
                    s,
                    at,
                    document: self.document,
                };
                match p.string() {
                    Ok(_) => Lexed::Token { end: p.at },
                    Err(e) => Lexed::Invalid {
                        detail: e.detail.unwrap_or_default(),
                        end: p.at,
                    },
                }
            }
            b'-' | b'0'..=b'9' => {
                let mut i = at + usize::from(c == b'-');
                let digits = |i: &mut usize| {
                    let from = *i;
                    while s.get(*i).is_some_and(u8::is_ascii_digit) {
                        *i += 1;
                    }
                    *i > from
                };
                let mut ok = match s.get(i) {
                    Some(b'0') => {
                        i += 1;
                        true
                    }
                    _ => digits(&mut i),
                };
                if ok && s.get(i) == Some(&b'.') {
                    i += 1;
                    ok = digits(&mut i);
                }
                if ok && matches!(s.get(i), Some(b'e' | b'E')) {
                    i += 1;
                    if matches!(s.get(i), Some(b'+' | b'-')) {
                        i += 1;
                    }
                    ok = digits(&mut i);
                }
                // a number run on into letters or digits is one bad token
                while s.get(i).is_some_and(|&b| word_byte(b)) {
                    i += 1;
                    ok = false;
                }
                if ok {
                    Lexed::Token { end: i }
                } else {
                    invalid(i)
                }
            }
            c if word_byte(c) => {
                let mut i = at;
                while s.get(i).is_some_and(|&b| word_byte(b)) {
                    i += 1;
                }
                match &s[at..i] {
                    b"true" | b"false" | b"null" => Lexed::Token { end: i },
                    _ => invalid(i),
                }
            }
            _ => {
                // one character, all its bytes
                let mut i = at + 1;
                while s.get(i).is_some_and(|&b| (b & 0xC0) == 0x80) {
                    i += 1;
                }
                invalid(i)
            }
        }
    }

    /// The error where `expected` was wanted at `self.at`: the input ended, the token
    /// there is no token, or `Expected {expected}, but found "{token}".`
    fn expected(&mut self, expected: &str) -> WeirError {
        self.ws();
        self.lexed_error(self.lex(), self.at, Some(expected))
    }

    /// The error for what was lexed at `start`: the input's end, a bad token, or a good
    /// token where `expected` was wanted (without: the token itself named bad).
    fn lexed_error(&self, lexed: Lexed, start: usize, expected: Option<&str>) -> WeirError {
        match lexed {
            Lexed::End => self.ended(),
            Lexed::Invalid { detail, end } => syntax_at(self.s, detail, end),
            Lexed::Token { end } => {
                let token = String::from_utf8_lossy(&self.s[start..end]);
                let detail = match expected {
                    Some(expected) => format!("Expected {expected}, but found \"{token}\"."),
                    None => format!("Token \"{token}\" is invalid."),
                };
                syntax_at(self.s, detail, end)
            }
        }
    }

    fn ended(&self) -> WeirError {
        syntax_at(
            self.s,
            "The input string ended unexpectedly.".into(),
            self.s.len(),
        )
    }

    /// A string with no closing quote: one bad token to the end (Postgres' lexer).
    fn unterminated(&self, open: usize) -> WeirError {
        syntax_at(
            self.s,
            format!(
                "Token \"{}\" is invalid.",
                String::from_utf8_lossy(&self.s[open..])
            ),
            self.s.len(),
        )
    }

    /// The bad token starting at `start`, as Postgres' lexer names it.
    fn bad_token(&self, start: usize) -> WeirError {
        let p = Parser {
            s: self.s,
            at: start,
            document: self.document,
        };
        self.lexed_error(p.lex(), start, None)
    }

    /// An error inside a string, its context ending at `end`.
    fn in_string(&self, detail: impl Into<String>, end: usize) -> WeirError {
        syntax_at(self.s, detail.into(), end)
    }

    fn ws(&mut self) {
        while self.at < self.s.len() && matches!(self.s[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    // grows its stack as it recurses: any thread may read jsonb (consumers' threads too)
    /// The value at `self.at`; where a token that starts none is, Postgres' `Expected
    /// {expected}, but found ...` (`JSON value`, or `array element or "]"` first in an
    /// array).
    #[recursive::recursive]
    fn value(&mut self, depth: usize, expected: &str) -> Res<Node> {
        if depth > MAX_DEPTH {
            return Err(WeirError::new(
                sqlstate::STATEMENT_TOO_COMPLEX,
                format!("jsonb value nests more than {MAX_DEPTH} levels"),
            ));
        }
        self.ws();
        match self.peek() {
            None => Err(self.ended()),
            Some(b'{') => {
                self.at += 1;
                let mut fields: Vec<(String, Node)> = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.at += 1;
                    return Ok(Node::Object(fields));
                }
                let mut key_expected = "string or \"}\"";
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.expected(key_expected));
                    }
                    key_expected = "string";
                    let k = self.string()?;
                    self.ws();
                    if self.peek() != Some(b':') {
                        return Err(self.expected("\":\""));
                    }
                    self.at += 1;
                    let v = self.value(depth + 1, "JSON value")?;
                    fields.push((k, v));
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            break;
                        }
                        _ => return Err(self.expected("\",\" or \"}\"")),
                    }
                }
                if self.document {
                    return Ok(Node::Object(fields));
                }
                // last value of a repeated key wins; then Postgres' key order
                let mut keep: Vec<(String, Node)> = Vec::with_capacity(fields.len());
                for (k, v) in fields.into_iter().rev() {
                    if !keep.iter().any(|(x, _)| *x == k) {
                        keep.push((k, v));
                    }
                }
                key_order(&mut keep);
                Ok(Node::Object(keep))
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Node::Array(items));
                }
                let mut element_expected = "array element or \"]\"";
                loop {
                    items.push(self.value(depth + 1, element_expected)?);
                    element_expected = "JSON value";
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            break;
                        }
                        _ => return Err(self.expected("\",\" or \"]\"")),
                    }
                }
                Ok(Node::Array(items))
            }
            Some(b'"') => Ok(Node::Str(self.string()?)),
            _ => match self.lex() {
                Lexed::End => Err(self.ended()),
                Lexed::Invalid { detail, end } => Err(syntax_at(self.s, detail, end)),
                Lexed::Token { end } => {
                    let node = match &self.s[self.at..end] {
                        b"true" => Node::Bool(true),
                        b"false" => Node::Bool(false),
                        b"null" => Node::Null,
                        [b'-' | b'0'..=b'9', ..] => return self.number(),
                        _ => return Err(self.expected(expected)),
                    };
                    self.at = end;
                    Ok(node)
                }
            },
        }
    }

    fn hex4(&mut self) -> Res<u32> {
        let h = self
            .s
            .get(self.at..self.at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                // (the context runs to the first character that is not a hex digit)
                let bad = (self.at..self.s.len().min(self.at + 4))
                    .find(|&i| !self.s[i].is_ascii_hexdigit())
                    .map_or(self.s.len(), |i| i + 1);
                self.in_string("\"\\u\" must be followed by four hexadecimal digits.", bad)
            })?;
        self.at += 4;
        Ok(h)
    }

    fn string(&mut self) -> Res<String> {
        // at the opening quote
        let open = self.at;
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.unterminated(open));
            };
            self.at += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.unterminated(open));
                    };
                    self.at += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) {
                                // a surrogate pair
                                if self.s.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return Err(self.in_string(
                                        "Unicode high surrogate must not follow a high surrogate.",
                                        self.at,
                                    ));
                                }
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.in_string(
                                        "Unicode low surrogate must follow a high surrogate.",
                                        self.at,
                                    ));
                                }
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            } else if (0xDC00..0xE000).contains(&cp) {
                                return Err(self.in_string(
                                    "Unicode low surrogate must follow a high surrogate.",
                                    self.at,
                                ));
                            }
                            if cp == 0 {
                                return Err(WeirError::new(
                                    "22P05",
                                    "unsupported Unicode escape sequence",
                                )
                                .with_detail("\\u0000 cannot be converted to text."));
                            }
                            let ch = char::from_u32(cp).ok_or_else(|| {
                                self.in_string("Invalid Unicode escape value.", self.at)
                            })?;
                            let mut b = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                        }
                        other => {
                            return Err(self.in_string(
                                format!("Escape sequence \"\\{}\" is invalid.", char::from(other)),
                                self.at,
                            ));
                        }
                    }
                }
                c if c < 0x20 => {
                    return Err(self.in_string(
                        format!("Character with value 0x{c:02x} must be escaped."),
                        self.at - 1,
                    ));
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out)
            .map_err(|_| self.in_string("The string is not valid UTF-8.", self.at))
    }

    fn number(&mut self) -> Res<Node> {
        let start = self.at;
        let neg = self.peek() == Some(b'-');
        if neg {
            self.at += 1;
        }
        let int_start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let int = &self.s[int_start..self.at];
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return Err(self.bad_token(start));
        }
        let mut frac: &[u8] = &[];
        if self.peek() == Some(b'.') {
            self.at += 1;
            let f = self.at;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.at += 1;
            }
            frac = &self.s[f..self.at];
            if frac.is_empty() {
                return Err(self.bad_token(start));
            }
        }
        let mut exp: i64 = 0;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            let mut eneg = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                eneg = self.peek() == Some(b'-');
                self.at += 1;
            }
            let e = self.at;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.at += 1;
            }
            let digits = &self.s[e..self.at];
            if digits.is_empty() {
                return Err(self.bad_token(start));
            }
            let v: i64 = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok())
                .filter(|v: &i64| *v <= 100_000)
                .ok_or_else(|| {
                    WeirError::new(
                        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!(
                            "value overflows numeric format: {}",
                            String::from_utf8_lossy(&self.s[start..self.at])
                        ),
                    )
                })?;
            exp = if eneg { -v } else { v };
        }
        Ok(Node::Number(canonical_number(neg, int, frac, exp)))
    }
}

/// `numeric`'s text of a JSON number: scale = max(0, fraction digits − exponent).
fn canonical_number(neg: bool, int: &[u8], frac: &[u8], exp: i64) -> String {
    let mut digits: Vec<u8> = int.iter().chain(frac).copied().collect();
    // the decimal point sits after `point` digits
    let mut point = int.len() as i64 + exp;
    let scale = (frac.len() as i64 - exp).max(0) as usize;
    if point < 0 {
        let pad = (-point) as usize;
        let mut v = vec![b'0'; pad];
        v.extend_from_slice(&digits);
        digits = v;
        point = 0;
    }
    let point = point as usize;
    while digits.len() < point + scale {
        digits.push(b'0');
    }
    let (ip, fp) = digits.split_at(point);
    let fp = &fp[..scale.min(fp.len())];
    let ip = {
        let z = ip.iter().take_while(|c| **c == b'0').count();
        let s = &ip[z..];
        if s.is_empty() { &b"0"[..] } else { s }
    };
    let zero = ip == b"0" && fp.iter().all(|c| *c == b'0');
    let mut out = String::new();
    if neg && !zero {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(ip).unwrap_or("0"));
    if !fp.is_empty() {
        out.push('.');
        out.push_str(std::str::from_utf8(fp).unwrap_or(""));
    }
    out
}

/// A JSON string literal of `s`, escaped as Postgres escapes it.
pub(crate) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Written with recursion no deeper than the parser allowed.
#[recursive::recursive]
fn write(out: &mut String, n: &Node) {
    match n {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Number(s) => out.push_str(s),
        Node::Str(s) => write_str(out, s),
        Node::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(out, v);
            }
            out.push(']');
        }
        Node::Object(fields) => {
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write(out, v);
            }
            out.push('}');
        }
    }
}

/// Check `text` as one JSON value and return it unchanged: a `json` value is its text.
pub fn json_checked(text: &str) -> Result<String, WeirError> {
    parse(text)?;
    Ok(text.to_owned())
}

/// Check `text` as one JSON value and return it as Postgres prints the `jsonb` it stores.
pub fn normalize(text: &str) -> Result<String, WeirError> {
    let v = parse(text)?;
    let mut out = String::with_capacity(text.len());
    write(&mut out, &v);
    Ok(out)
}

/// A document parsed into its canonical tree (keys in Postgres' order, numbers as their
/// `numeric` text).
/// Whether `text` is one JSON value (Postgres' errors where not), read as a `json`
/// document is: keys neither sorted nor deduplicated, as a check needs no more.
pub(crate) fn check(text: &str) -> Res<()> {
    parse_as(text, true).map(drop)
}

pub(crate) fn parse(text: &str) -> Res<Node> {
    parse_as(text, false)
}

/// [`parse`], or with `document` a `json` document's reading: its objects' keys as
/// written, repeated ones kept (`json_object_keys`, `json_each` list them so).
fn parse_as(text: &str, document: bool) -> Res<Node> {
    let mut p = Parser {
        s: text.as_bytes(),
        at: 0,
        document,
    };
    let v = p.value(0, "JSON value")?;
    p.ws();
    if p.at != p.s.len() {
        return Err(p.expected("end of input"));
    }
    Ok(v)
}

/// A byte string that sorts as Postgres orders `jsonb` values: object > array > boolean >
/// number > string > null, and (Postgres' historical quirk) an empty top-level array below
/// null; objects by their number of pairs, then key, value, key, value ... in stored key
/// order; arrays by length, then element by element; numbers by value (`1.5` = `1.50`);
/// strings bytewise (the C collation); false < true.
pub fn sort_key(text: &str) -> Res<Vec<u8>> {
    let v = parse(text)?;
    let mut out = Vec::with_capacity(text.len() + 8);
    if matches!(&v, Node::Array(items) if items.is_empty()) {
        out.push(0x01);
        return Ok(out);
    }
    key_of(&mut out, &v);
    Ok(out)
}

#[recursive::recursive]
fn key_of(out: &mut Vec<u8>, n: &Node) {
    match n {
        Node::Null => out.push(0x02),
        Node::Str(s) => {
            out.push(0x03);
            string_key(out, s);
        }
        Node::Number(s) => {
            out.push(0x04);
            number_key(out, s);
        }
        Node::Bool(b) => out.extend_from_slice(&[0x05, *b as u8]),
        Node::Array(items) => {
            out.push(0x06);
            out.extend_from_slice(&(items.len() as u32).to_be_bytes());
            for i in items {
                key_of(out, i);
            }
        }
        Node::Object(fields) => {
            out.push(0x07);
            out.extend_from_slice(&(fields.len() as u32).to_be_bytes());
            for (k, v) in fields {
                string_key(out, k);
                key_of(out, v);
            }
        }
    }
}

/// Bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00 0x00: prefix-free, bytewise order.
fn string_key(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// A canonical decimal's order-preserving key: sign class, then (for non-zero) the decimal
/// exponent and the significant digits, complemented for negatives.
fn number_key(out: &mut Vec<u8>, text: &str) {
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    let Some(first) = all.iter().position(|d| *d != b'0') else {
        out.push(0x80);
        return;
    };
    let last = all.iter().rposition(|d| *d != b'0').unwrap_or(first);
    let exp = int.len() as i64 - first as i64;
    let mut mag = Vec::with_capacity(8 + last - first + 2);
    mag.extend_from_slice(&((exp as i32 as u32) ^ 0x8000_0000).to_be_bytes());
    mag.extend_from_slice(&all[first..=last]);
    mag.push(0);
    if neg {
        out.push(0x7F);
        out.extend(mag.iter().map(|b| !b));
    } else {
        out.push(0x81);
        out.extend_from_slice(&mag);
    }
}

fn kind(n: &Node) -> &'static str {
    match n {
        Node::Null => "null",
        Node::Bool(_) => "boolean",
        Node::Number(_) => "number",
        Node::Str(_) => "string",
        Node::Array(_) => "array",
        Node::Object(_) => "object",
    }
}

fn invalid(message: String) -> WeirError {
    WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

/// `jsonb_typeof`: `object`, `array`, `string`, `number`, `boolean` or `null`.
pub fn type_of(text: &str) -> Res<&'static str> {
    Ok(kind(&parse(text)?))
}

/// `jsonb_array_length` (22023 for a scalar or an object, as Postgres words it).
pub fn array_length(text: &str) -> Res<i32> {
    match parse(text)? {
        Node::Array(items) => Ok(items.len() as i32),
        Node::Object(_) => Err(invalid("cannot get array length of a non-array".into())),
        _ => Err(invalid("cannot get array length of a scalar".into())),
    }
}

/// An element or value as jsonb text, or with `as_text` as the `_text` functions give it
/// (a string without quotes, JSON null as SQL NULL).
fn element_text(n: &Node, as_text: bool) -> Option<String> {
    match (n, as_text) {
        (Node::Null, true) => None,
        (Node::Str(s), true) => Some(s.clone()),
        (n, _) => Some(text_of(n)),
    }
}

/// `jsonb_array_elements` (each element as jsonb text) or, with `as_text`,
/// `jsonb_array_elements_text` (strings without quotes, JSON null as SQL NULL).
pub fn array_elements(text: &str, as_text: bool) -> Res<Vec<Option<String>>> {
    match parse(text)? {
        Node::Array(items) => Ok(items.iter().map(|n| element_text(n, as_text)).collect()),
        Node::Object(_) => Err(invalid("cannot extract elements from an object".into())),
        _ => Err(invalid("cannot extract elements from a scalar".into())),
    }
}

/// `jsonb_each` (each value as jsonb text) or, with `as_text`, `jsonb_each_text` (strings
/// without quotes, JSON null as SQL NULL): the object's (key, value) pairs in stored order.
pub fn object_entries(
    text: &str,
    as_text: bool,
    document: bool,
) -> Res<Vec<(String, Option<String>)>> {
    match parse_as(text, document)? {
        Node::Object(fields) => Ok(fields
            .into_iter()
            .map(|(k, n)| {
                let v = element_text(&n, as_text);
                (k, v)
            })
            .collect()),
        _ => Err(invalid(format!(
            "cannot call {} on a non-object",
            if as_text {
                "jsonb_each_text"
            } else {
                "jsonb_each"
            }
        ))),
    }
}

/// `jsonb_object_keys`, in the order Postgres stores them.
pub fn object_keys(text: &str, document: bool) -> Res<Vec<String>> {
    match parse_as(text, document)? {
        Node::Object(fields) => Ok(fields.into_iter().map(|(k, _)| k).collect()),
        n => Err(invalid(format!(
            "cannot call jsonb_object_keys on {}",
            match n {
                Node::Array(_) => "an array",
                _ => "a scalar",
            }
        ))),
    }
}

/// One step into a document, as the operator that takes it reads it: `->` with text names
/// only a member, with an integer only an element; a path element (`#>` reads `'{a,0}'`)
/// is a member of an object and, if it reads as an integer, an element of an array.
pub enum Step {
    /// `-> 'text'`: an object's member (nothing in an array).
    Key(String),
    /// `-> int`: an array's element, negative from the end (nothing in an object; a jsonb
    /// scalar is a one-element array to it, as Postgres stores one).
    Index(i64),
    /// An element of a path (`#>`, `jsonb_extract_path`): an object's member, or an
    /// array's element if it reads as an integer.
    Path(String),
}

impl Step {
    pub fn of(s: &str) -> Step {
        Step::Path(s.to_owned())
    }

    /// The member name this step looks up in an object, if any.
    fn key(&self) -> Option<&str> {
        match self {
            Step::Key(k) | Step::Path(k) => Some(k),
            Step::Index(_) => None,
        }
    }

    /// The element this step picks from an array of `len` elements, if any.
    fn element(&self, len: usize) -> Option<usize> {
        let i = match self {
            Step::Index(i) => *i,
            Step::Path(p) => p.trim().parse::<i64>().ok()?,
            Step::Key(_) => return None,
        };
        let i = if i < 0 { len as i64 + i } else { i };
        usize::try_from(i).ok().filter(|&i| i < len)
    }
}

fn step<'a>(n: &'a Node, st: &Step) -> Option<&'a Node> {
    match n {
        Node::Object(m) => {
            let k = st.key()?;
            m.iter().find(|(key, _)| key == k).map(|(_, v)| v)
        }
        Node::Array(a) => st.element(a.len()).map(|i| &a[i]),
        _ => None,
    }
}

/// `->`, `->>`, `#>`, `#>>`: the value at `path` as jsonb text in its canonical form, or with
/// `as_text` a string without quotes and JSON null as SQL NULL; NULL where the path leads
/// nowhere.
pub fn get(text: &str, path: &[Step], as_text: bool) -> Res<Option<String>> {
    let doc = parse(text)?;
    let mut at = Some(&doc);
    // a scalar document is a one-element array to `->` (Postgres stores it as one)
    if let ([st @ Step::Index(_)], false) = (path, matches!(doc, Node::Object(_) | Node::Array(_)))
    {
        return Ok(st.element(1).and_then(|_| element_text(&doc, as_text)));
    }
    for st in path {
        at = at.and_then(|n| step(n, st));
    }
    Ok(at.and_then(|n| element_text(n, as_text)))
}

/// `->`, `->>`, `#>`, `#>>` on `json`: the value at `path` as the document writes it
/// (Postgres' json operators cut it out of the text: white space and key order kept; of a
/// repeated key, the last), or with `as_text` a string without quotes and JSON null as SQL
/// NULL; NULL where the path leads nowhere. The document is a `json` value, checked when it
/// became one (`json_checked`); the walk reads only the members it passes.
pub fn get_json(text: &str, path: &[Step], as_text: bool) -> Res<Option<String>> {
    let mut span = (0, text.len());
    for st in path {
        match raw_step(text, span, st)? {
            Some(s) => span = s,
            None => return Ok(None),
        }
    }
    let raw = text[span.0..span.1].trim_matches([' ', '\t', '\n', '\r']);
    Ok(match (as_text, raw.as_bytes().first()) {
        (true, Some(b'"')) => Some(
            Parser {
                s: raw.as_bytes(),
                at: 0,
                document: false,
            }
            .string()?,
        ),
        (true, _) if raw == "null" => None,
        _ => Some(raw.to_owned()),
    })
}

/// One step into the value at `span` of a checked document: the span of the member or
/// element it names, if any.
fn raw_step(text: &str, span: (usize, usize), st: &Step) -> Res<Option<(usize, usize)>> {
    let mut p = Parser {
        s: &text.as_bytes()[..span.1],
        at: span.0,
        document: false,
    };
    p.ws();
    let open = p.peek();
    if !matches!(open, Some(b'{' | b'[')) {
        return Ok(None);
    }
    p.at += 1;
    p.ws();
    if matches!(p.peek(), Some(b'}' | b']')) {
        return Ok(None);
    }
    let mut found = None;
    let mut elements = Vec::new();
    loop {
        p.ws();
        let name = match open {
            Some(b'{') => {
                let name = p.string()?;
                p.ws();
                p.at += 1; // the colon
                p.ws();
                Some(name)
            }
            _ => None,
        };
        let start = p.at;
        p.value(0, "JSON value")?;
        let item = (start, p.at);
        match name {
            Some(n) if Some(n.as_str()) == st.key() => found = Some(item),
            Some(_) => {}
            None => elements.push(item),
        }
        p.ws();
        match p.peek() {
            Some(b',') => p.at += 1,
            _ => break,
        }
    }
    Ok(match open {
        Some(b'[') => st.element(elements.len()).map(|i| elements[i]),
        _ => found,
    })
}

/// Whether two values are equal as jsonb (numbers by value).
fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Number(x), Node::Number(y)) => {
            let (mut kx, mut ky) = (Vec::new(), Vec::new());
            number_key(&mut kx, x);
            number_key(&mut ky, y);
            kx == ky
        }
        (Node::Null, Node::Null) => true,
        (Node::Bool(x), Node::Bool(y)) => x == y,
        (Node::Str(x), Node::Str(y)) => x == y,
        (Node::Array(x), Node::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Node::Object(x), Node::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
        }
        _ => false,
    }
}

/// Postgres' `@>`: every pair of an object on the right is in the left (recursively),
/// every element of an array on the right is contained by some element of the left (and
/// an array contains a scalar it has as an element, at the top level); scalars are equal.
#[recursive::recursive]
fn contains_node(a: &Node, b: &Node, top: bool) -> bool {
    match (a, b) {
        (Node::Object(x), Node::Object(y)) => y.iter().all(|(k, vb)| {
            x.iter()
                .find(|(ka, _)| ka == k)
                .is_some_and(|(_, va)| contains_node(va, vb, false))
        }),
        (Node::Array(x), Node::Array(y)) => y.iter().all(|vb| match vb {
            Node::Array(_) | Node::Object(_) => x.iter().any(|va| contains_node(va, vb, false)),
            scalar => x.iter().any(|va| same(va, scalar)),
        }),
        (Node::Array(x), scalar) if top && !matches!(scalar, Node::Object(_)) => {
            x.iter().any(|va| same(va, scalar))
        }
        (Node::Array(_) | Node::Object(_), _) | (_, Node::Array(_) | Node::Object(_)) => false,
        (x, y) => same(x, y),
    }
}

/// `a @> b`.
pub fn contains(a: &str, b: &str) -> Res<bool> {
    Ok(contains_node(&parse(a)?, &parse(b)?, true))
}

/// `?`: a top-level key of an object, or a string element of an array (or the string
/// itself).
/// With `all`, `?&` (every key there), else `?|` (any): the document read once.
pub fn has_keys<K: AsRef<str>>(text: &str, keys: &[K], all: bool) -> Res<bool> {
    let doc = parse(text)?;
    let has = |key: &str| match &doc {
        Node::Object(m) => m.iter().any(|(k, _)| k == key),
        Node::Array(a) => a.iter().any(|n| matches!(n, Node::Str(s) if s == key)),
        Node::Str(s) => s == key,
        _ => false,
    };
    Ok(if all {
        keys.iter().all(|k| has(k.as_ref()))
    } else {
        keys.iter().any(|k| has(k.as_ref()))
    })
}

/// An object's keys in Postgres' order: shorter first, then bytewise.
pub(crate) fn key_order(fields: &mut [(String, Node)]) {
    fields.sort_by(|(a, _), (b, _)| {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.as_bytes().cmp(b.as_bytes()))
    });
}

/// A value's jsonb text (objects an edit built have had their keys put in order).
pub(crate) fn text_of(n: &Node) -> String {
    let mut out = String::new();
    write(&mut out, n);
    out
}

/// `a || b`: objects merged (the right's value for a key both have), arrays concatenated,
/// a non-array side taken as a one-element array.
pub fn concat(a: &str, b: &str) -> Res<String> {
    let (a, b) = (parse(a)?, parse(b)?);
    let out = match (a, b) {
        (Node::Object(mut x), Node::Object(y)) => {
            for (k, v) in y {
                x.retain(|(key, _)| *key != k);
                x.push((k, v));
            }
            key_order(&mut x);
            Node::Object(x)
        }
        (a, b) => {
            let items = |n: Node| match n {
                Node::Array(items) => items,
                other => vec![other],
            };
            let mut x = items(a);
            x.extend(items(b));
            Node::Array(x)
        }
    };
    Ok(text_of(&out))
}

/// `jsonb_pretty`: one value per line, indented by four spaces, as Postgres prints it (an
/// empty container too: `[` and `]` on two lines).
pub fn pretty(text: &str) -> Res<String> {
    #[recursive::recursive]
    fn put(out: &mut String, n: &Node, depth: usize) {
        let pad = |out: &mut String, d: usize| out.push_str(&"    ".repeat(d));
        match n {
            Node::Array(items) => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    pad(out, depth + 1);
                    put(out, v, depth + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push(']');
            }
            Node::Object(fields) => {
                out.push_str("{\n");
                for (i, (k, v)) in fields.iter().enumerate() {
                    pad(out, depth + 1);
                    write_str(out, k);
                    out.push_str(": ");
                    put(out, v, depth + 1);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push('}');
            }
            other => write(out, other),
        }
    }
    let mut out = String::new();
    put(&mut out, &parse(text)?, 0);
    Ok(out)
}

/// `jsonb_strip_nulls`: every object field whose value is null removed, at any depth
/// (nulls in arrays stay).
pub fn strip_nulls(text: &str) -> Res<String> {
    #[recursive::recursive]
    fn strip(n: Node) -> Node {
        match n {
            Node::Object(m) => Node::Object(
                m.into_iter()
                    .filter(|(_, v)| !matches!(v, Node::Null))
                    .map(|(k, v)| (k, strip(v)))
                    .collect(),
            ),
            Node::Array(a) => Node::Array(a.into_iter().map(strip).collect()),
            other => other,
        }
    }
    Ok(text_of(&strip(parse(text)?)))
}

/// What [`edit_path`] does at the end of a path.
pub enum PathEdit<'a> {
    /// `jsonb_set`: replace (or, with `create`, add) the value there
    Set { value: &'a str, create: bool },
    /// `jsonb_insert`: insert before (or `after`) an array element, or add a new key
    Insert { value: &'a str, after: bool },
    /// `#-`: remove the element or key there
    Delete,
}

fn not_an_integer(pos: usize, step: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        format!("path element at position {pos} is not an integer: \"{step}\""),
    )
}

/// `jsonb_set`, `jsonb_insert` and `#-` as Postgres: a path through objects (by key) and
/// arrays (by index, negative from the end); a path that leads nowhere before its last step
/// leaves the document as it was; 22023 for a scalar document (`cannot set path in
/// scalar`, `cannot delete path in scalar`) or an existing key under `jsonb_insert`.
pub fn edit_path(text: &str, path: &[&str], edit: &PathEdit<'_>) -> Res<String> {
    let mut doc = parse(text)?;
    let scalar = !matches!(doc, Node::Array(_) | Node::Object(_));
    if scalar {
        return Err(invalid(
            match edit {
                PathEdit::Delete => "cannot delete path in scalar",
                _ => "cannot set path in scalar",
            }
            .into(),
        ));
    }
    let value = match edit {
        PathEdit::Set { value, .. } | PathEdit::Insert { value, .. } => Some(parse(value)?),
        PathEdit::Delete => None,
    };
    if !path.is_empty() {
        edit_at(&mut doc, path, 1, edit, value)?;
    }
    Ok(text_of(&doc))
}

#[recursive::recursive]
fn edit_at(
    n: &mut Node,
    path: &[&str],
    pos: usize,
    edit: &PathEdit<'_>,
    value: Option<Node>,
) -> Res<()> {
    let (step, rest) = (path[0], &path[1..]);
    let last = rest.is_empty();
    match n {
        Node::Object(fields) => {
            let at = fields.iter().position(|(k, _)| k == step);
            if !last {
                if let Some(i) = at {
                    edit_at(&mut fields[i].1, rest, pos + 1, edit, value)?;
                }
                return Ok(());
            }
            match (edit, at) {
                (PathEdit::Delete, Some(i)) => {
                    fields.remove(i);
                }
                (PathEdit::Set { .. }, Some(i)) => {
                    if let Some(v) = value {
                        fields[i].1 = v;
                    }
                }
                (PathEdit::Set { create: true, .. } | PathEdit::Insert { .. }, None) => {
                    if let Some(v) = value {
                        fields.push((step.to_owned(), v));
                        key_order(fields);
                    }
                }
                (PathEdit::Insert { .. }, Some(_)) => {
                    return Err(WeirError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        "cannot replace existing key",
                    )
                    .with_hint("Try using the function jsonb_set to replace key value."));
                }
                _ => {}
            }
        }
        Node::Array(items) => {
            let i: i64 = step.trim().parse().map_err(|_| not_an_integer(pos, step))?;
            let len = items.len() as i64;
            let idx = if i < 0 { len + i } else { i };
            if !last {
                if (0..len).contains(&idx) {
                    edit_at(&mut items[idx as usize], rest, pos + 1, edit, value)?;
                }
                return Ok(());
            }
            match edit {
                PathEdit::Delete => {
                    if (0..len).contains(&idx) {
                        items.remove(idx as usize);
                    }
                }
                PathEdit::Set { create, .. } => {
                    let Some(v) = value else { return Ok(()) };
                    if (0..len).contains(&idx) {
                        items[idx as usize] = v;
                    } else if *create {
                        // past either end: added at that end
                        if idx < 0 {
                            items.insert(0, v);
                        } else {
                            items.push(v);
                        }
                    }
                }
                PathEdit::Insert { after, .. } => {
                    let Some(v) = value else { return Ok(()) };
                    let at = if idx < 0 {
                        0
                    } else if idx >= len {
                        len as usize
                    } else {
                        idx as usize + usize::from(*after)
                    };
                    items.insert(at, v);
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// What `jsonb - x` removes.
pub enum Removal<'a> {
    /// a key of an object, or the equal string elements of an array
    Key(&'a str),
    /// several keys (`- text[]`)
    Keys(Vec<&'a str>),
    /// an array element (negative from the end)
    Index(i64),
}

/// `a - x` as Postgres: 22023 for a key removed from a scalar or an index from an object.
pub fn remove(text: &str, what: &Removal<'_>) -> Res<String> {
    let doc = parse(text)?;
    let gone = |k: &str| match what {
        Removal::Key(key) => *key == k,
        Removal::Keys(keys) => keys.contains(&k),
        Removal::Index(_) => false,
    };
    let out = match (doc, what) {
        (Node::Object(m), Removal::Key(_) | Removal::Keys(_)) => {
            Node::Object(m.into_iter().filter(|(k, _)| !gone(k)).collect())
        }
        (Node::Array(a), Removal::Key(_) | Removal::Keys(_)) => Node::Array(
            a.into_iter()
                .filter(|n| !matches!(n, Node::Str(s) if gone(s)))
                .collect(),
        ),
        (Node::Array(mut a), Removal::Index(i)) => {
            let i = if *i < 0 { a.len() as i64 + i } else { *i };
            if let Ok(i) = usize::try_from(i)
                && i < a.len()
            {
                a.remove(i);
            }
            Node::Array(a)
        }
        (Node::Object(_), Removal::Index(_)) => {
            return Err(invalid(
                "cannot delete from object using integer index".into(),
            ));
        }
        _ => return Err(invalid("cannot delete from scalar".into())),
    };
    Ok(text_of(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_match_postgres() {
        // each pair checked against PostgreSQL 15 (SELECT '<in>'::jsonb)
        let cases = [
            (r#"{"b":1,"a":2}"#, r#"{"a": 2, "b": 1}"#),
            (r#"{"aa":1,"b":2}"#, r#"{"b": 2, "aa": 1}"#),
            (r#"{"a":1,"a":2}"#, r#"{"a": 2}"#),
            ("[1,2 , 3]", "[1, 2, 3]"),
            ("1.50", "1.50"),
            ("1e2", "100"),
            ("1.5e-1", "0.15"),
            ("-0", "0"),
            ("0.000", "0.000"),
            ("12E-5", "0.00012"),
            (r#""\u00e9\n""#, "\"é\\n\""),
            (r#""\ud83d\ude00""#, "\"😀\""),
            ("  true ", "true"),
            ("null", "null"),
            (r#"{"a":{"c":[],"b":{}}}"#, r#"{"a": {"b": {}, "c": []}}"#),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn invalid_json_is_refused() {
        for bad in [
            "",
            "{",
            "{'a': 1}",
            "[1,]",
            "01",
            "1.",
            "tru",
            "{\"a\" 1}",
            "1 2",
            "\"\\x\"",
            "\"a\nb\"",
        ] {
            assert_eq!(normalize(bad).unwrap_err().code, "22P02", "{bad:?}");
        }
        assert_eq!(normalize(r#""\u0000""#).unwrap_err().code, "22P05");
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert_eq!(normalize(&deep).unwrap_err().code, "54001");
    }
}
