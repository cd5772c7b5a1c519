//! The `fleet_message` check: what `fuzz/fuzz_targets/fleet_message.rs` runs on every input,
//! and what `tests/redis/fleet.rs` replays on stable over `fuzz/corpus/fleet_message/`.
//!
//! A fleet watcher reads two optional fields from Redis, `version` and `body`, which anyone
//! with access to the server can overwrite. Decoding them never panics; it accepts exactly a
//! canonical decimal version from 1 up with a body that is a valid profile (what
//! `Profile::from_yaml` accepts, unchanged), and refuses everything else with the matching
//! error. An accepted message's profile prints to YAML that decodes back to the same message.
//!
//! Input layout: byte 0 says which fields are present (bit 0 version, bit 1 body), byte 1 is
//! the version's length `n` (capped at the bytes left), the next `n` bytes the version, the
//! rest the body.

use tollgate::profile::MAX_PROFILE_BYTES;
use tollgate::redis::{decode_fleet_message, MessageError};
use tollgate::Profile;

/// Splits one input into the two fields as `HMGET` would return them.
pub fn fields(data: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let flags = data.first().copied().unwrap_or(0);
    let rest = data.get(1..).unwrap_or_default();
    let n = (rest.first().copied().unwrap_or(0) as usize).min(rest.len().saturating_sub(1));
    let version = rest.get(1..1 + n).unwrap_or_default();
    let body = rest.get(1 + n..).unwrap_or_default();
    (
        (flags & 1 != 0).then_some(version),
        (flags & 2 != 0).then_some(body),
    )
}

/// Runs one input; panics on a failed check.
pub fn check(data: &[u8]) {
    let (version, body) = fields(data);
    let canonical = version.and_then(|v| {
        let t = std::str::from_utf8(v).ok()?;
        let n: u64 = t.parse().ok()?;
        (n >= 1 && n.to_string() == t).then_some(n)
    });
    match decode_fleet_message(version, body) {
        Ok(None) => assert!(version.is_none(), "a version was present: {version:?}"),
        Ok(Some(m)) => {
            assert_eq!(
                Some(m.version),
                canonical,
                "accepted a non-canonical version"
            );
            let body = body.expect("accepted without a body");
            assert!(body.len() <= MAX_PROFILE_BYTES);
            let text = std::str::from_utf8(body).expect("accepted a body that is not UTF-8");
            assert_eq!(Profile::from_yaml(text).ok().as_ref(), Some(&m.profile));
            let printed = serde_yaml_ng::to_string(&m.profile).expect("prints");
            let v = m.version.to_string();
            let again = decode_fleet_message(Some(v.as_bytes()), Some(printed.as_bytes()))
                .expect("a printed profile decodes")
                .expect("a message");
            assert_eq!((again.version, &again.profile), (m.version, &m.profile));
        }
        Err(MessageError::Version(_)) => assert!(canonical.is_none(), "refused {version:?}"),
        Err(MessageError::MissingBody) => assert!(canonical.is_some() && body.is_none()),
        Err(MessageError::TooLarge(n)) => assert!(n > MAX_PROFILE_BYTES),
        Err(MessageError::NotUtf8) => {
            assert!(std::str::from_utf8(body.expect("a body")).is_err())
        }
        Err(MessageError::Profile(e)) => {
            let text = std::str::from_utf8(body.expect("a body")).expect("UTF-8");
            assert!(
                Profile::from_yaml(text).is_err(),
                "refused a valid profile: {e}"
            );
        }
    }
}
