//! Postgres' `uuid` type: stored as its canonical text (32 lowercase hex digits in groups
//! of 8-4-4-4-12), an Arrow `Utf8` whose field says `uuid` (`sql::types::PG_TYPE_KEY`).
//! The canonical text orders as Postgres orders uuids (bytewise), so comparison, sorting,
//! grouping and joins need nothing of their own; what is `uuid`'s own is its input rule
//! ([`canonical`], Postgres' `string_to_uuid`), its 16-byte binary wire form
//! ([`to_bytes`] / [`from_bytes`]) and `gen_random_uuid()` (a version 4 uuid).

use crate::error::{WeirError, sqlstate};

/// Postgres' accepted forms, as `uuid_in` reads them: 32 hex digits (either case), an
/// optional `-` after any group of four (not after the last), the whole optionally in
/// braces. Returns the 16 bytes, or `None` for anything else.
pub fn parse(text: &str) -> Option<[u8; 16]> {
    let b = text.as_bytes();
    let (mut at, end) = match b.first() {
        Some(b'{') => (1, b.len().checked_sub(1).filter(|&e| b[e] == b'}')?),
        _ => (0, b.len()),
    };
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        let hi = hex(*b.get(at)?)?;
        let lo = hex(*b.get(at + 1)?)?;
        *byte = hi << 4 | lo;
        at += 2;
        if i % 2 == 1 && i < 15 && b.get(at) == Some(&b'-') {
            at += 1;
        }
    }
    (at == end).then_some(out)
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// The canonical text of 16 bytes: `a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11`.
pub fn from_bytes(b: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(DIGITS[(byte >> 4) as usize] as char);
        s.push(DIGITS[(byte & 15) as usize] as char);
    }
    s
}

/// The canonical text of a uuid typed by a user, or Postgres' 22P02.
pub fn canonical(text: &str) -> Result<String, WeirError> {
    parse(text).map(|b| from_bytes(&b)).ok_or_else(|| {
        WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type uuid: \"{text}\""),
        )
    })
}

/// The 16 bytes of a stored (canonical) uuid, for the binary wire format.
pub fn to_bytes(canonical: &str) -> Option<[u8; 16]> {
    parse(canonical)
}

/// A random (version 4) uuid, as `gen_random_uuid()` gives.
pub fn random() -> String {
    from_bytes(uuid::Uuid::new_v4().as_bytes())
}

/// `rows` random uuids (`gen_random_uuid()`, `uuid_generate_v4()`).
pub fn random_column(rows: usize) -> datafusion::arrow::array::ArrayRef {
    let mut out = datafusion::arrow::array::StringBuilder::with_capacity(rows, rows * 36);
    for _ in 0..rows {
        out.append_value(random());
    }
    std::sync::Arc::new(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_postgres_reads() {
        let want = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        for ok in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        ] {
            assert_eq!(canonical(ok).unwrap(), want, "{ok}");
        }
        for bad in [
            "",
            "xyz",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
            "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{}",
            "{",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn random_ones_are_version_4_and_differ() {
        let (a, b) = (random(), random());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(canonical(&a).unwrap(), a);
        assert_eq!(from_bytes(&to_bytes(&a).unwrap()), a);
    }
}
