//! Signed fleet profiles: Redis ACLs are the first line against whoever can write the fleet
//! key; the signature is the second. The publisher signs each version with an Ed25519 key it
//! alone holds; every watcher given [`FleetVerifyingKey`]s puts in force only a version signed
//! by one of them, and refuses (and counts) an unsigned one, a bad signature, or one signed
//! before the version it already has in force (an old publish written back).
//!
//! Why Ed25519 and not an HMAC: with an HMAC every server holds the key that makes valid
//! profiles, so one compromised server (or its environment, or a leaked deploy config) lets an
//! attacker publish to the whole fleet. With a key pair the servers hold only the public half,
//! which signs nothing; the private half stays with whoever publishes (a CI job, an operator's
//! vault).
//!
//! What is signed, so that no field can be swapped for another publish's: a domain tag, the
//! fleet profile's name, the version, the instant of signing (ms since the Unix epoch) and the
//! body, each but the last ended by a NUL byte:
//!
//! ```text
//! "tollgate fleet profile v1\0" name "\0" version "\0" signed_at "\0" body
//! ```
//!
//! Rotation: give every watcher the new public key beside the old one (both are trusted),
//! publish with the new private key, then drop the old public key from the watchers.

use core::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

/// The signed message's domain tag (a signature made for anything else never verifies here).
const TAG: &[u8] = b"tollgate fleet profile v1\0";

/// The private key that signs fleet profiles: 32 bytes, written as 64 hex digits.
///
/// The publisher keeps it ([`super::FleetProfile::publish_signed`]); watchers get only its
/// [`FleetVerifyingKey`] ([`super::FleetProfile::trusting`]), which signs nothing, so a
/// compromised worker cannot publish (an HMAC key would let it). The signature covers the
/// name, the version, the instant of signing and the body. To rotate, trust the new public key
/// beside the old one, publish with the new private key, then drop the old public key.
#[derive(Clone)]
pub struct FleetSigningKey(SigningKey);

/// A public key watchers trust: 32 bytes, written as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FleetVerifyingKey(VerifyingKey);

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// 32 bytes from 64 hex digits (surrounding whitespace ignored, as in a key file).
fn key_bytes(hex: &str, what: &str) -> Result<[u8; 32], KeyError> {
    let hex = hex.trim();
    let bad = || {
        KeyError(format!(
            "{what}: expected 64 hex digits (32 bytes), got {} characters",
            hex.len()
        ))
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl FleetSigningKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> FleetSigningKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the operating system's random source");
        FleetSigningKey(SigningKey::from_bytes(&seed))
    }

    /// The key written as 64 hex digits ([`FleetSigningKey::to_hex`]).
    pub fn from_hex(hex: &str) -> Result<FleetSigningKey, KeyError> {
        Ok(FleetSigningKey(SigningKey::from_bytes(&key_bytes(
            hex,
            "fleet signing key",
        )?)))
    }

    /// The key as 64 hex digits: keep it secret.
    pub fn to_hex(&self) -> String {
        hex(self.0.as_bytes())
    }

    /// The public key that verifies what this key signs: what watchers are given.
    pub fn verifying_key(&self) -> FleetVerifyingKey {
        FleetVerifyingKey(self.0.verifying_key())
    }

    pub(super) fn sign(&self, name: &str, version: u64, signed_at: u64, body: &[u8]) -> [u8; 64] {
        self.0
            .sign(&message(name, version, signed_at, body))
            .to_bytes()
    }
}

impl fmt::Debug for FleetSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FleetSigningKey(public {})", self.verifying_key())
    }
}

impl FleetVerifyingKey {
    /// The key written as 64 hex digits; refused if it is not a point of the curve.
    pub fn from_hex(hex: &str) -> Result<FleetVerifyingKey, KeyError> {
        let bytes = key_bytes(hex, "fleet public key")?;
        VerifyingKey::from_bytes(&bytes)
            .map(FleetVerifyingKey)
            .map_err(|_| KeyError("fleet public key: not an Ed25519 public key".into()))
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        hex(self.0.as_bytes())
    }
}

impl fmt::Display for FleetVerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for FleetVerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FleetVerifyingKey({self})")
    }
}

fn message(name: &str, version: u64, signed_at: u64, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(TAG.len() + name.len() + body.len() + 48);
    m.extend_from_slice(TAG);
    for part in [
        name.as_bytes(),
        version.to_string().as_bytes(),
        signed_at.to_string().as_bytes(),
    ] {
        m.extend_from_slice(part);
        m.push(0);
    }
    m.extend_from_slice(body);
    m
}

/// A publish's signature as stored: the signature and the instant it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The Ed25519 signature.
    pub signature: [u8; 64],
    /// When it was signed, ms since the Unix epoch (the publisher's clock).
    pub signed_at: u64,
}

/// Why a published version was not put in force by a watcher that trusts keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    /// The version carries no signature.
    Unsigned,
    /// The signature is not one of a trusted key over this name, version and body.
    Bad,
    /// Signed before the version this watcher has in force: an older publish written back.
    Stale {
        /// When this one was signed (ms since the Unix epoch).
        signed_at: u64,
        /// When the version in force was.
        in_force: u64,
    },
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::Unsigned => f.write_str("not signed, and this watcher trusts only signed profiles"),
            SignatureError::Bad => f.write_str("the signature is not one of a trusted key"),
            SignatureError::Stale { signed_at, in_force } => write!(
                f,
                "signed at {signed_at} ms, before the version in force (signed at {in_force} ms): an older publish"
            ),
        }
    }
}

impl std::error::Error for SignatureError {}

/// Checks `signed` against `keys` for `name`, `version` and `body`; `in_force` is when the
/// version in force was signed, if it was.
pub(super) fn verify(
    keys: &[FleetVerifyingKey],
    name: &str,
    version: u64,
    body: &[u8],
    signed: Option<Signed>,
    in_force: Option<u64>,
) -> Result<(), SignatureError> {
    let s = signed.ok_or(SignatureError::Unsigned)?;
    let sig = Signature::from_bytes(&s.signature);
    let m = message(name, version, s.signed_at, body);
    if !keys.iter().any(|k| k.0.verify(&m, &sig).is_ok()) {
        return Err(SignatureError::Bad);
    }
    match in_force {
        Some(t) if s.signed_at < t => Err(SignatureError::Stale {
            signed_at: s.signed_at,
            in_force: t,
        }),
        _ => Ok(()),
    }
}

/// The stored signature fields (`sig`: 128 hex digits; `signed_at`: decimal ms): `None` if
/// either is missing or malformed (which verification then refuses as unsigned).
pub(super) fn decode(sig: Option<&[u8]>, signed_at: Option<&[u8]>) -> Option<Signed> {
    let sig = core::str::from_utf8(sig?).ok()?;
    let signed_at = core::str::from_utf8(signed_at?).ok()?.parse().ok()?;
    if sig.len() != 128 {
        return None;
    }
    let (a, b) = sig.split_at(64);
    let (a, b) = (key_bytes(a, "").ok()?, key_bytes(b, "").ok()?);
    let mut signature = [0u8; 64];
    signature[..32].copy_from_slice(&a);
    signature[32..].copy_from_slice(&b);
    Some(Signed {
        signature,
        signed_at,
    })
}

/// A signature as stored.
pub(super) fn encode(signature: &[u8; 64]) -> String {
    hex(signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(k: &FleetSigningKey, version: u64, at: u64, body: &[u8]) -> Option<Signed> {
        let s = encode(&k.sign("edge", version, at, body));
        decode(Some(s.as_bytes()), Some(at.to_string().as_bytes()))
    }

    #[test]
    fn only_a_trusted_key_over_the_same_fields_verifies() {
        let (k, other) = (FleetSigningKey::generate(), FleetSigningKey::generate());
        let trusted = [k.verifying_key()];
        let s = signed(&k, 3, 1_000, b"body");
        assert_eq!(verify(&trusted, "edge", 3, b"body", s, None), Ok(()));
        assert_eq!(
            verify(&trusted, "edge", 3, b"body", None, None),
            Err(SignatureError::Unsigned)
        );
        // Any field changed: another message.
        assert_eq!(
            verify(&trusted, "edge", 4, b"body", s, None),
            Err(SignatureError::Bad)
        );
        assert_eq!(
            verify(&trusted, "edgf", 3, b"body", s, None),
            Err(SignatureError::Bad)
        );
        assert_eq!(
            verify(&trusted, "edge", 3, b"bodz", s, None),
            Err(SignatureError::Bad)
        );
        let later = s.map(|s| Signed {
            signed_at: 1_001,
            ..s
        });
        assert_eq!(
            verify(&trusted, "edge", 3, b"body", later, None),
            Err(SignatureError::Bad)
        );
        // Another key's signature; then both keys trusted (a rotation).
        let o = signed(&other, 3, 1_000, b"body");
        assert_eq!(
            verify(&trusted, "edge", 3, b"body", o, None),
            Err(SignatureError::Bad)
        );
        let both = [k.verifying_key(), other.verifying_key()];
        assert_eq!(verify(&both, "edge", 3, b"body", o, None), Ok(()));
        // Signed before the version in force.
        assert_eq!(
            verify(&trusted, "edge", 3, b"body", s, Some(1_500)),
            Err(SignatureError::Stale {
                signed_at: 1_000,
                in_force: 1_500
            })
        );
        assert_eq!(verify(&trusted, "edge", 3, b"body", s, Some(1_000)), Ok(()));
    }

    #[test]
    fn keys_round_trip_as_hex_and_bad_ones_are_refused() {
        let k = FleetSigningKey::generate();
        let again = FleetSigningKey::from_hex(&format!(" {}\n", k.to_hex())).unwrap();
        assert_eq!(again.verifying_key(), k.verifying_key());
        let p = FleetVerifyingKey::from_hex(&k.verifying_key().to_hex()).unwrap();
        assert_eq!(p, k.verifying_key());
        for bad in ["", "00", &"g".repeat(64), &"0".repeat(65)] {
            assert!(FleetSigningKey::from_hex(bad).is_err(), "{bad:?}");
            assert!(FleetVerifyingKey::from_hex(bad).is_err(), "{bad:?}");
        }
        assert!(
            !format!("{k:?}").contains(&k.to_hex()),
            "Debug never shows the secret"
        );
        assert_eq!(decode(Some(b"00"), Some(b"1")), None);
        assert_eq!(decode(Some(&[b'0'; 128]), Some(b"x")), None);
        assert!(decode(Some(&[b'0'; 128]), Some(b"7")).is_some());
    }
}
