//! Secrets (`CREATE SECRET name AS 'value'`): values connectors need (passwords, keys)
//! that must never show in the catalog, `SHOW CREATE`, system tables, logs or errors.
//!
//! A secret is stored under `X{oid}` sealed with ChaCha20-Poly1305 (ring's AEAD) under the
//! server's secrets key: `--secrets-key-file`, or `secrets.key` generated in the data
//! directory with mode 0600 at first use. The relation that uses one keeps only its
//! name (`properties.sasl.password = SECRET name`); the value is unsealed when the
//! connector is built. A reader of the store without the key file learns nothing of the
//! value; one with both does (the key must live elsewhere for that: `--secrets-key-file`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, OID_STEP};
use crate::error::{Result, WeirError, sqlstate};
use crate::state::store::{Durability, WriteBatch};

/// How an option value that names a secret is kept (`key = SECRET name`): a prefix no
/// SQL string literal produced by the parser starts with, then the secret's name.
const SECRET_REF: &str = "\u{1}secret:";

/// The option value standing for secret `name`.
pub fn secret_ref(name: &str) -> String {
    format!("{SECRET_REF}{name}")
}

/// The secret an option value names, if it names one.
pub fn referenced(value: &str) -> Option<&str> {
    value.strip_prefix(SECRET_REF)
}

/// The secrets a relation's options name.
pub fn secret_refs(options: &[(String, String)]) -> Vec<String> {
    options
        .iter()
        .filter_map(|(_, v)| referenced(v).map(str::to_owned))
        .collect()
}

/// Length of a secrets key.
pub const KEY_LEN: usize = 32;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecretDesc {
    pub oid: u32,
    pub name: String,
    pub owner: u32,
    /// base64 of nonce (12 bytes) followed by the sealed value and its tag.
    sealed: String,
}

fn secret_key(oid: u32) -> Vec<u8> {
    let mut k = b"X".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

/// Where the secrets key comes from.
#[derive(Debug, Default)]
pub(crate) struct KeySlot {
    key: Option<[u8; KEY_LEN]>,
    /// The file the key is (or will be) in.
    path: Option<PathBuf>,
    /// The key may be generated into `path` at first use (no key file was given and none
    /// exists yet).
    generate: bool,
}

fn read_key(path: &Path) -> Result<[u8; KEY_LEN]> {
    let bytes = std::fs::read(path).map_err(|e| {
        WeirError::io(
            &format!("cannot read the secrets key file {}", path.display()),
            e,
        )
    })?;
    parse_key(&bytes).ok_or_else(|| {
        WeirError::invalid_parameter(format!(
            "secrets key file {} must hold {KEY_LEN} bytes (or {} hex digits)",
            path.display(),
            KEY_LEN * 2
        ))
    })
}

fn parse_key(bytes: &[u8]) -> Option<[u8; KEY_LEN]> {
    let text = std::str::from_utf8(bytes).ok().map(str::trim);
    if let Some(t) = text
        && t.len() == KEY_LEN * 2
        && t.bytes().all(|b| b.is_ascii_hexdigit())
    {
        let mut key = [0u8; KEY_LEN];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
        }
        return Some(key);
    }
    bytes.try_into().ok()
}

/// Write a file only its owner can read (created with mode 0600).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| WeirError::io(&format!("cannot create {}", path.display()), e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| WeirError::io(&format!("cannot write {}", path.display()), e))
}

fn undefined_secret(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("secret \"{name}\" does not exist"),
    )
}

fn sealing_key(key: &[u8; KEY_LEN]) -> Result<LessSafeKey> {
    UnboundKey::new(&CHACHA20_POLY1305, key)
        .map(LessSafeKey::new)
        .map_err(|_| WeirError::internal("invalid secrets key"))
}

fn seal(key: &[u8; KEY_LEN], oid: u32, value: &str) -> Result<String> {
    let nonce_bytes: [u8; 12] = crate::catalog::scram::random_bytes(12)
        .try_into()
        .map_err(|_| WeirError::internal("random nonce of the wrong length"))?;
    let mut data = value.as_bytes().to_vec();
    sealing_key(key)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce_bytes),
            Aad::from(oid.to_be_bytes()),
            &mut data,
        )
        .map_err(|_| WeirError::internal("cannot seal a secret"))?;
    let mut out = nonce_bytes.to_vec();
    out.extend_from_slice(&data);
    Ok(B64.encode(out))
}

fn open(key: &[u8; KEY_LEN], desc: &SecretDesc) -> Result<String> {
    let unreadable = || {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!(
                "secret \"{}\" cannot be decrypted: the secrets key is not the one it was stored with",
                desc.name
            ),
        )
    };
    let mut bytes = B64.decode(&desc.sealed).map_err(|_| unreadable())?;
    if bytes.len() < 12 {
        return Err(unreadable());
    }
    let mut data = bytes.split_off(12);
    let nonce: [u8; 12] = bytes.try_into().map_err(|_| unreadable())?;
    let plain = sealing_key(key)?
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(desc.oid.to_be_bytes()),
            &mut data,
        )
        .map_err(|_| unreadable())?;
    String::from_utf8(plain.to_vec()).map_err(|_| unreadable())
}

impl Catalog {
    /// Load the secrets (names and sealed values) and find the key that opens them:
    /// `key_file` (`--secrets-key-file`), else `secrets.key` in the data directory, which
    /// is generated (mode 0600) when the first secret is created.
    pub fn open_secrets(&self, key_file: Option<&Path>, data_dir: &Path) -> Result<()> {
        let mut found = Vec::new();
        self.store.scan_prefix(b"X", &mut |_, v| {
            let s: SecretDesc = serde_json::from_slice(v)
                .map_err(|e| WeirError::internal(format!("corrupt secret entry: {e}")))?;
            found.push(s);
            Ok(())
        })?;
        let slot = match key_file {
            Some(f) => KeySlot {
                key: Some(read_key(f)?),
                path: Some(f.to_owned()),
                generate: false,
            },
            None => {
                let path = data_dir.join("secrets.key");
                if path.exists() {
                    KeySlot {
                        key: Some(read_key(&path)?),
                        path: Some(path),
                        generate: false,
                    }
                } else {
                    KeySlot {
                        key: None,
                        generate: found.is_empty(),
                        path: Some(path),
                    }
                }
            }
        };
        let mut st = self.state.write();
        for s in found {
            st.next_oid = st.next_oid.max(s.oid + OID_STEP);
            st.secrets.insert(s.name.clone(), s);
        }
        *self.secrets_key.write() = slot;
        Ok(())
    }

    fn key(&self) -> Result<[u8; KEY_LEN]> {
        let mut slot = self.secrets_key.write();
        if let Some(k) = slot.key {
            return Ok(k);
        }
        let Some(path) = slot.path.clone() else {
            return Err(WeirError::internal(
                "secrets are not available: no secrets key",
            ));
        };
        if !slot.generate {
            return Err(WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!(
                    "the secrets key file {} is missing: the secrets stored with it cannot be read",
                    path.display()
                ),
            ));
        }
        let key: [u8; KEY_LEN] = crate::catalog::scram::random_bytes(KEY_LEN)
            .try_into()
            .map_err(|_| WeirError::internal("random key of the wrong length"))?;
        write_private(&path, &key)?;
        tracing::info!(path = %path.display(), "generated the secrets key (keep it out of copies of the data directory, or give --secrets-key-file)");
        slot.key = Some(key);
        Ok(key)
    }

    pub fn secrets(&self) -> Vec<SecretDesc> {
        self.state.read().secrets.values().cloned().collect()
    }

    pub fn secret(&self, name: &str) -> Option<SecretDesc> {
        self.state.read().secrets.get(name).cloned()
    }

    pub fn create_secret(
        &self,
        name: &str,
        value: &str,
        owner: u32,
        if_not_exists: bool,
    ) -> Result<bool> {
        let key = self.key()?;
        let mut st = self.state.write();
        if st.secrets.contains_key(name) {
            if if_not_exists {
                return Ok(false);
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("secret \"{name}\" already exists"),
            ));
        }
        let oid = st.next_oid;
        let desc = SecretDesc {
            oid,
            name: name.to_owned(),
            owner,
            sealed: seal(&key, oid, value)?,
        };
        let mut wb = WriteBatch::default();
        wb.put(
            secret_key(oid),
            serde_json::to_vec(&desc).map_err(|e| WeirError::internal(e.to_string()))?,
        );
        self.store.commit(wb, Durability::Sync)?;
        st.next_oid += OID_STEP;
        st.version += 1;
        st.secrets.insert(name.to_owned(), desc);
        Ok(true)
    }

    pub fn alter_secret(&self, name: &str, value: &str) -> Result<()> {
        let key = self.key()?;
        let mut st = self.state.write();
        let mut desc = st
            .secrets
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_secret(name))?;
        desc.sealed = seal(&key, desc.oid, value)?;
        let mut wb = WriteBatch::default();
        wb.put(
            secret_key(desc.oid),
            serde_json::to_vec(&desc).map_err(|e| WeirError::internal(e.to_string()))?,
        );
        self.store.commit(wb, Durability::Sync)?;
        st.version += 1;
        st.secrets.insert(name.to_owned(), desc);
        Ok(())
    }

    pub fn drop_secret(&self, name: &str) -> Result<bool> {
        let mut st = self.state.write();
        let Some(desc) = st.secrets.get(name).cloned() else {
            return Ok(false);
        };
        let mut wb = WriteBatch::default();
        wb.delete(secret_key(desc.oid));
        self.store.commit(wb, Durability::Sync)?;
        st.secrets.remove(name);
        st.version += 1;
        Ok(true)
    }

    /// Options with every secret reference replaced by the secret's value, for a
    /// connector being built.
    pub fn resolve_secrets(&self, options: &[(String, String)]) -> Result<Vec<(String, String)>> {
        options
            .iter()
            .map(|(k, v)| match referenced(v) {
                Some(name) => Ok((k.clone(), self.secret_value(name)?)),
                None => Ok((k.clone(), v.clone())),
            })
            .collect()
    }

    /// The value of a secret, for a connector being built.
    pub fn secret_value(&self, name: &str) -> Result<String> {
        let key = self.key()?;
        let desc = self.secret(name).ok_or_else(|| undefined_secret(name))?;
        open(&key, &desc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key() {
        let key = [7u8; KEY_LEN];
        let desc = SecretDesc {
            oid: 20000,
            name: "pw".into(),
            owner: 10,
            sealed: seal(&key, 20000, "hunter2").unwrap(),
        };
        assert!(!desc.sealed.contains("hunter2"));
        assert_eq!(open(&key, &desc).unwrap(), "hunter2");
        assert!(open(&[8u8; KEY_LEN], &desc).is_err());
        let moved = SecretDesc { oid: 20004, ..desc };
        assert!(open(&key, &moved).is_err(), "bound to its oid");
        assert_eq!(parse_key(&[1u8; 32]), Some([1u8; 32]));
        assert_eq!(
            parse_key(format!("{}\n", "ab".repeat(32)).as_bytes()),
            Some([0xab; 32])
        );
        assert_eq!(parse_key(b"short"), None);
    }

    /// Options name a secret; a connector gets its value; the key is generated (0600) at
    /// the first secret and opens it again after a reopen; a lost key is an error that
    /// says so, not garbage.
    #[test]
    fn options_resolve_secrets_across_reopen() {
        use std::os::unix::fs::PermissionsExt as _;
        use std::sync::Arc;
        let dir = tempfile::tempdir().expect("temp dir");
        let open = || {
            let store = crate::state::fjall_store::FjallStore::open(&dir.path().join("store"))
                .expect("store");
            let c = Catalog::open(Arc::new(store)).expect("catalog");
            c.open_secrets(None, dir.path()).expect("secrets");
            c
        };
        let c = open();
        assert!(
            !dir.path().join("secrets.key").exists(),
            "no key before a secret"
        );
        c.create_secret("pw", "hunter2", 10, false).expect("create");
        let mode = std::fs::metadata(dir.path().join("secrets.key"))
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let options = vec![
            ("topic".to_owned(), "t".to_owned()),
            ("properties.sasl.password".to_owned(), secret_ref("pw")),
        ];
        assert_eq!(secret_refs(&options), vec!["pw".to_owned()]);
        let resolved = c.resolve_secrets(&options).expect("resolve");
        assert_eq!(resolved[1].1, "hunter2");
        assert!(
            c.resolve_secrets(&[("k".into(), secret_ref("nosuch"))])
                .is_err()
        );
        drop(c);
        let c = open();
        assert_eq!(c.secret_value("pw").expect("value"), "hunter2");
        drop(c);
        std::fs::remove_file(dir.path().join("secrets.key")).expect("rm");
        let c = open();
        let e = c.secret_value("pw").expect_err("no key");
        assert!(e.message.contains("secrets key file"), "{}", e.message);
    }
}
