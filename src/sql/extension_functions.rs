//! The functions of the extensions Weir has built in (`catalog/extensions.rs`):
//!
//! - `uuid-ossp`: `uuid_generate_v4()` (random), `uuid_generate_v3(namespace, name)` (MD5
//!   of the namespace's 16 bytes and the name, version and variant bits set as RFC 4122
//!   says), `uuid_nil()`, `uuid_ns_dns()`, `uuid_ns_url()`, `uuid_ns_oid()`,
//!   `uuid_ns_x500()`;
//! - `pgcrypto`: `hmac(data, key, type)` for md5, sha1, sha224, sha256, sha384, sha512 over
//!   text or bytea (`digest` and `gen_random_uuid` are DataFusion's / `pg_functions`'),
//!   `gen_random_bytes(n)` (1 to 1024 bytes, as pgcrypto allows).
//!
//! Crates: `hmac`, `sha2` and `md-5` (RustCrypto, the versions the lock file already has
//! through the SCRAM dependencies), `ring` for SHA-1's HMAC (already ours for SCRAM/TLS).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{ScalarUDF, Signature, TypeSignature, Volatility};
use datafusion::prelude::SessionContext;
use hmac::{KeyInit, Mac};

use crate::error::sqlstate;
use crate::sql::pg_functions::{PgFunction, pg_error};

/// The functions here whose result is a `uuid` (text in Arrow).
pub const UUID_RESULTS: &[&str] = &[
    "uuid_generate_v4",
    "uuid_generate_v3",
    "uuid_nil",
    "uuid_ns_dns",
    "uuid_ns_url",
    "uuid_ns_oid",
    "uuid_ns_x500",
];

/// RFC 4122's name spaces.
const NAMESPACES: &[(&str, &str)] = &[
    ("uuid_ns_dns", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
    ("uuid_ns_url", "6ba7b811-9dad-11d1-80b4-00c04fd430c8"),
    ("uuid_ns_oid", "6ba7b812-9dad-11d1-80b4-00c04fd430c8"),
    ("uuid_ns_x500", "6ba7b814-9dad-11d1-80b4-00c04fd430c8"),
];

fn constant(name: &'static str, value: &'static str) -> PgFunction {
    PgFunction {
        name,
        signature: Signature::nullary(Volatility::Immutable),
        ret: Box::new(|_| DataType::Utf8),
        imp: Box::new(move |_, rows| {
            Ok(Arc::new(datafusion::arrow::array::StringArray::from(vec![
                value;
                rows
            ])) as ArrayRef)
        }),
    }
}

/// The bytes of a text or bytea argument, per row.
fn bytes_of(a: &ArrayRef) -> DfResult<ArrayRef> {
    Ok(match a.data_type() {
        DataType::Binary => a.clone(),
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            cast(a, &DataType::Binary)?
        }
        _ => cast(&cast(a, &DataType::Utf8)?, &DataType::Binary)?,
    })
}

/// HMAC of `data` under `key` with the hash pgcrypto names `kind`.
fn hmac_of(kind: &str, key: &[u8], data: &[u8]) -> DfResult<Vec<u8>> {
    fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
        // (HMAC takes a key of any length)
        let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    }
    Ok(match kind.to_ascii_lowercase().as_str() {
        "md5" => run::<hmac::Hmac<md5::Md5>>(key, data),
        "sha1" => {
            let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
            ring::hmac::sign(&k, data).as_ref().to_vec()
        }
        "sha224" => run::<hmac::Hmac<sha2::Sha224>>(key, data),
        "sha256" => run::<hmac::Hmac<sha2::Sha256>>(key, data),
        "sha384" => run::<hmac::Hmac<sha2::Sha384>>(key, data),
        "sha512" => run::<hmac::Hmac<sha2::Sha512>>(key, data),
        other => {
            return Err(pg_error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("Cannot use \"{other}\": No such hash algorithm"),
            ));
        }
    })
}

/// RFC 4122 version 3: MD5 of the name space's bytes and the name.
fn uuid_v3(namespace: &str, name: &[u8]) -> Option<String> {
    use md5::Digest;
    let ns = crate::sql::uuid::parse(namespace)?;
    let mut h = md5::Md5::new();
    h.update(ns);
    h.update(name);
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x30;
    b[8] = (b[8] & 0x3f) | 0x80;
    Some(crate::sql::uuid::from_bytes(&b))
}

fn definitions() -> Vec<PgFunction> {
    let mut out: Vec<PgFunction> = NAMESPACES.iter().map(|(n, v)| constant(n, v)).collect();
    out.push(constant("uuid_nil", "00000000-0000-0000-0000-000000000000"));
    out.push(PgFunction {
        name: "uuid_generate_v4",
        signature: Signature::nullary(Volatility::Volatile),
        ret: Box::new(|_| DataType::Utf8),
        imp: Box::new(|_, rows| Ok(crate::sql::uuid::random_column(rows))),
    });
    out.push(PgFunction {
        name: "uuid_generate_v3",
        signature: Signature::any(2, Volatility::Immutable),
        ret: Box::new(|_| DataType::Utf8),
        imp: Box::new(|args, rows| {
            let ns = cast(&args[0], &DataType::Utf8)?;
            let ns = ns.as_string::<i32>();
            let name = bytes_of(&args[1])?;
            let name = name.as_binary::<i32>();
            let mut out = StringBuilder::with_capacity(rows, rows * 36);
            for i in 0..rows {
                if ns.is_null(i) || name.is_null(i) {
                    out.append_null();
                    continue;
                }
                let v = uuid_v3(ns.value(i), name.value(i)).ok_or_else(|| {
                    pg_error(
                        sqlstate::INVALID_TEXT_REPRESENTATION,
                        format!("invalid input syntax for type uuid: \"{}\"", ns.value(i)),
                    )
                })?;
                out.append_value(v);
            }
            Ok(Arc::new(out.finish()) as ArrayRef)
        }),
    });
    out.push(PgFunction {
        name: "hmac",
        signature: Signature::one_of(vec![TypeSignature::Any(3)], Volatility::Immutable),
        ret: Box::new(|_| DataType::Binary),
        imp: Box::new(|args, rows| {
            let data = bytes_of(&args[0])?;
            let key = bytes_of(&args[1])?;
            let kind = cast(&args[2], &DataType::Utf8)?;
            let (data, key, kind) = (
                data.as_binary::<i32>(),
                key.as_binary::<i32>(),
                kind.as_string::<i32>(),
            );
            let mut out = BinaryBuilder::with_capacity(rows, rows * 32);
            for i in 0..rows {
                if data.is_null(i) || key.is_null(i) || kind.is_null(i) {
                    out.append_null();
                } else {
                    out.append_value(hmac_of(kind.value(i), key.value(i), data.value(i))?);
                }
            }
            Ok(Arc::new(out.finish()) as ArrayRef)
        }),
    });
    out.push(PgFunction {
        name: "gen_random_bytes",
        signature: Signature::any(1, Volatility::Volatile),
        ret: Box::new(|_| DataType::Binary),
        imp: Box::new(|args, rows| {
            use rand::RngCore;
            let n = cast(&args[0], &DataType::Int64)?;
            let n = n.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            let mut out = BinaryBuilder::with_capacity(rows, rows * 16);
            let mut rng = rand::rng();
            for i in 0..rows {
                if n.is_null(i) {
                    out.append_null();
                    continue;
                }
                let len = n.value(i);
                if !(1..=1024).contains(&len) {
                    return Err(pg_error("39000", "Length not in range"));
                }
                let mut buf = vec![0u8; len as usize];
                rng.fill_bytes(&mut buf);
                out.append_value(&buf);
            }
            Ok(Arc::new(out.finish()) as ArrayRef)
        }),
    });
    out
}

pub fn register(ctx: &SessionContext) {
    for f in definitions() {
        ctx.register_udf(ScalarUDF::new_from_impl(f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pgcrypto's and uuid-ossp's answers (PostgreSQL 15).
    #[test]
    fn answers_as_postgres() {
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(hmac_of("sha256", b"key", b"abc").expect("sha256")),
            "9c196e32dc0175f86f4b1cb89289d6619de6bee699e4c378e68309ed97a1a6ab"
        );
        assert_eq!(
            hex(hmac_of("md5", b"key", b"abc").expect("md5")),
            "d2fe98063f876b03193afb49b4979591"
        );
        assert_eq!(
            uuid_v3("6ba7b810-9dad-11d1-80b4-00c04fd430c8", b"example.com").as_deref(),
            Some("9073926b-929f-31c2-abc9-fad77ae3e8eb")
        );
    }
}
