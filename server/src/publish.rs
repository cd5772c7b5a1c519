//! `tollgate-server publish --redis URL --profile PATH [--name NAME] [--key-prefix P]`: the
//! operator's side of one profile for the fleet. The file is read and validated first (a
//! profile that does not validate is refused with its line and column, and Redis is not
//! contacted); then it is published as the next version of `NAME` (default: the profile's
//! `name`), which every server started with `--watch-profile NAME` puts in force.

use std::path::PathBuf;

use tollgate::profile::MAX_PROFILE_BYTES;
use tollgate::Profile;

/// The signing key, as hex, where no `--signing-key-file` is given.
const SIGNING_KEY_ENV: &str = "TOLLGATE_FLEET_SIGNING_KEY";

/// `tollgate-server publish`'s flags.
#[derive(clap::Args, Debug)]
pub struct PublishArgs {
    /// The Redis the servers share (any URL `--redis` takes).
    #[arg(long, value_name = "URL")]
    redis: String,
    /// The profile to publish (validated first; nothing is written if it is invalid).
    #[arg(long, value_name = "PATH")]
    profile: PathBuf,
    /// The fleet profile's name (default: the profile's `name`).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The workers' key prefix.
    #[arg(long, value_name = "P", default_value = "tollgate")]
    key_prefix: String,
    /// Sign the publish with the key in this file (64 hex digits, `tollgate-server fleet-key`);
    /// else with TOLLGATE_FLEET_SIGNING_KEY if set; else unsigned.
    #[arg(long, value_name = "PATH")]
    signing_key_file: Option<PathBuf>,
}

/// What `publish` was asked, its key read (without the `redis` feature only the file is read).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Debug)]
struct Request {
    redis: String,
    profile: PathBuf,
    name: Option<String>,
    prefix: String,
    /// The signing key's hex, if any.
    signing_key: Option<String>,
}

fn request(a: PublishArgs) -> Result<Request, String> {
    let signing_key = match &a.signing_key_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("--signing-key-file {}: {e}", path.display()))?,
        ),
        None => std::env::var(SIGNING_KEY_ENV).ok(),
    };
    Ok(Request {
        redis: a.redis,
        profile: a.profile,
        name: a.name,
        prefix: a.key_prefix,
        signing_key,
    })
}

/// The file's text, validated: the name to publish under and the text as it is (comments
/// kept, so that what workers read is what the operator wrote).
fn read(req: &Request) -> Result<(String, String), String> {
    let path = req.profile.display();
    let bytes = std::fs::read(&req.profile).map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() > MAX_PROFILE_BYTES {
        return Err(format!(
            "{path}: {} bytes, over the {MAX_PROFILE_BYTES}-byte limit",
            bytes.len()
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{path}: not UTF-8"))?;
    let profile =
        Profile::from_yaml(&text).map_err(|e| format!("{path}: {e}; nothing published"))?;
    let name = req.name.clone().unwrap_or(profile.name);
    Ok((name, text))
}

/// Runs `publish`: the line to print on success.
pub async fn run(args: PublishArgs) -> Result<String, String> {
    let req = request(args)?;
    let (name, text) = read(&req)?;
    publish(&req, &name, &text).await
}

#[cfg(feature = "redis")]
async fn publish(req: &Request, name: &str, text: &str) -> Result<String, String> {
    use tollgate::redis::FleetProfile;
    let fleet = FleetProfile::connect(&req.redis, &req.prefix, name)
        .await
        .map_err(|e| format!("--redis {}: {e}", req.redis))?;
    let version = match &req.signing_key {
        Some(hex) => {
            let key = tollgate::redis::FleetSigningKey::from_hex(hex).map_err(|e| e.to_string())?;
            fleet.publish_signed(text, &key).await
        }
        None => fleet.publish(text).await,
    }
    .map_err(|e| e.to_string())?;
    let signed = if req.signing_key.is_some() {
        "signed, "
    } else {
        ""
    };
    Ok(format!(
        "published {} as fleet profile {name:?} version {version} ({signed}key {})",
        req.profile.display(),
        fleet.key()
    ))
}

/// `tollgate-server fleet-key`: a new signing key and its public key, as lines to keep.
#[cfg(feature = "redis")]
pub fn new_key_pair() -> String {
    let k = tollgate::redis::FleetSigningKey::generate();
    format!(
        "signing key (for publish: --signing-key-file or {SIGNING_KEY_ENV}; keep it secret):\n{}\n\
         public key (for every server: --fleet-public-key or TOLLGATE_FLEET_PUBLIC_KEYS):\n{}",
        k.to_hex(),
        k.verifying_key()
    )
}

/// Without the `redis` feature there is no fleet profile to sign.
#[cfg(not(feature = "redis"))]
pub fn new_key_pair() -> String {
    "fleet-key needs a tollgate-server built with the `redis` feature".into()
}

#[cfg(not(feature = "redis"))]
async fn publish(_: &Request, _: &str, _: &str) -> Result<String, String> {
    Err(
        "publish needs a tollgate-server built with the `redis` feature \
         (cargo build -p tollgate-server --features redis)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_file_is_refused_with_line_and_column_before_redis() {
        let dir = std::env::temp_dir().join(format!("tg-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.yaml");
        std::fs::write(&path, "name: x\nidentities: { capacity: 0 }\n").unwrap();
        let req = Request {
            // Nothing listens there: a refusal that reached Redis would say so instead.
            redis: "redis://127.0.0.1:1/".into(),
            profile: path,
            name: None,
            prefix: "tollgate".into(),
            signing_key: None,
        };
        let e = read(&req).unwrap_err();
        assert!(e.contains("line 2 column"), "{e}");
        assert!(e.contains("nothing published"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
