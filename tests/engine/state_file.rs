//! `StateFile`, the restore / checkpoint / last-save the gateway and the server share: a first
//! start, a restore, a refusal that changes nothing, and starting empty when asked.

use std::sync::Arc;

use tollgate::snapshot::{Opened, SnapshotError, StateFile, StateFileError};
use tollgate::{Decision, Key, Limiter, Profile};

const SECRET: &[u8] = b"state-file-test-secret";
const DAILY: &str = "\
name: state-file
identities: { capacity: 1024 }
route_classes:
  signup:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 1, per: 24h }
";

fn builder() -> tollgate::Builder {
    Limiter::builder(Profile::from_yaml(DAILY).unwrap()).key_secret(SECRET)
}

fn signup(l: &Limiter) -> Decision {
    let class = l.route_class("signup").unwrap();
    l.admit(&Key::authenticated("acme", "alice", class).unwrap())
}

#[test]
fn a_state_file_restores_refuses_without_change_and_starts_empty_only_when_asked() {
    let path = std::env::temp_dir().join(format!("tollgate-state-file-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let st = StateFile::new(&path);

    // No key secret: refused before anything is built or read.
    let no_secret = Limiter::builder(Profile::from_yaml(DAILY).unwrap());
    assert!(matches!(st.open(no_secret), Err(StateFileError::NoSecret)));

    let (first, opened) = st.open(builder()).unwrap();
    assert!(matches!(opened, Opened::FirstStart), "{opened:?}");
    let first = Arc::new(first);
    let cp = st.checkpoint(&first).unwrap();
    assert!(signup(&first).is_admit());
    assert!(!signup(&first).is_admit());
    let saved = StateFile::finish(cp).unwrap();
    assert_eq!(saved.identities, 1);

    let (second, opened) = st.open(builder()).unwrap();
    assert!(
        matches!(opened, Opened::Restored(s) if s.restored == 1),
        "{opened:?}"
    );
    assert!(!signup(&second).is_admit(), "still used up");

    // A corrupt file: a clear error naming the file, and the file left as it was.
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 20] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let e = st.open(builder()).unwrap_err();
    assert!(
        matches!(
            &e,
            StateFileError::Refused {
                cause: SnapshotError::Corrupt { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    let worded = e.explain("--state", "SECRET_ENV", "--start-empty");
    assert!(
        worded.contains("corrupt") && worded.contains("--start-empty"),
        "{worded}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);

    let lenient = StateFile {
        start_empty_on_refusal: true,
        ..st.clone()
    };
    let (fresh, opened) = lenient.open(builder()).unwrap();
    assert!(
        matches!(opened, Opened::StartedEmpty(SnapshotError::Corrupt { .. })),
        "{opened:?}"
    );
    assert!(signup(&fresh).is_admit(), "full buckets");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn without_a_state_file_the_limiter_is_built_fresh_and_with_one_it_is_opened() {
    // No file given: a plain build, which needs no key secret.
    let fresh =
        StateFile::open_optional(None, Limiter::builder(Profile::from_yaml(DAILY).unwrap()))
            .unwrap();
    assert!(signup(&fresh).is_admit());
    // A file given: the same rules as `open`, a missing secret among them.
    let path = std::env::temp_dir().join(format!("tollgate-state-opt-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let st = StateFile::new(&path);
    let no_secret = Limiter::builder(Profile::from_yaml(DAILY).unwrap());
    assert!(matches!(
        StateFile::open_optional(Some(&st), no_secret),
        Err(StateFileError::NoSecret)
    ));
    let opened = StateFile::open_optional(Some(&st), builder()).unwrap();
    assert!(signup(&opened).is_admit());
    assert!(!path.exists(), "opening writes nothing");
}
