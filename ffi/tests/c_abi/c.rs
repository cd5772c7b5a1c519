//! The C ABI from C: `tests/c/tollgate_test.c`, compiled with the system `cc` against the
//! library of this build ([`super::lib_dir`]), linked dynamically and (on Linux) statically, and
//! run. Also checks that the header compiles as C++.

use std::path::PathBuf;
use std::process::Command;

use super::{lib_dir, root};

fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ffi_c");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cc_available() -> bool {
    Command::new("cc").arg("--version").output().is_ok()
}

/// Runs `cmd`, panicking with its output if it fails; returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

fn cc_test_program(name: &str, link: &[&str]) -> PathBuf {
    let exe = out_dir().join(name);
    run(Command::new("cc")
        .current_dir(root())
        .args(["-std=c11", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .args(["-Iinclude", "tests/c/tollgate_test.c", "-o"])
        .arg(&exe)
        .args(link));
    exe
}

fn check_output(stdout: &str) {
    assert!(
        stdout.contains("tollgate_test: ") && stdout.contains(" passed, 0 failed"),
        "{stdout}"
    );
}

#[test]
fn c_program_linked_dynamically() {
    if !cc_available() {
        eprintln!("skipped: no `cc` on this machine");
        return;
    }
    let lib = lib_dir();
    let exe = cc_test_program(
        "tollgate_test_dynamic",
        &[
            &format!("-L{}", lib.display()),
            "-ltollgate",
            &format!("-Wl,-rpath,{}", lib.display()),
            "-lpthread",
        ],
    );
    // cargo's own LD_LIBRARY_PATH for tests may name `<target>/<profile>/` first, where an
    // older `cargo build` left another libtollgate.so; it would win over the rpath.
    check_output(&run(Command::new(exe)
        .env("LD_LIBRARY_PATH", lib)
        .env("DYLD_LIBRARY_PATH", lib)));
}

#[test]
#[cfg(target_os = "linux")]
fn c_program_linked_statically() {
    if !cc_available() {
        eprintln!("skipped: no `cc` on this machine");
        return;
    }
    let lib = lib_dir().join("libtollgate.a");
    // What `cargo rustc -- --print native-static-libs` says the staticlib needs on Linux.
    let exe = cc_test_program(
        "tollgate_test_static",
        &[
            lib.to_str().unwrap(),
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ],
    );
    check_output(&run(&mut Command::new(exe)));
}

#[test]
fn header_compiles_as_cpp() {
    if Command::new("c++").arg("--version").output().is_err() {
        eprintln!("skipped: no `c++` on this machine");
        return;
    }
    let src = out_dir().join("header.cpp");
    std::fs::write(
        &src,
        "#include \"tollgate.h\"\n\
         static_assert(sizeof(tg_result) == 4, \"tg_result is 32 bits\");\n\
         int main() { tg_decision d{}; return d.kind == TG_DECISION_KIND_ADMIT ? 0 : 1; }\n",
    )
    .unwrap();
    run(Command::new("c++")
        .current_dir(root())
        .args([
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-Iinclude",
        ])
        .arg(&src));
}
