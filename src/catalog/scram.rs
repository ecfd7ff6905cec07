//! SCRAM-SHA-256 password verifiers as Postgres stores them (RFC 5802, RFC 7677), and the
//! server's side of the SCRAM exchange over them.
//!
//! A role's password is kept only as `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
//! (base64), exactly Postgres' `pg_authid.rolpassword` format, so `\password` (which sends
//! that string, hashed by the client) and a dump from Postgres both work. Neither key lets a
//! reader of the data directory log in: the client must prove it knows `ClientKey`, of
//! which only the hash (`StoredKey`) is stored.
//!
//! pgwire's own SCRAM handler wants the *salted password* from its auth source, which is
//! password-equivalent; that is why the exchange is done here over the stored keys:
//!
//! ```text
//! ClientSignature := HMAC(StoredKey, AuthMessage)
//! ClientKey       := ClientProof XOR ClientSignature      (must hash to StoredKey)
//! ServerSignature := HMAC(ServerKey, AuthMessage)          (sent back as v=...)
//! ```

use std::borrow::Cow;
use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

/// Postgres' default `scram_iterations`.
pub const ITERATIONS: u32 = 4096;
/// Salt length Postgres uses.
const SALT_LEN: usize = 16;
const PREFIX: &str = "SCRAM-SHA-256$";

/// A stored SCRAM-SHA-256 verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let tag = hmac::sign(&k, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Equality that takes the same time wherever the keys differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Random bytes from the system's generator.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    // SystemRandom fails only when the OS has no entropy source at all
    if ring::rand::SystemRandom::new().fill(&mut out).is_err() {
        panic!("the operating system's random number generator failed");
    }
    out
}

/// SASLprep of a password, as Postgres does: a password that cannot be normalised is used
/// as its raw bytes.
fn normalize(password: &str) -> Cow<'_, str> {
    stringprep::saslprep(password).unwrap_or(Cow::Borrowed(password))
}

impl Verifier {
    /// A new verifier for a clear-text password (random salt, [`ITERATIONS`]).
    pub fn from_password(password: &str) -> Verifier {
        Self::derive(password, random_bytes(SALT_LEN), ITERATIONS)
    }

    /// The verifier of `password` with this salt and iteration count.
    pub fn derive(password: &str, salt: Vec<u8>, iterations: u32) -> Verifier {
        let salted = salted_password(password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier {
            iterations,
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
            salt,
        }
    }

    /// Parse Postgres' text form; None when `text` is not a SCRAM-SHA-256 verifier.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix(PREFIX)?;
        let (params, keys) = rest.split_once('$')?;
        let (iters, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iters.parse().ok().filter(|i| *i > 0)?;
        let salt = B64.decode(salt).ok()?;
        let stored_key: [u8; 32] = B64.decode(stored).ok()?.try_into().ok()?;
        let server_key: [u8; 32] = B64.decode(server).ok()?.try_into().ok()?;
        Some(Verifier {
            iterations,
            salt,
            stored_key,
            server_key,
        })
    }

    /// Whether a clear-text password matches (the `password` method).
    pub fn matches(&self, password: &str) -> bool {
        let other = Self::derive(password, self.salt.clone(), self.iterations);
        same(&other.stored_key, &self.stored_key)
    }
}

impl std::fmt::Display for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN),
        salt,
        normalize(password).as_bytes(),
        &mut out,
    );
    out
}

/// A password as given to CREATE/ALTER ROLE: a SCRAM verifier the client computed
/// (`\password`) is kept as it is; anything else is clear text and is hashed. Postgres'
/// `md5...` hashes are refused: they are password-equivalent.
pub fn verifier_for(given: &str) -> Result<Verifier, &'static str> {
    if given.starts_with(PREFIX) {
        return Verifier::parse(given).ok_or("malformed SCRAM-SHA-256 password verifier");
    }
    if given.len() == 35
        && given.starts_with("md5")
        && given[3..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(
            "MD5-hashed passwords are not supported: give the password in clear text or as a SCRAM-SHA-256 verifier",
        );
    }
    Ok(Verifier::from_password(given))
}

/// Why an exchange failed. Every variant is answered alike to the client (28P01): which
/// step failed is only logged.
#[derive(Debug)]
pub enum ScramError {
    /// The client's message does not follow RFC 5802.
    Malformed(String),
    /// The proof does not match (wrong password, or no such role: see [`Exchange::mock`]).
    WrongProof,
}

/// The server side of one SCRAM-SHA-256 exchange.
pub struct Exchange {
    verifier: Verifier,
    /// False for a mock exchange: it runs to the end and then fails.
    genuine: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    /// The gs2 header the client sent, to check its echo in the final message.
    gs2_header: String,
}

impl Exchange {
    /// Answer a client-first message (`n,,n=user,r=nonce`) with the server-first message.
    pub fn start(
        verifier: Verifier,
        client_first: &[u8],
    ) -> Result<(Exchange, String), ScramError> {
        Self::begin(verifier, true, client_first)
    }

    /// An exchange for a role that does not exist or has no password: it looks like a
    /// real one (a salt that is stable per user name, so probing cannot tell) and fails at
    /// the proof, as Postgres' mock authentication does.
    pub fn mock(
        user: &str,
        server_secret: &[u8],
        client_first: &[u8],
    ) -> Result<(Exchange, String), ScramError> {
        let mut material = server_secret.to_vec();
        material.extend_from_slice(user.as_bytes());
        let salt = sha256(&material)[..SALT_LEN].to_vec();
        let verifier = Verifier {
            iterations: ITERATIONS,
            salt,
            stored_key: [0; 32],
            server_key: [0; 32],
        };
        Self::begin(verifier, false, client_first)
    }

    fn begin(
        verifier: Verifier,
        genuine: bool,
        client_first: &[u8],
    ) -> Result<(Exchange, String), ScramError> {
        let text = std::str::from_utf8(client_first)
            .map_err(|_| ScramError::Malformed("client-first message is not UTF-8".into()))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let cbind = parts.next().unwrap_or("");
        let authzid = parts.next().ok_or_else(|| {
            ScramError::Malformed("client-first message has no gs2 header".into())
        })?;
        let bare = parts
            .next()
            .ok_or_else(|| ScramError::Malformed("client-first message has no body".into()))?;
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => {
                return Err(ScramError::Malformed(
                    "channel binding was requested but SCRAM-SHA-256-PLUS was not offered".into(),
                ));
            }
            _ => {
                return Err(ScramError::Malformed(
                    "invalid gs2 channel-binding flag".into(),
                ));
            }
        }
        if !authzid.is_empty() && !authzid.starts_with("a=") {
            return Err(ScramError::Malformed("invalid gs2 authzid".into()));
        }
        let mut client_nonce = None;
        for attr in bare.split(',') {
            if let Some(r) = attr.strip_prefix("r=") {
                client_nonce = Some(r);
            } else if attr.starts_with("m=") {
                return Err(ScramError::Malformed(
                    "SCRAM extensions are not supported".into(),
                ));
            }
        }
        let client_nonce = client_nonce
            .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
            .ok_or_else(|| {
                ScramError::Malformed("client-first message has no valid nonce".into())
            })?;
        let nonce = format!("{client_nonce}{}", B64.encode(random_bytes(18)));
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        Ok((
            Exchange {
                verifier,
                genuine,
                client_first_bare: bare.to_owned(),
                server_first: server_first.clone(),
                nonce,
                gs2_header: format!("{cbind},{authzid},"),
            },
            server_first,
        ))
    }

    /// Check the client-final message (`c=biws,r=nonce,p=proof`); on success, the
    /// server-final message (`v=signature`).
    pub fn finish(&self, client_final: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| ScramError::Malformed("client-final message is not UTF-8".into()))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError::Malformed("client-final message has no proof".into()))?;
        let mut channel = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                channel = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            }
        }
        let expected_channel = B64.encode(self.gs2_header.as_bytes());
        if channel != Some(expected_channel.as_str()) {
            return Err(ScramError::Malformed(
                "channel binding does not match".into(),
            ));
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(ScramError::Malformed("nonce does not match".into()));
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| ScramError::Malformed("malformed client proof".into()))?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hmac_sha256(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for (i, k) in client_key.iter_mut().enumerate() {
            *k = proof[i] ^ client_signature[i];
        }
        let ok = same(&sha256(&client_key), &self.verifier.stored_key);
        if !ok || !self.genuine {
            return Err(ScramError::WrongProof);
        }
        let server_signature = hmac_sha256(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, for the tests.
    fn client_final(password: &str, client_first_bare: &str, server_first: &str) -> String {
        let mut salt = None;
        let mut iters = None;
        let mut nonce = None;
        for a in server_first.split(',') {
            if let Some(s) = a.strip_prefix("s=") {
                salt = Some(B64.decode(s).unwrap());
            } else if let Some(i) = a.strip_prefix("i=") {
                iters = Some(i.parse::<u32>().unwrap());
            } else if let Some(r) = a.strip_prefix("r=") {
                nonce = Some(r.to_owned());
            }
        }
        let salted = salted_password(password, &salt.unwrap(), iters.unwrap());
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored = sha256(&client_key);
        let without_proof = format!("c=biws,r={}", nonce.unwrap());
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = hmac_sha256(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn postgres_verifier_round_trips_and_checks() {
        // the verifier of 'secret' with this salt, computed independently (Python's
        // hashlib.pbkdf2_hmac and hmac, RFC 5802's definitions)
        let pg = "SCRAM-SHA-256$4096:ZR4Xg8qLH1drgRQ8fYPdVw==$cF4u/dg2gOMwZ7c1wCOMxCSpd6Ij46K0dJA/qyXJIpA=:i3IS7NSrV28VBJWrBP+GzVmC6eYjxzKlAXpclTatZC4=";
        let v = Verifier::parse(pg).unwrap();
        assert_eq!(v.to_string(), pg);
        assert_eq!(Verifier::derive("secret", v.salt.clone(), 4096), v);
        assert!(v.matches("secret"));
        let ours = Verifier::from_password("secret");
        assert!(ours.matches("secret"));
        assert!(!ours.matches("Secret"));
        assert_eq!(Verifier::parse(&ours.to_string()), Some(ours.clone()));
        assert!(verifier_for("md5a3556571e93b0d20722ba62be61e8c2d").is_err());
        assert!(verifier_for("SCRAM-SHA-256$x").is_err());
    }

    #[test]
    fn exchange_accepts_the_right_password_only() {
        let v = Verifier::from_password("pencil");
        let bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let first = format!("n,,{bare}");
        let (ex, server_first) = Exchange::start(v.clone(), first.as_bytes()).unwrap();
        let fin = client_final("pencil", bare, &server_first);
        let server_final = ex.finish(fin.as_bytes()).unwrap();
        assert!(server_final.starts_with("v="));
        let (ex, server_first) = Exchange::start(v, first.as_bytes()).unwrap();
        let fin = client_final("pen", bare, &server_first);
        assert!(matches!(
            ex.finish(fin.as_bytes()),
            Err(ScramError::WrongProof)
        ));
        // a mock exchange fails even with a proof computed from its salt
        let (ex, server_first) = Exchange::mock("nobody", b"k", first.as_bytes()).unwrap();
        let (_, again) = Exchange::mock("nobody", b"k", first.as_bytes()).unwrap();
        assert_eq!(server_first.split(',').nth(1), again.split(',').nth(1));
        let fin = client_final("", bare, &server_first);
        assert!(matches!(
            ex.finish(fin.as_bytes()),
            Err(ScramError::WrongProof)
        ));
        assert!(Exchange::start(Verifier::from_password("x"), b"p=tls-unique,,n=u,r=abc").is_err());
    }
}
