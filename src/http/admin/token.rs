//! The admin bearer token: read once at start, refused if guessable, compared in constant
//! time, never shown.

use subtle::ConstantTimeEq;

/// The environment variable that holds the admin bearer token.
pub const ADMIN_TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
/// The shortest admin token accepted, in bytes (a guessable token is refused at start).
pub const MIN_TOKEN_LEN: usize = 16;

/// The admin bearer token. Its `Debug` does not show it.
pub struct AdminToken(Vec<u8>);

impl core::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token if it is at least [`MIN_TOKEN_LEN`] bytes of visible ASCII (what a header
    /// value can carry after `Bearer `).
    pub fn new(token: &str) -> Result<AdminToken, String> {
        if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{ADMIN_TOKEN_ENV}: at least {MIN_TOKEN_LEN} bytes of visible ASCII (no spaces)"
            ));
        }
        Ok(AdminToken(token.as_bytes().to_vec()))
    }

    /// From [`ADMIN_TOKEN_ENV`]: `None` when it is unset or empty (the admin routes are off).
    pub fn from_env() -> Result<Option<AdminToken>, String> {
        match std::env::var(ADMIN_TOKEN_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("{ADMIN_TOKEN_ENV}: not valid UTF-8"))
            }
            Ok(t) if t.is_empty() => Ok(None),
            Ok(t) => AdminToken::new(&t).map(Some),
        }
    }

    /// True when `presented` is the token. The time taken depends on the lengths only, never
    /// on how many bytes match: the presented bytes are compared with `subtle` over the
    /// token's whole length (padded or cut to it), and the lengths in constant time too.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mut padded = vec![0u8; self.0.len()];
        let n = presented.len().min(padded.len());
        padded[..n].copy_from_slice(&presented[..n]);
        let same_bytes = padded.ct_eq(&self.0);
        let same_len = (presented.len() as u64).ct_eq(&(self.0.len() as u64));
        (same_bytes & same_len).into()
    }
}
