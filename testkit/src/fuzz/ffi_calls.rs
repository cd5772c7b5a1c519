//! The `ffi_calls` check: what `fuzz/fuzz_targets/ffi_calls.rs` runs on every input, and what
//! `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/ffi_calls/`.
//!
//! Arbitrary calls through the C ABI with valid buffers (or NULL) and arbitrary lengths within
//! them and arbitrary bytes in them: every call returns a known result code, never `Panic`; an
//! output is written exactly when the call succeeds, and what is written is coherent (status
//! matches kind, message NUL-terminated within the buffer); obvious argument errors get their
//! documented codes.

use std::ffi::CStr;
use std::os::raw::c_char;

use tollgate_ffi::*;

use super::bytes::Bytes;

const BASE: &str = "name: ffi\nidentities: { capacity: 64 }\nroute_classes:\n  a:\n    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 5, per: 1m }\n  b:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n";
const WIDER: &str = "name: ffi2\nidentities: { capacity: 64 }\nroute_classes:\n  a:\n    burst: { tokens: 9, per: 1s }\n    sustained: { tokens: 9, per: 1s }\n  b:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n  c:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n";
const DROPS_CLASS: &str = "name: ffi3\nidentities: { capacity: 64 }\nroute_classes:\n  a:\n    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 5, per: 1m }\n";
const RESIZES: &str = "name: ffi4\nidentities: { capacity: 65 }\nroute_classes:\n  a:\n    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 5, per: 1m }\n  b:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n  c:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n";

impl<'a> Bytes<'a> {
    /// A slice of the input of a length the input picks (a valid buffer), or NULL.
    fn buf(&mut self, max: usize) -> (*const c_char, usize, Option<&'a [u8]>) {
        let tag = self.u8();
        if tag == 0xff {
            // NULL with a length: must be refused, not read.
            return (core::ptr::null(), usize::from(self.u8()), None);
        }
        let s = self.take(usize::from(tag) % (max + 1));
        (s.as_ptr().cast(), s.len(), Some(s))
    }
}

fn code(r: tg_result) -> tg_result {
    assert!(
        tg_result::from_u32(r as u32).is_some(),
        "unknown result {}",
        r as u32
    );
    assert_ne!(r, tg_result::Panic, "a call panicked");
    r
}

const SENTINEL: tg_decision = tg_decision {
    kind: tg_decision_kind::Unavailable,
    http_status: 4242,
    bucket: tg_bucket_kind::None,
    cause: tg_cause::StoreUnavailable,
    retry_after_ms: 4242,
    code: core::ptr::null(),
};

fn check_decision(r: tg_result, d: &tg_decision) {
    if r != tg_result::Ok {
        assert_eq!(*d, SENTINEL, "an output was written on failure ({r:?})");
        return;
    }
    let status = match d.kind {
        tg_decision_kind::Admit => 200,
        tg_decision_kind::Throttle | tg_decision_kind::Exceeds => 429,
        tg_decision_kind::Unavailable => 503,
    };
    assert_eq!(d.http_status, status, "{d:?}");
    if d.kind == tg_decision_kind::Exceeds {
        assert_eq!(d.retry_after_ms, TG_RETRY_AFTER_NONE, "no made-up wait");
        assert_ne!(d.bucket, tg_bucket_kind::None, "{d:?}");
    }
    if d.kind == tg_decision_kind::Admit {
        assert_eq!(d.retry_after_ms, TG_RETRY_AFTER_NONE);
    } else {
        assert!(!d.code.is_null(), "{d:?}");
        // SAFETY: a static NUL-terminated string (the ABI's promise, checked here).
        let _ = unsafe { CStr::from_ptr(d.code) };
    }
}

/// Runs one input; panics on a failed check.
pub fn check(data: &[u8]) {
    let mut b = Bytes(data);
    let mut lim: *mut tg_limiter = core::ptr::null_mut();
    // SAFETY: valid pointer and length; `lim` is a valid out pointer.
    let r = unsafe { tg_limiter_new_from_yaml(BASE.as_ptr().cast(), BASE.len(), &mut lim) };
    assert_eq!(r, tg_result::Ok);
    // Route classes the limiter has, when known (a reload from fuzzed YAML may add some).
    let mut classes = Some(2u32);
    let mut steps = 0;
    while !b.0.is_empty() && steps < 256 {
        steps += 1;
        match b.u8() % 8 {
            0 => {
                let (p, n, s) = b.buf(8);
                let mut out = 77u32;
                // SAFETY: `p` is NULL or `n` readable bytes; `out` is valid.
                let r = code(unsafe { tg_route_class(lim, p, n, &mut out) });
                match s {
                    None => assert_eq!(r, tg_result::NullArgument),
                    Some(s) if r == tg_result::Ok => {
                        assert!(out < classes.unwrap_or(u32::MAX), "{s:?} {out}");
                        if classes.is_some() {
                            assert!(matches!(s, b"a" | b"b" | b"c"), "{s:?} {out}");
                        }
                    }
                    Some(_) => assert_eq!(out, 77),
                }
            }
            op @ (1 | 2) => {
                let (tp, tn, ts) = b.buf(12);
                let (pp, pn, ps) = b.buf(12);
                let class = u32::from(b.u8() % 5);
                let mut out = SENTINEL;
                // 2: weighted, a cost from 0 (check) past the buckets (class a's burst is 2).
                let n = (op == 2).then(|| match b.u8() {
                    0xff => u32::MAX,
                    x => u32::from(x % 5),
                });
                // SAFETY: as above.
                let r = code(unsafe {
                    match n {
                        None => tg_admit(lim, tp, tn, pp, pn, class, &mut out),
                        Some(n) => tg_admit_n(lim, tp, tn, pp, pn, class, n, &mut out),
                    }
                });
                check_decision(r, &out);
                if r == tg_result::Ok && n == Some(u32::MAX) {
                    assert_eq!(out.kind, tg_decision_kind::Exceeds, "{out:?}");
                }
                // The documented order: tenant, principal (NULL, UTF-8), class, emptiness.
                let arg = |s: Option<&[u8]>| match s {
                    None => Some(tg_result::NullArgument),
                    Some(s) if std::str::from_utf8(s).is_err() => Some(tg_result::InvalidUtf8),
                    Some(_) => None,
                };
                let empty = ts.is_some_and(<[u8]>::is_empty) || ps.is_some_and(<[u8]>::is_empty);
                let want = arg(ts).or(arg(ps)).or(match classes {
                    Some(n) if class >= n => Some(tg_result::UnknownRouteClass),
                    Some(_) if empty => Some(tg_result::EmptyKey),
                    Some(_) => Some(tg_result::Ok),
                    None => None,
                });
                if let Some(want) = want {
                    assert_eq!(r, want, "{ts:?} {ps:?} {class}");
                }
            }
            3 => {
                let (p, n, s) = b.buf(20);
                let class = u32::from(b.u8() % 4);
                let mut out = SENTINEL;
                // SAFETY: as above.
                let weighted = b.u8() & 1 == 1;
                let r = code(unsafe {
                    if !weighted {
                        tg_admit_anonymous(lim, p.cast(), n, class, &mut out)
                    } else {
                        tg_admit_anonymous_n(lim, p.cast(), n, class, 2, &mut out)
                    }
                });
                check_decision(r, &out);
                match s {
                    None => assert_eq!(r, tg_result::NullArgument),
                    Some(_) if n != 4 && n != 16 => assert_eq!(r, tg_result::InvalidIpLength),
                    Some(_) => match classes {
                        Some(c) if class >= c => assert_eq!(r, tg_result::UnknownRouteClass),
                        Some(_) => assert_eq!(r, tg_result::Ok),
                        None => {}
                    },
                }
            }
            4 => {
                let which = b.u8() % 5;
                let (p, n, _) = match which {
                    0 => (BASE.as_ptr().cast(), BASE.len(), None),
                    1 => (WIDER.as_ptr().cast(), WIDER.len(), None),
                    2 => (DROPS_CLASS.as_ptr().cast(), DROPS_CLASS.len(), None),
                    3 => (RESIZES.as_ptr().cast(), RESIZES.len(), None),
                    _ => b.buf(64),
                };
                // SAFETY: as above.
                let r = code(unsafe { tg_limiter_reload(lim, p, n) });
                match (which, classes) {
                    // BASE drops class c once WIDER added it.
                    (0, Some(2)) | (1, Some(_)) => assert_eq!(r, tg_result::Ok),
                    (0, Some(_)) | (2 | 3, Some(_)) => assert_eq!(r, tg_result::ReloadRefused),
                    _ => {}
                }
                if r == tg_result::Ok {
                    classes = match which {
                        1 => classes.map(|c| c.max(3)),
                        0 => classes,
                        _ => None,
                    };
                }
            }
            5 => {
                let result = u32::from(b.u8()) * 37 + if b.u8() & 1 == 0 { 7000 } else { 0 };
                let len = usize::from(b.u8());
                let mut buf = vec![0x55 as c_char; len.max(1)];
                let mut n = usize::MAX;
                // SAFETY: `buf` holds at least `len` bytes; `n` is valid.
                let r = code(unsafe { tg_error_message(result, buf.as_mut_ptr(), len, &mut n) });
                if r == tg_result::Ok {
                    assert!(n < len);
                    assert_eq!(buf[n], 0);
                    assert!(buf[..n].iter().all(|&c| c != 0));
                } else {
                    assert_eq!(r, tg_result::BufferTooSmall);
                    assert_eq!(n, usize::MAX);
                }
            }
            6 => {
                let (p, n, _) = b.buf(96);
                let mut other: *mut tg_limiter = core::ptr::null_mut();
                // SAFETY: as above.
                let r = code(unsafe { tg_limiter_new_from_yaml(p, n, &mut other) });
                if r == tg_result::Ok {
                    assert!(!other.is_null());
                    // SAFETY: a handle from `tg_limiter_new_from_yaml`, freed once.
                    unsafe { tg_limiter_free(other) };
                } else {
                    assert!(other.is_null(), "out written on failure");
                }
            }
            _ => {
                let v = tg_version();
                assert!(!v.is_null());
                // SAFETY: static NUL-terminated string.
                let _ = unsafe { CStr::from_ptr(v) };
            }
        }
    }
    // SAFETY: the handle from above, freed once; NULL is accepted too.
    unsafe {
        tg_limiter_free(lim);
        tg_limiter_free(core::ptr::null_mut());
    }
}
