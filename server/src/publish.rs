//! `tollgate-server publish --redis URL --profile PATH [--name NAME] [--key-prefix P]`: the
//! operator's side of one profile for the fleet. The file is read and validated first (a
//! profile that does not validate is refused with its line and column, and Redis is not
//! contacted); then it is published as the next version of `NAME` (default: the profile's
//! `name`), which every server started with `--watch-profile NAME` puts in force.

use std::path::PathBuf;

use tollgate::profile::MAX_PROFILE_BYTES;
use tollgate::Profile;

const USAGE: &str = "tollgate-server publish --redis URL --profile PATH [--name NAME] \
                     [--key-prefix P] [--signing-key-file PATH]";

/// The signing key, as hex, where no `--signing-key-file` is given.
const SIGNING_KEY_ENV: &str = "TOLLGATE_FLEET_SIGNING_KEY";

/// What `publish` was asked (without the `redis` feature only the file is read).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Debug)]
struct Request {
    redis: String,
    profile: PathBuf,
    name: Option<String>,
    prefix: String,
    /// The signing key's hex (from `--signing-key-file` or the environment), if any.
    signing_key: Option<String>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Request, String> {
    let (mut redis, mut profile, mut name) = (None, None, None);
    let mut signing_key = std::env::var(SIGNING_KEY_ENV).ok();
    let mut prefix = "tollgate".to_owned();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--redis" => redis = Some(value()?),
            "--profile" => profile = Some(PathBuf::from(value()?)),
            "--name" => name = Some(value()?),
            "--key-prefix" => prefix = value()?,
            "--signing-key-file" => {
                let path = value()?;
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("--signing-key-file {path}: {e}"))?;
                signing_key = Some(text);
            }
            "-h" | "--help" => return Err(format!("usage: {USAGE}")),
            other => return Err(format!("unknown argument {other:?}; usage: {USAGE}")),
        }
    }
    Ok(Request {
        redis: redis.ok_or_else(|| format!("--redis is needed; usage: {USAGE}"))?,
        profile: profile.ok_or_else(|| format!("--profile is needed; usage: {USAGE}"))?,
        name,
        prefix,
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

/// Runs `publish` with the arguments after the word `publish`: the line to print on success.
pub async fn run(args: impl Iterator<Item = String>) -> Result<String, String> {
    let req = parse(args)?;
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

    fn args(a: &[&str]) -> impl Iterator<Item = String> {
        a.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn flags_are_read_and_the_needed_ones_asked_for() {
        let r = parse(args(&[
            "--redis",
            "redis://x/",
            "--profile",
            "p.yaml",
            "--name",
            "n",
        ]))
        .unwrap();
        assert_eq!(
            (r.redis.as_str(), r.name.as_deref(), r.prefix.as_str()),
            ("redis://x/", Some("n"), "tollgate")
        );
        assert!(parse(args(&["--profile", "p.yaml"]))
            .unwrap_err()
            .contains("--redis is needed"));
        assert!(parse(args(&["--redis", "redis://x/"]))
            .unwrap_err()
            .contains("--profile is needed"));
        assert!(parse(args(&["--nope"])).unwrap_err().contains("unknown"));
    }

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
