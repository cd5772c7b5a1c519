#!/usr/bin/env python3
"""tollgate from Python through ctypes: build a limiter from the example profile, admit one
caller on the `write` route class until it is throttled, and print every decision.

    cargo build --release -p tollgate-ffi-lib
    python3 ffi/examples/python/tollgate_ctypes.py target/release/libtollgate.so

The library path is the first argument, or $TOLLGATE_LIB, or else target/{release,debug}/ under
the repository. The profile is examples/profiles/example.yaml unless $TOLLGATE_PROFILE names
another. The structures below mirror ffi/include/tollgate.h.
"""

import ctypes
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

TG_RESULT_OK = 0
TG_RETRY_AFTER_NONE = 2**64 - 1
TG_ERROR_MESSAGE_CAPACITY = 128
TG_PROFILE_ERROR_MESSAGE_CAPACITY = 512
KINDS = {0: "ADMIT", 1: "THROTTLE", 2: "UNAVAILABLE", 3: "EXCEEDS"}
BUCKETS = {0: "-", 1: "burst", 2: "sustained"}


class Decision(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("http_status", ctypes.c_uint16),
        ("bucket", ctypes.c_uint32),
        ("cause", ctypes.c_uint32),
        ("retry_after_ms", ctypes.c_uint64),
        # Owned by the limiter, valid until tg_limiter_free: read it, never free it.
        ("code", ctypes.c_char_p),
    ]


class ProfileError(ctypes.Structure):
    _fields_ = [
        ("line", ctypes.c_uint32),
        ("column", ctypes.c_uint32),
        ("message_len", ctypes.c_size_t),
        ("message", ctypes.c_char * TG_PROFILE_ERROR_MESSAGE_CAPACITY),
    ]


def load(path):
    lib = ctypes.CDLL(str(path))
    lim = ctypes.c_void_p
    res = ctypes.c_uint32
    size = ctypes.c_size_t
    sigs = {
        "tg_version": (ctypes.c_char_p, []),
        "tg_limiter_new_from_yaml_err": (
            res, [ctypes.c_char_p, size, ctypes.POINTER(ProfileError), ctypes.POINTER(lim)]),
        "tg_limiter_free": (None, [lim]),
        "tg_route_class": (res, [lim, ctypes.c_char_p, size, ctypes.POINTER(ctypes.c_uint32)]),
        "tg_admit": (res, [lim, ctypes.c_char_p, size, ctypes.c_char_p, size, ctypes.c_uint32,
                           ctypes.POINTER(Decision)]),
        "tg_admit_n": (res, [lim, ctypes.c_char_p, size, ctypes.c_char_p, size, ctypes.c_uint32,
                             ctypes.c_uint32, ctypes.POINTER(Decision)]),
        "tg_admit_anonymous": (res, [lim, ctypes.c_char_p, size, ctypes.c_uint32,
                                     ctypes.POINTER(Decision)]),
        "tg_error_message": (res, [ctypes.c_uint32, ctypes.c_char_p, size,
                                   ctypes.POINTER(size)]),
    }
    for name, (restype, argtypes) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
    return lib


class TollgateError(Exception):
    pass


def check(lib, result):
    if result != TG_RESULT_OK:
        buf = ctypes.create_string_buffer(TG_ERROR_MESSAGE_CAPACITY)
        n = ctypes.c_size_t()
        lib.tg_error_message(result, buf, len(buf), ctypes.byref(n))
        raise TollgateError(f"tollgate error {result}: {buf.value.decode()}")


def describe(d):
    wait = "-" if d.retry_after_ms == TG_RETRY_AFTER_NONE else f"{d.retry_after_ms}ms"
    return (f"{KINDS[d.kind]:<11} http={d.http_status} retry_after={wait:<7} "
            f"bucket={BUCKETS[d.bucket]:<9} code={d.code.decode()!r}")


def find_library():
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    if os.environ.get("TOLLGATE_LIB"):
        return Path(os.environ["TOLLGATE_LIB"])
    name = "libtollgate.dylib" if sys.platform == "darwin" else "libtollgate.so"
    for profile in ("release", "debug"):
        candidate = REPO / "target" / profile / name
        if candidate.exists():
            return candidate
    sys.exit("usage: tollgate_ctypes.py PATH/TO/libtollgate.so (or set TOLLGATE_LIB); "
             "build it with `cargo build --release -p tollgate-ffi-lib`")


def main():
    lib = load(find_library())
    print(f"tollgate {lib.tg_version().decode()}")
    profile_path = Path(os.environ.get("TOLLGATE_PROFILE", REPO / "examples/profiles/example.yaml"))
    yaml = profile_path.read_bytes()

    handle = ctypes.c_void_p()
    err = ProfileError()
    result = lib.tg_limiter_new_from_yaml_err(yaml, len(yaml), ctypes.byref(err),
                                              ctypes.byref(handle))
    if result != TG_RESULT_OK:
        sys.exit(f"{profile_path}:{err.line}:{err.column}: {err.message.decode()}")
    try:
        write = ctypes.c_uint32()
        check(lib, lib.tg_route_class(handle, b"write", 5, ctypes.byref(write)))

        tenant, principal = b"acme", b"alice"
        d = Decision()
        for i in range(1, 1001):
            check(lib, lib.tg_admit(handle, tenant, len(tenant), principal, len(principal),
                                    write, ctypes.byref(d)))
            print(f"write #{i:<3} {describe(d)}")
            if d.kind != 0:
                break

        ip = bytes([192, 0, 2, 1])
        check(lib, lib.tg_admit_anonymous(handle, ip, len(ip), write, ctypes.byref(d)))
        print(f"anonymous 192.0.2.1 {describe(d)}")

        # Weighted cost: n tokens in one request; more than the bucket holds is refused apart,
        # with no wait (retrying never helps) and nothing charged.
        for n in (3, 11):
            check(lib, lib.tg_admit_n(handle, tenant, len(tenant), b"bob", 3, write, n,
                                      ctypes.byref(d)))
            print(f"weighted n={n:<3} {describe(d)}")

        # Errors are codes: an empty principal is refused and nothing is charged.
        try:
            check(lib, lib.tg_admit(handle, tenant, len(tenant), b"", 0, write,
                                    ctypes.byref(d)))
        except TollgateError as e:
            print(f"empty principal: {e}")
    finally:
        lib.tg_limiter_free(handle)


if __name__ == "__main__":
    main()
