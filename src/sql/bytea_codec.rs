//! `encode(bytea, format)` and `decode(text, format)` as Postgres 15 has them (its
//! `encode.c`), for the formats `base64`, `hex` and `escape` (named in any case):
//!
//! - `base64`: padded with `=`, a newline after every 76 characters written (also at the
//!   very end when the text fills its last line); decoding skips spaces, tabs and
//!   newlines, and refuses a missing or misplaced `=` and any other symbol (22023).
//! - `hex`: lower-case digits; decoding skips white space between pairs, refuses an odd
//!   number of digits and a non-digit (22023).
//! - `escape`: a zero byte and bytes from 0x80 up as `\ooo`, a backslash as `\\`, the
//!   rest as they are; decoding reads `\ooo` and `\\` back (22P02 for another `\`).
//!
//! DataFusion's own `encode`/`decode` write base64 without padding or line breaks and
//! know no `escape`; these take their names. One pass per value, no allocation per byte.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result as DfResult;
use datafusion::error::DataFusionError;

use crate::error::{WeirError, sqlstate};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    Base64,
    Hex,
    Escape,
}

impl Format {
    pub fn named(name: &str) -> Result<Format, WeirError> {
        match name.to_ascii_lowercase().as_str() {
            "base64" => Ok(Format::Base64),
            "hex" => Ok(Format::Hex),
            "escape" => Ok(Format::Escape),
            _ => Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unrecognized encoding: \"{name}\""),
            )),
        }
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_LINE: usize = 76;

/// `bytes` in `format`, appended to `out`.
pub fn encode_into(bytes: &[u8], format: Format, out: &mut String) {
    match format {
        Format::Hex => {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            out.reserve(bytes.len() * 2);
            for b in bytes {
                out.push(DIGITS[(b >> 4) as usize] as char);
                out.push(DIGITS[(b & 15) as usize] as char);
            }
        }
        Format::Escape => {
            for &b in bytes {
                match b {
                    0 | 0x80..=0xff => {
                        out.push('\\');
                        out.push((b'0' + (b >> 6)) as char);
                        out.push((b'0' + ((b >> 3) & 7)) as char);
                        out.push((b'0' + (b & 7)) as char);
                    }
                    b'\\' => out.push_str("\\\\"),
                    _ => out.push(b as char),
                }
            }
        }
        Format::Base64 => {
            out.reserve(bytes.len() / 3 * 4 + bytes.len() / 57 + 4);
            let mut line = 0;
            for chunk in bytes.chunks(3) {
                let v = (chunk[0] as u32) << 16
                    | (chunk.get(1).copied().unwrap_or(0) as u32) << 8
                    | chunk.get(2).copied().unwrap_or(0) as u32;
                out.push(B64[(v >> 18) as usize & 63] as char);
                out.push(B64[(v >> 12) as usize & 63] as char);
                match chunk.len() {
                    1 => out.push_str("=="),
                    2 => {
                        out.push(B64[(v >> 6) as usize & 63] as char);
                        out.push('=');
                    }
                    _ => {
                        out.push(B64[(v >> 6) as usize & 63] as char);
                        out.push(B64[v as usize & 63] as char);
                        // (Postgres breaks the line once a full group fills it)
                        line += 4;
                        if line >= B64_LINE {
                            out.push('\n');
                            line = 0;
                        }
                    }
                }
            }
        }
    }
}

fn invalid(msg: String) -> WeirError {
    WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, msg)
}

/// The symbol starting at byte `i` of `text` (a whole character), for messages.
fn symbol_at(text: &str, i: usize) -> &str {
    let end = (i + 1..=text.len())
        .find(|&e| text.is_char_boundary(e))
        .unwrap_or(text.len());
    &text[i..end]
}

/// `text` read in `format`, appended to `out`.
pub fn decode_into(text: &str, format: Format, out: &mut Vec<u8>) -> Result<(), WeirError> {
    let s = text.as_bytes();
    match format {
        Format::Hex => {
            let digit = |i: usize| -> Result<u8, WeirError> {
                (s[i] as char).to_digit(16).map(|d| d as u8).ok_or_else(|| {
                    invalid(format!(
                        "invalid hexadecimal digit: \"{}\"",
                        symbol_at(text, i)
                    ))
                })
            };
            let mut i = 0;
            while i < s.len() {
                if matches!(s[i], b' ' | b'\n' | b'\t' | b'\r') {
                    i += 1;
                    continue;
                }
                let hi = digit(i)?;
                if i + 1 >= s.len() {
                    return Err(invalid(
                        "invalid hexadecimal data: odd number of digits".into(),
                    ));
                }
                let lo = digit(i + 1)?;
                out.push(hi << 4 | lo);
                i += 2;
            }
        }
        Format::Escape => {
            let octal = |c: u8, max: u8| (b'0'..=max).contains(&c);
            let mut i = 0;
            while i < s.len() {
                if s[i] != b'\\' {
                    out.push(s[i]);
                    i += 1;
                } else if i + 3 < s.len()
                    && octal(s[i + 1], b'3')
                    && octal(s[i + 2], b'7')
                    && octal(s[i + 3], b'7')
                {
                    out.push((s[i + 1] - b'0') << 6 | (s[i + 2] - b'0') << 3 | (s[i + 3] - b'0'));
                    i += 4;
                } else if i + 1 < s.len() && s[i + 1] == b'\\' {
                    out.push(b'\\');
                    i += 2;
                } else {
                    return Err(WeirError::new(
                        sqlstate::INVALID_TEXT_REPRESENTATION,
                        "invalid input syntax for type bytea",
                    ));
                }
            }
        }
        Format::Base64 => {
            // as Postgres: `=` ends the data (after two or three symbols of a group)
            let (mut buf, mut pos, mut end) = (0u32, 0, 0);
            for (i, &c) in s.iter().enumerate() {
                if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                    continue;
                }
                let b = if c == b'=' {
                    if end == 0 {
                        end = match pos {
                            2 => 1,
                            3 => 2,
                            _ => {
                                return Err(invalid(
                                    "invalid symbol \"=\" found while decoding base64 sequence"
                                        .into(),
                                ));
                            }
                        };
                    }
                    0
                } else {
                    match B64.iter().position(|&x| x == c) {
                        Some(v) => v as u32,
                        None => {
                            return Err(invalid(format!(
                                "invalid symbol \"{}\" found while decoding base64 sequence",
                                symbol_at(text, i)
                            )));
                        }
                    }
                };
                buf = buf << 6 | b;
                pos += 1;
                if pos == 4 {
                    out.push((buf >> 16) as u8);
                    if end == 0 || end > 1 {
                        out.push((buf >> 8) as u8);
                    }
                    if end == 0 || end > 2 {
                        out.push(buf as u8);
                    }
                    buf = 0;
                    pos = 0;
                }
            }
            if pos != 0 {
                return Err(invalid("invalid base64 end sequence".into()).with_hint(
                    "Input data is missing padding, is truncated, or is otherwise corrupted.",
                ));
            }
        }
    }
    Ok(())
}

/// The row of an argument to read for row `i`: a constant argument has only one.
fn row(len: usize, i: usize) -> usize {
    if len == 1 { 0 } else { i }
}

fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The format of row `i` (the second argument), or None where it is NULL.
fn format_at(
    formats: &datafusion::arrow::array::StringArray,
    i: usize,
) -> DfResult<Option<Format>> {
    let k = row(formats.len(), i);
    if formats.is_null(k) {
        return Ok(None);
    }
    Format::named(formats.value(k)).map(Some).map_err(external)
}

/// `encode(bytes, format)` over arrays (either may be one row, a constant).
pub fn encode(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let bytes = cast(&args[0], &DataType::Binary)?;
    let bytes = bytes.as_binary::<i32>();
    let formats = cast(&args[1], &DataType::Utf8)?;
    let formats = formats.as_string::<i32>();
    let mut out = StringBuilder::with_capacity(rows, rows * 16);
    let mut text = String::new();
    for i in 0..rows {
        let k = row(bytes.len(), i);
        match format_at(formats, i)? {
            Some(f) if !bytes.is_null(k) => {
                text.clear();
                encode_into(bytes.value(k), f, &mut text);
                out.append_value(&text);
            }
            _ => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `decode(text, format)` over arrays (either may be one row, a constant).
pub fn decode(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let texts = cast(&args[0], &DataType::Utf8)?;
    let texts = texts.as_string::<i32>();
    let formats = cast(&args[1], &DataType::Utf8)?;
    let formats = formats.as_string::<i32>();
    let mut out = BinaryBuilder::with_capacity(rows, rows * 16);
    let mut bytes = Vec::new();
    for i in 0..rows {
        let k = row(texts.len(), i);
        match format_at(formats, i)? {
            Some(f) if !texts.is_null(k) => {
                bytes.clear();
                decode_into(texts.value(k), f, &mut bytes).map_err(external)?;
                out.append_value(&bytes);
            }
            _ => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// Text as Postgres reads it into a `bytea` (`byteain`): `\x` then hex digits (white
/// space between pairs allowed), else the escape form (`\ooo`, `\\`).
pub fn bytea_in(text: &str) -> Result<Vec<u8>, WeirError> {
    let mut out = Vec::with_capacity(text.len());
    bytea_in_into(text, &mut out)?;
    Ok(out)
}

/// [`bytea_in`], appended to `out`.
fn bytea_in_into(text: &str, out: &mut Vec<u8>) -> Result<(), WeirError> {
    match text.strip_prefix("\\x") {
        Some(hex) => decode_into(hex, Format::Hex, out),
        None => decode_into(text, Format::Escape, out),
    }
}

/// [`bytea_in`] over an array of texts.
pub fn bytea_in_array(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let texts = cast(&args[0], &DataType::Utf8)?;
    let texts = texts.as_string::<i32>();
    let mut out = BinaryBuilder::with_capacity(rows, rows * 16);
    let mut bytes = Vec::new();
    for v in texts.iter() {
        match v {
            // (text without a backslash is its own bytes)
            Some(t) if !t.contains('\\') => out.append_value(t.as_bytes()),
            Some(t) => {
                bytes.clear();
                bytea_in_into(t, &mut bytes).map_err(external)?;
                out.append_value(&bytes);
            }
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// A `bytea` argument: bytes as they are, text (an untyped literal, `'\x0102'`) read as
/// Postgres reads a `bytea` literal.
fn bytea_arg(a: &ArrayRef) -> DfResult<ArrayRef> {
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            bytea_in_array(std::slice::from_ref(a), a.len())
        }
        _ => Ok(cast(a, &DataType::Binary)?),
    }
}

/// `get_byte(bytea, n)`: the n-th byte (from 0) as an integer; 2202E past the end, as
/// Postgres words it (`index 5 out of valid range, 0..1`).
pub fn get_byte(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let bytes = bytea_arg(&args[0])?;
    let bytes = bytes.as_binary::<i32>();
    let index = cast(&args[1], &DataType::Int64)?;
    let index = index.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let mut out = datafusion::arrow::array::Int32Builder::with_capacity(rows);
    for i in 0..rows {
        let (k, j) = (row(bytes.len(), i), row(index.len(), i));
        if bytes.is_null(k) || index.is_null(j) {
            out.append_null();
            continue;
        }
        let (b, n) = (bytes.value(k), index.value(j));
        match usize::try_from(n).ok().and_then(|n| b.get(n)) {
            Some(v) => out.append_value(i32::from(*v)),
            None => {
                return Err(external(WeirError::new(
                    "2202E",
                    format!("index {n} out of valid range, 0..{}", b.len() as i64 - 1),
                )));
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `get_bit(bytes, n)`: bit `n % 8` (from the least significant) of byte `n / 8`, as
/// Postgres numbers them; `set_bit(bytes, n, 0 | 1)` and `set_byte(bytes, n, v)` (v's low
/// eight bits) give the bytes with it changed. An index past the end is 2202E.
pub fn bit_or_byte(name: &'static str, args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let bits = name != "set_byte";
    let bytes = bytea_arg(&args[0])?;
    let bytes = bytes.as_binary::<i32>();
    let index = cast(&args[1], &DataType::Int64)?;
    let index = index.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let value = match args.get(2) {
        Some(v) => Some(cast(v, &DataType::Int64)?),
        None => None,
    };
    let value = value
        .as_ref()
        .map(|v| v.as_primitive::<datafusion::arrow::datatypes::Int64Type>());
    let mut got = datafusion::arrow::array::Int32Builder::with_capacity(rows);
    let mut set = BinaryBuilder::with_capacity(rows, 0);
    for i in 0..rows {
        let (k, j) = (row(bytes.len(), i), row(index.len(), i));
        let v = value.map(|v| (v, row(v.len(), i)));
        if bytes.is_null(k) || index.is_null(j) || v.is_some_and(|(v, r)| v.is_null(r)) {
            got.append_null();
            set.append_null();
            continue;
        }
        let (b, n) = (bytes.value(k), index.value(j));
        let units = b.len() as i64 * if bits { 8 } else { 1 };
        if n < 0 || n >= units {
            return Err(external(WeirError::new(
                "2202E",
                format!("index {n} out of valid range, 0..{}", units - 1),
            )));
        }
        let (byte, bit) = if bits {
            ((n / 8) as usize, (n % 8) as u32)
        } else {
            (n as usize, 0)
        };
        match v.map(|(v, r)| v.value(r)) {
            None => got.append_value(i32::from((b[byte] >> bit) & 1)),
            Some(x) => {
                let mut out = b.to_vec();
                if bits {
                    if x != 0 && x != 1 {
                        return Err(external(WeirError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            "new bit must be 0 or 1",
                        )));
                    }
                    out[byte] = (out[byte] & !(1 << bit)) | ((x as u8) << bit);
                } else {
                    out[byte] = (x & 0xff) as u8;
                }
                set.append_value(out);
            }
        }
    }
    Ok(if value.is_some() {
        Arc::new(set.finish())
    } else {
        Arc::new(got.finish())
    })
}

/// `bit_count(bytes)`: the bits set (a bigint).
pub fn bit_count(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let bytes = bytea_arg(&args[0])?;
    let bytes = bytes.as_binary::<i32>();
    let mut out = datafusion::arrow::array::Int64Builder::with_capacity(rows);
    for i in 0..rows {
        let k = row(bytes.len(), i);
        if bytes.is_null(k) {
            out.append_null();
        } else {
            out.append_value(
                bytes
                    .value(k)
                    .iter()
                    .map(|b| i64::from(b.count_ones()))
                    .sum(),
            );
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The encodings `convert_from`/`convert_to` know: UTF8 (the database's) and LATIN1.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    Latin1,
}

fn encoding_named(name: &str) -> Result<Encoding, WeirError> {
    let key: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    match key.as_str() {
        "UTF8" | "UNICODE" | "SQLASCII" => Ok(Encoding::Utf8),
        "LATIN1" | "ISO88591" => Ok(Encoding::Latin1),
        _ => Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid source encoding name \"{name}\""),
        )),
    }
}

/// `convert_from(bytea, encoding)`: the bytes read as text in that encoding; bytes that
/// are not that encoding are 22021, as Postgres (`invalid byte sequence for encoding
/// "UTF8": 0xff`).
pub fn convert_from(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let bytes = bytea_arg(&args[0])?;
    let bytes = bytes.as_binary::<i32>();
    let names = cast(&args[1], &DataType::Utf8)?;
    let names = names.as_string::<i32>();
    let mut out = StringBuilder::with_capacity(rows, rows * 16);
    for i in 0..rows {
        let (k, j) = (row(bytes.len(), i), row(names.len(), i));
        if bytes.is_null(k) || names.is_null(j) {
            out.append_null();
            continue;
        }
        let b = bytes.value(k);
        match encoding_named(names.value(j)).map_err(external)? {
            Encoding::Utf8 => match std::str::from_utf8(b) {
                Ok(t) if !t.contains('\0') => out.append_value(t),
                Ok(_) => {
                    return Err(external(WeirError::new(
                        "22021",
                        "invalid byte sequence for encoding \"UTF8\": 0x00",
                    )));
                }
                Err(e) => {
                    let bad = b.get(e.valid_up_to()).copied().unwrap_or_default();
                    return Err(external(WeirError::new(
                        "22021",
                        format!("invalid byte sequence for encoding \"UTF8\": 0x{bad:02x}"),
                    )));
                }
            },
            Encoding::Latin1 => {
                let t: String = b.iter().map(|&c| char::from(c)).collect();
                out.append_value(t);
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `convert_to(text, encoding)`: the text's bytes in that encoding; a character the
/// encoding has no byte for is 22P05, as Postgres words it.
pub fn convert_to(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let texts = cast(&args[0], &DataType::Utf8)?;
    let texts = texts.as_string::<i32>();
    let names = cast(&args[1], &DataType::Utf8)?;
    let names = names.as_string::<i32>();
    let mut out = BinaryBuilder::with_capacity(rows, rows * 16);
    let mut buf = Vec::new();
    for i in 0..rows {
        let (k, j) = (row(texts.len(), i), row(names.len(), i));
        if texts.is_null(k) || names.is_null(j) {
            out.append_null();
            continue;
        }
        let t = texts.value(k);
        match encoding_named(names.value(j)).map_err(external)? {
            Encoding::Utf8 => out.append_value(t.as_bytes()),
            Encoding::Latin1 => {
                buf.clear();
                for c in t.chars() {
                    let code = u32::from(c);
                    if code > 0xff {
                        let mut utf8 = [0u8; 4];
                        let hex: Vec<String> = c
                            .encode_utf8(&mut utf8)
                            .bytes()
                            .map(|b| format!("0x{b:02x}"))
                            .collect();
                        return Err(external(WeirError::new(
                            "22P05",
                            format!(
                                "character with byte sequence {} in encoding \"UTF8\" has no equivalent in encoding \"LATIN1\"",
                                hex.join(" ")
                            ),
                        )));
                    }
                    buf.push(code as u8);
                }
                out.append_value(&buf);
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(b: &[u8], f: Format) -> String {
        let mut s = String::new();
        encode_into(b, f, &mut s);
        s
    }

    fn dec(t: &str, f: Format) -> Result<Vec<u8>, String> {
        let mut v = Vec::new();
        decode_into(t, f, &mut v).map_err(|e| e.to_string())?;
        Ok(v)
    }

    #[test]
    fn base64_as_postgres_writes_and_reads_it() {
        assert_eq!(enc(b"", Format::Base64), "");
        assert_eq!(enc(b"a", Format::Base64), "YQ==");
        assert_eq!(enc(b"ab", Format::Base64), "YWI=");
        assert_eq!(enc(b"Hello World", Format::Base64), "SGVsbG8gV29ybGQ=");
        // 57 bytes fill one 76-character line: Postgres ends it with a newline
        let line = enc(&[b'a'; 57], Format::Base64);
        assert_eq!(line.len(), 77);
        assert!(line.ends_with('\n'));
        let two = enc(&[b'a'; 60], Format::Base64);
        assert_eq!(two.matches('\n').count(), 1);
        assert_eq!(dec(&two, Format::Base64).unwrap(), vec![b'a'; 60]);
        assert_eq!(dec("YW\nI=", Format::Base64).unwrap(), b"ab");
        assert!(
            dec("YWI", Format::Base64)
                .unwrap_err()
                .contains("end sequence")
        );
        assert!(dec("Y===", Format::Base64).unwrap_err().contains("\"=\""));
        assert!(dec("YW*=", Format::Base64).unwrap_err().contains("\"*\""));
    }

    #[test]
    fn hex_and_escape_as_postgres() {
        assert_eq!(enc(b"\x00\xffA", Format::Hex), "00ff41");
        assert_eq!(dec("00 FF\n41", Format::Hex).unwrap(), b"\x00\xffA");
        assert!(dec("abc", Format::Hex).unwrap_err().contains("odd number"));
        assert!(dec("zz", Format::Hex).unwrap_err().contains("\"z\""));
        assert_eq!(enc(b"a\x00b\\\xe9", Format::Escape), "a\\000b\\\\\\351");
        assert_eq!(
            dec("a\\000b\\\\\\351", Format::Escape).unwrap(),
            b"a\x00b\\\xe9"
        );
        assert!(dec("a\\9", Format::Escape).is_err());
        assert!(Format::named("HEX").is_ok());
        assert_eq!(bytea_in("\\x00 ff").unwrap(), b"\x00\xff");
        assert_eq!(bytea_in("a\\000b").unwrap(), b"a\x00b");
        assert!(bytea_in("\\xzz").is_err());
        assert!(Format::named("base32").is_err());
    }
}
