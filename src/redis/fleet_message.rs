//! What a fleet watcher reads from Redis: the published version and the profile's text, as the
//! two fields of one hash (read with one `HMGET`, so never one without the other), and how it
//! turns them into a [`Profile`]. Anything else in the key (a hand edit, another program's
//! value, a truncated write) is an error here, never a panic: the watcher keeps the profile in
//! force and counts it.

use core::fmt;

use crate::profile::{Profile, ProfileError, MAX_PROFILE_BYTES};

/// The hash field with the version: a decimal integer from 1 up, bumped by each publish.
pub(super) const VERSION_FIELD: &str = "version";
/// The hash field with the profile's YAML, as the publisher gave it.
pub(super) const BODY_FIELD: &str = "body";
/// The hash fields with the publish's signature and when it was made (signed publishes only;
/// see `fleet_signature.rs`).
pub(super) const SIG_FIELD: &str = "sig";
pub(super) const SIGNED_AT_FIELD: &str = "signed_at";
/// The hash field with the publish's random id (told apart from an earlier publish that had
/// the same version before Redis lost its data).
pub(super) const ID_FIELD: &str = "id";

/// A published profile, read and validated.
#[derive(Debug)]
pub struct FleetMessage {
    /// The version the publisher was given (1 for the first publish of a name).
    pub version: u64,
    /// The profile, validated (it may still be one a limiter refuses to reload into).
    pub profile: Profile,
    /// The publish's signature, if it was signed ([`super::FleetProfile::publish_signed`]).
    pub signed: Option<super::fleet_signature::Signed>,
}

/// Why what was read from the fleet key is not a profile to put in force.
#[derive(Debug)]
pub enum MessageError {
    /// The version field is missing, not a decimal integer, or 0.
    Version(String),
    /// The version is there but the body is not.
    MissingBody,
    /// The body is larger than [`MAX_PROFILE_BYTES`].
    TooLarge(usize),
    /// The body is not UTF-8.
    NotUtf8,
    /// The body is not a valid profile (with line and column where known).
    Profile(ProfileError),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Version(v) => {
                write!(f, "version field {v:?} is not an integer from 1 up")
            }
            MessageError::MissingBody => f.write_str("version present but no body"),
            MessageError::TooLarge(n) => {
                write!(
                    f,
                    "body of {n} bytes is over the {MAX_PROFILE_BYTES}-byte limit"
                )
            }
            MessageError::NotUtf8 => f.write_str("body is not UTF-8"),
            MessageError::Profile(e) => write!(f, "body is not a valid profile: {e}"),
        }
    }
}

impl std::error::Error for MessageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MessageError::Profile(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads just the version field (what the watcher polls): `Ok(None)` when nothing was
/// published under the name.
pub fn decode_version(version: Option<&[u8]>) -> Result<Option<u64>, MessageError> {
    let Some(raw) = version else {
        return Ok(None);
    };
    // Only what `HINCRBY` writes: ASCII digits, no sign, no spaces, no leading zero.
    let text = core::str::from_utf8(raw)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && !t.starts_with('0'));
    match text.and_then(|t| t.parse::<u64>().ok()) {
        Some(v) => Ok(Some(v)),
        None => Err(MessageError::Version(
            String::from_utf8_lossy(&raw[..raw.len().min(64)]).into_owned(),
        )),
    }
}

/// Reads both fields (as one `HMGET key version body` returned them): `Ok(None)` when nothing
/// was published under the name; otherwise the version and the validated profile, or why not.
pub fn decode(
    version: Option<&[u8]>,
    body: Option<&[u8]>,
) -> Result<Option<FleetMessage>, MessageError> {
    let Some(version) = decode_version(version)? else {
        return Ok(None);
    };
    let body = body.ok_or(MessageError::MissingBody)?;
    if body.len() > MAX_PROFILE_BYTES {
        return Err(MessageError::TooLarge(body.len()));
    }
    let text = core::str::from_utf8(body).map_err(|_| MessageError::NotUtf8)?;
    let profile = Profile::from_yaml(text).map_err(MessageError::Profile)?;
    Ok(Some(FleetMessage {
        version,
        profile,
        signed: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "name: f\nidentities: { capacity: 64 }\nroute_classes:\n  w:\n    burst: { tokens: 5, per: 1s }\n    \
                     sustained: { tokens: 50, per: 1m }\n";

    #[test]
    fn only_what_hincrby_writes_is_a_version() {
        assert_eq!(decode_version(None).unwrap(), None);
        assert_eq!(decode_version(Some(b"1")).unwrap(), Some(1));
        assert_eq!(decode_version(Some(b"42")).unwrap(), Some(42));
        for bad in [
            &b""[..],
            b"0",
            b"01",
            b"-1",
            b" 1",
            b"1.0",
            b"x",
            b"99999999999999999999",
        ] {
            assert!(
                matches!(decode_version(Some(bad)), Err(MessageError::Version(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_body_must_be_a_valid_profile() {
        let m = decode(Some(b"3"), Some(P.as_bytes())).unwrap().unwrap();
        assert_eq!((m.version, m.profile.name.as_str()), (3, "f"));
        assert!(decode(None, Some(P.as_bytes())).unwrap().is_none());
        assert!(matches!(
            decode(Some(b"3"), None),
            Err(MessageError::MissingBody)
        ));
        assert!(matches!(
            decode(Some(b"3"), Some(b"\xff\xfe")),
            Err(MessageError::NotUtf8)
        ));
        let Err(MessageError::Profile(e)) = decode(
            Some(b"3"),
            Some(b"name: f\nidentities: { capacity: 64 }\nroute_classes: 7\n"),
        ) else {
            panic!("a profile error")
        };
        assert_eq!(e.line(), Some(3), "{e}");
        let big = vec![b'#'; MAX_PROFILE_BYTES + 1];
        assert!(matches!(
            decode(Some(b"3"), Some(&big)),
            Err(MessageError::TooLarge(_))
        ));
    }
}
