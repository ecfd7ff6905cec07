//! Limits one client or one statement may not pass, in one place: how deep a statement may
//! nest, how much memory a statement may use, how large a value may grow, how many
//! connections may be open (`--max-connections`, counted in `server/connection.rs`). `docs/GUARANTEES.md` ("Limits") lists them with what happens
//! at each.

use crate::error::{Result, WeirError, sqlstate};

pub use crate::sql::depth::MAX_STATEMENT_DEPTH;

/// Stack of every runtime and blocking thread that plans or runs statements. Planning a
/// statement of [`MAX_STATEMENT_DEPTH`] levels needs a few MiB in a debug build; the rest is
/// headroom. (Only touched pages cost memory.)
pub const THREAD_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Largest text or byte value a function may produce (Postgres' limit on one value).
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// A number and the (lower-cased, trimmed) unit after it: `"512 MB"` is (512, "mb").
fn number_and_unit(text: &str) -> Option<(f64, String)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.parse().ok()?, unit.trim().to_ascii_lowercase()))
}

/// Parse a size with an optional unit as Postgres spells them (`kB`, `MB`, `GB`, `TB`, and
/// `B`; also `KiB`/`MiB`/`GiB`): units are powers of 1024. A bare number is in
/// `bare_unit` bytes (Postgres' `work_mem` takes kB).
pub fn parse_size_with(text: &str, bare_unit: u64) -> std::result::Result<usize, String> {
    let (num, unit) =
        number_and_unit(text).ok_or_else(|| format!("'{text}' is not a size (e.g. 512MB, 2GB)"))?;
    let mult: u64 = match unit.as_str() {
        "" => bare_unit,
        "b" => 1,
        "kb" | "k" | "kib" => 1 << 10,
        "mb" | "m" | "mib" => 1 << 20,
        "gb" | "g" | "gib" => 1 << 30,
        "tb" | "t" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unit '{other}' is not a size unit (B, kB, MB, GB, TB)"
            ));
        }
    };
    let bytes = num * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > usize::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes as usize)
}

/// A duration as `weir serve` flags take it: a number with `ms`, `s`, `min`/`m` or `h`
/// (a bare number is seconds). `0` is zero (for `--checkpoint-interval`: off).
pub fn parse_duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    let (num, unit) = number_and_unit(text)
        .ok_or_else(|| format!("'{text}' is not a duration (e.g. 500ms, 1s, 5min)"))?;
    let secs = match unit.as_str() {
        "ms" => num / 1000.0,
        "" | "s" | "sec" => num,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        other => {
            return Err(format!(
                "unit '{other}' is not a duration unit (ms, s, min, h)"
            ));
        }
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// A size in bytes when no unit is given.
pub fn parse_size(text: &str) -> std::result::Result<usize, String> {
    parse_size_with(text, 1)
}

/// A size as Postgres shows a memory setting (`4MB`, `2GB`, `512kB`).
pub fn format_size(bytes: usize) -> String {
    const UNITS: &[(usize, &str)] = &[
        (1 << 40, "TB"),
        (1 << 30, "GB"),
        (1 << 20, "MB"),
        (1 << 10, "kB"),
    ];
    for (m, u) in UNITS {
        if bytes >= *m && bytes.is_multiple_of(*m) {
            return format!("{}{u}", bytes / m);
        }
    }
    for (m, u) in UNITS {
        if bytes >= *m {
            return format!("{:.1}{u}", bytes as f64 / *m as f64);
        }
    }
    format!("{bytes}B")
}

/// The error for a value that would pass [`MAX_VALUE_BYTES`].
pub fn value_too_large(what: &str) -> WeirError {
    WeirError::new(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!(
            "{what}: requested length too large (a value may hold at most {})",
            format_size(MAX_VALUE_BYTES)
        ),
    )
}

/// Check a result length before allocating it.
pub fn check_value_len(what: &str, len: u128) -> Result<()> {
    if len > MAX_VALUE_BYTES as u128 {
        Err(value_too_large(what))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GB").unwrap(), 2 << 30);
        assert_eq!(parse_size("512MB").unwrap(), 512 << 20);
        assert_eq!(parse_size("64kB").unwrap(), 64 << 10);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size_with("1024", 1024).unwrap(), 1 << 20);
        assert!(parse_size("x").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert_eq!(format_size(4 << 20), "4MB");
        assert_eq!(format_size(2 << 30), "2GB");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(format_size(1536), "1.5kB");
    }
}
