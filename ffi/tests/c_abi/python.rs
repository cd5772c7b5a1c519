//! `examples/python/tollgate_ctypes.py` runs against the cdylib of this build and shows a caller
//! admitted, then throttled. Skipped (with a message) only where there is no `python3`.

use std::process::Command;

use super::{cdylib_name, lib_dir, root};

#[test]
fn ctypes_example_admits_then_throttles() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed, so the ctypes example was not run");
        return;
    }
    let out = Command::new("python3")
        .current_dir(root())
        .arg("examples/python/tollgate_ctypes.py")
        .arg(lib_dir().join(cdylib_name()))
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the ctypes example failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // The example profile's write class has a burst of 10.
    let admits = stdout
        .lines()
        .filter(|l| l.starts_with("write #") && l.contains("ADMIT"))
        .count();
    assert_eq!(admits, 10, "{stdout}");
    let throttle = stdout
        .lines()
        .find(|l| l.starts_with("write #11") && l.contains("THROTTLE"))
        .unwrap_or_else(|| panic!("no throttle on the 11th write:\n{stdout}"));
    assert!(throttle.contains("http=429"), "{throttle}");
    assert!(throttle.contains("code='rate_limited'"), "{throttle}");
    assert!(
        stdout.contains("empty principal: tollgate error 7003"),
        "{stdout}"
    );
    // Weighted: 3 of the burst of 10 fit; 11 never can.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("weighted n=3 ") && l.contains("ADMIT")),
        "{stdout}"
    );
    let exceeds = stdout
        .lines()
        .find(|l| l.starts_with("weighted n=11 "))
        .unwrap_or_else(|| panic!("no weighted n=11 line:\n{stdout}"));
    assert!(
        exceeds.contains("EXCEEDS")
            && exceeds.contains("http=429")
            && exceeds.contains("retry_after=- ")
            && exceeds.contains("code='cost_exceeds_limit'"),
        "{exceeds}"
    );
}
