//! Postgres' text functions that need its exact algorithm, registered by
//! [`crate::sql::pg_functions`]:
//!
//! - `hashtext(text)` and `hashtextextended(text, seed)`: Postgres' `hash_bytes` /
//!   `hash_bytes_extended` (Bob Jenkins' lookup3, as `src/common/hashfn.c` has it) over the
//!   text's bytes, so a value computed here equals Postgres' (advisory lock keys made with
//!   `pg_advisory_lock(hashtext('name'))` by tools that run against both);
//! - `unistr(text)`: Unicode escapes (`\XXXX`, `\+XXXXXX`, `\uXXXX`, `\UXXXXXXXX`, surrogate
//!   pairs, `\\`) decoded; anything else after a backslash is 42601 `invalid Unicode escape`
//!   (Postgres' code), a code point past U+10FFFF or zero 22023.
//!
//! A NULL argument gives NULL. One pass per batch over the argument arrays.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::DataFusionError;
use datafusion::logical_expr::TypeSignature;

use crate::error::WeirError;
use crate::sql::pg_functions::{PgFunction, immutable};

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// Postgres' `hash_bytes_extended` state after the bytes: (b, c); `seed` None is
/// `hash_bytes` (no perturbation).
fn lookup3(k: &[u8], seed: Option<u64>) -> (u32, u32) {
    let init = 0x9e37_79b9u32
        .wrapping_add(k.len() as u32)
        .wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (init, init, init);
    if let Some(seed) = seed.filter(|s| *s != 0) {
        a = a.wrapping_add((seed >> 32) as u32);
        b = b.wrapping_add(seed as u32);
        mix(&mut a, &mut b, &mut c);
    }
    let word = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let mut rest = k;
    while rest.len() >= 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    // the last 11 bytes, zero-padded (little-endian order; c's lowest byte is not the
    // data's: Postgres adds k[8..11] shifted up by one byte)
    let mut tail = [0u8; 12];
    tail[..rest.len()].copy_from_slice(rest);
    a = a.wrapping_add(word(&tail[0..4]));
    b = b.wrapping_add(word(&tail[4..8]));
    c = c.wrapping_add(word(&tail[8..12]) << 8);
    finish(&mut a, &mut b, &mut c);
    (b, c)
}

/// Postgres' `hash_bytes`.
pub fn hash_bytes(k: &[u8]) -> u32 {
    lookup3(k, None).1
}

/// Postgres' `hash_bytes_extended`.
pub fn hash_bytes_extended(k: &[u8], seed: u64) -> u64 {
    let (b, c) = lookup3(k, Some(seed));
    ((b as u64) << 32) | c as u64
}

fn invalid_escape() -> WeirError {
    WeirError::new("42601", "invalid Unicode escape")
        .with_hint("Unicode escapes must be \\XXXX, \\+XXXXXX, \\uXXXX, or \\UXXXXXXXX.")
}

/// `unistr`'s decoding of one text.
pub fn unistr(s: &str) -> Result<String, WeirError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    // a high surrogate waiting for its low half
    let mut high: Option<u32> = None;
    while let Some((i, ch)) = chars.next() {
        if ch != '\\' {
            if high.is_some() {
                return Err(invalid_surrogate());
            }
            out.push(ch);
            continue;
        }
        let rest = &s[i + 1..];
        let (digits, skip) = if rest.starts_with('\\') {
            if high.is_some() {
                return Err(invalid_surrogate());
            }
            out.push('\\');
            chars.next();
            continue;
        } else if let Some(r) = rest.strip_prefix('+') {
            (r.get(..6), 7)
        } else if let Some(r) = rest.strip_prefix('u') {
            (r.get(..4), 5)
        } else if let Some(r) = rest.strip_prefix('U') {
            (r.get(..8), 9)
        } else {
            (rest.get(..4), 4)
        };
        let code = digits
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(invalid_escape)?;
        for _ in 0..skip {
            chars.next();
        }
        match (high.take(), code) {
            (None, 0xD800..=0xDBFF) => high = Some(code),
            (Some(h), 0xDC00..=0xDFFF) => {
                let c = 0x10000 + ((h - 0xD800) << 10) + (code - 0xDC00);
                out.push(char::from_u32(c).ok_or_else(invalid_escape)?);
            }
            (Some(_), _) | (None, 0xDC00..=0xDFFF) => return Err(invalid_surrogate()),
            (None, c) => out.push(char::from_u32(c).filter(|c| *c != '\0').ok_or_else(|| {
                WeirError::new("22023", format!("invalid Unicode code point: {c:04X}"))
            })?),
        }
    }
    if high.is_some() {
        return Err(invalid_surrogate());
    }
    Ok(out)
}

fn invalid_surrogate() -> WeirError {
    WeirError::new("42601", "invalid Unicode surrogate pair")
}

fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Every function of this module.
pub(crate) fn definitions() -> Vec<PgFunction> {
    vec![
        immutable(
            "hashtext",
            TypeSignature::Any(1),
            |_| DataType::Int32,
            |args, _| {
                let s = cast(&args[0], &DataType::Utf8)?;
                let s = s.as_string::<i32>();
                let out: Int32Array = s
                    .iter()
                    .map(|v| v.map(|v| hash_bytes(v.as_bytes()) as i32))
                    .collect();
                Ok(Arc::new(out) as ArrayRef)
            },
        ),
        immutable(
            "hashtextextended",
            TypeSignature::Any(2),
            |_| DataType::Int64,
            |args, _| {
                let s = cast(&args[0], &DataType::Utf8)?;
                let s = s.as_string::<i32>();
                let seed = cast(&args[1], &DataType::Int64)?;
                let seed = seed.as_primitive::<Int64Type>();
                let out: Int64Array = (0..s.len())
                    .map(|i| {
                        (s.is_valid(i) && seed.is_valid(i)).then(|| {
                            hash_bytes_extended(s.value(i).as_bytes(), seed.value(i) as u64) as i64
                        })
                    })
                    .collect();
                Ok(Arc::new(out) as ArrayRef)
            },
        ),
        immutable(
            "unistr",
            TypeSignature::Any(1),
            |_| DataType::Utf8,
            |args, _| {
                let s = cast(&args[0], &DataType::Utf8)?;
                let s = s.as_string::<i32>();
                let mut out = StringBuilder::with_capacity(s.len(), s.value_data().len());
                for v in s.iter() {
                    match v {
                        Some(v) => out.append_value(unistr(v).map_err(external)?),
                        None => out.append_null(),
                    }
                }
                Ok(Arc::new(out.finish()) as ArrayRef)
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values PostgreSQL 15 gives (`SELECT hashtext('abc')`, ...).
    #[test]
    fn hashes_are_postgres() {
        assert_eq!(hash_bytes(b"abc") as i32, -785388649);
        assert_eq!(hash_bytes(b"") as i32, -1477818771);
        assert_eq!(
            hash_bytes(b"hello world, this is a longer string!") as i32,
            -1018346466
        );
        assert_eq!(hash_bytes_extended(b"abc", 0) as i64, -6747756470228489321);
        assert_eq!(hash_bytes_extended(b"abc", 1) as i64, 2125675926272891485);
    }

    #[test]
    fn unistr_decodes_escapes() {
        assert_eq!(unistr("d\\0061t\\+000061").unwrap(), "data");
        assert_eq!(unistr("\\u00e9\\U0001F600").unwrap(), "é😀");
        assert_eq!(unistr("\\D83D\\DE00 \\\\").unwrap(), "😀 \\");
        assert_eq!(unistr("\\x").unwrap_err().code, "42601");
        assert_eq!(unistr("\\D83D").unwrap_err().code, "42601");
    }
}
