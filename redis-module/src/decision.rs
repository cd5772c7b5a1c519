//! The decision of `src/redis/admit.lua` and `refund.lua`, step for step, in pure Rust: what the
//! commands read goes in, what they must write and reply comes out. Numbers are `f64` as in the
//! Lua (Redis Lua numbers are doubles), so every sum, comparison, `fmod` and `floor` is the one
//! the function computes, and the packed TATs are the same bits; see `admit.lua` for why every
//! value is an integer below 2^53.

/// The class constants (`ARGV[1]`: "bt btau st stau margin window slots cap").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Class {
    pub bt: f64,
    pub btau: f64,
    pub st: f64,
    pub stau: f64,
    pub margin: f64,
    pub window: f64,
    pub slots: f64,
    pub cap: f64,
}

/// Parses the class constants: eight unsigned decimal integers separated by spaces.
pub fn class(s: &[u8]) -> Option<Class> {
    let mut p = [0f64; 8];
    let mut words = s.split(|b| *b == b' ').filter(|w| !w.is_empty());
    for x in &mut p {
        let w = words.next()?;
        if !w.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // The nearest double to the decimal, as Lua's tonumber (exact below 2^53; a u64 rounds
        // to the nearest double too). Integer parsing: a third of the float parser's cost.
        *x = core::str::from_utf8(w).ok()?.parse::<u64>().ok()? as f64;
    }
    if words.next().is_some() {
        return None;
    }
    let [bt, btau, st, stau, margin, window, slots, cap] = p;
    Some(Class {
        bt,
        btau,
        st,
        stau,
        margin,
        window,
        slots,
        cap,
    })
}

/// A decimal integer argument (optional sign, digits), as a double.
pub fn int(s: &[u8]) -> Option<f64> {
    let v: i64 = core::str::from_utf8(s).ok()?.parse().ok()?;
    Some(v as f64)
}

/// A number stored in the capacity hash, as Lua's `tonumber` reads it (decimal).
pub fn stored_number(s: Option<&[u8]>) -> Option<f64> {
    let t = core::str::from_utf8(s?).ok()?.trim_ascii();
    t.parse().ok()
}

/// An identity's stored value: burst TAT, sustained TAT, the expiry last set (ms). 24 bytes are
/// three little-endian doubles; the previous version's text "<burst>:<sustained>" has no expiry
/// (0). Anything else reads as absent.
pub fn unpack(v: &[u8]) -> Option<[f64; 3]> {
    if v.len() == 24 {
        let d = |i: usize| f64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
        return Some([d(0), d(1), d(2)]);
    }
    let colon = v.iter().position(|b| *b == b':')?;
    let (a, b) = (&v[..colon], &v[colon + 1..]);
    let digits = |w: &[u8]| !w.is_empty() && w.iter().all(u8::is_ascii_digit);
    if !digits(a) || !digits(b) {
        return None;
    }
    let num = |w: &[u8]| core::str::from_utf8(w).ok()?.parse::<f64>().ok();
    Some([num(a)?, num(b)?, 0.0])
}

/// `struct.pack('<ddd', ..)`.
pub fn pack(v: [f64; 3]) -> [u8; 24] {
    let mut out = [0u8; 24];
    for (i, x) in v.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// What `admit` replies: `{ outcome, wait_us, now_us }` (255: past the deadline).
pub type Reply = [f64; 3];

/// The identity's write: the new value and, if the expiry must move, the new one (ms since the
/// Unix epoch; `None`: `SET .. KEEPTTL`).
#[derive(Debug, PartialEq)]
pub struct BucketWrite {
    pub value: [f64; 3],
    pub expire_at: Option<f64>,
}

/// The capacity hash's write.
#[derive(Debug, PartialEq)]
pub enum CapacityWrite {
    /// A new window: delete the hash, then `e`, `s` and the tenant's field, expiring at `expire`.
    Fresh { e: f64, n: f64, expire: f64 },
    /// The same window: the shard's count and the tenant's.
    Counts { s: f64, t: f64 },
}

/// The capacity hash as read: `e`, `s` and the tenant's field (Lua's `tonumber` of each).
pub type CapacityRead = [Option<f64>; 3];

/// The first half of a decision, up to the buckets: `Err(reply)` if refused by a bucket, else
/// the new TATs (`nb`, `ns`), the expiry last set and the cost counted (`c`).
pub fn buckets(p: &Class, now: f64, n: f64, stored: Option<[f64; 3]>) -> Result<Charge, Reply> {
    let c = if n > 0.0 { n } else { 1.0 };
    let (mut tb, mut ts, mut exp) = (now, now, 0.0);
    if let Some([b, s, e]) = stored {
        (tb, ts, exp) = (b, s, e);
    }
    // (A present value that does not parse leaves the full buckets, as the Lua does.)
    if tb < now {
        tb = now;
    }
    if ts < now {
        ts = now;
    }
    let (nb, ns) = (tb + c * p.bt, ts + c * p.st);
    let (wb, ws) = (nb - now - p.btau, ns - now - p.stau);
    if wb > 0.0 || ws > 0.0 {
        return Err(if wb > ws {
            [1.0, wb, now]
        } else {
            [2.0, ws, now]
        });
    }
    Ok(Charge { nb, ns, exp, c })
}

/// What the buckets would charge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Charge {
    pub nb: f64,
    pub ns: f64,
    pub exp: f64,
    pub c: f64,
}

/// The window end (us) a decision at `now` counts in.
pub fn window_end(p: &Class, now: f64) -> f64 {
    now - now % p.window + p.window
}

/// The shared capacity check (`p.window > 0`): `Err(reply)` if the tenant's share or the shard
/// is used up, else the write an admission makes (`n > 0`), if any.
pub fn capacity(
    p: &Class,
    now: f64,
    n: f64,
    c: f64,
    read: CapacityRead,
) -> Result<Option<CapacityWrite>, Reply> {
    let wend = window_end(p, now);
    let (e, sc, tc, fresh) = match read[0] {
        Some(e) if e >= wend && e % p.window == 0.0 => {
            (e, read[1].unwrap_or(0.0), read[2].unwrap_or(0.0), false)
        }
        _ => (wend, 0.0, 0.0, true),
    };
    if tc + c > p.cap {
        return Err([3.0, wend - now, now]);
    }
    if sc + c > p.slots {
        return Err([4.0, wend - now, now]);
    }
    if n <= 0.0 {
        return Ok(None);
    }
    Ok(Some(if fresh {
        CapacityWrite::Fresh {
            e,
            n,
            expire: (e / 1000.0).floor() + 1.0 + p.margin,
        }
    } else {
        CapacityWrite::Counts {
            s: sc + n,
            t: tc + n,
        }
    }))
}

/// The identity's write for an admission that charges (`n > 0`).
pub fn bucket_write(p: &Class, now: f64, ch: &Charge) -> BucketWrite {
    let m = if ch.nb > ch.ns { ch.nb } else { ch.ns };
    let need = (m / 1000.0).floor() + 1.0;
    if ch.exp >= need {
        BucketWrite {
            value: [ch.nb, ch.ns, ch.exp],
            expire_at: None,
        }
    } else {
        let exp = need + p.margin + ((m - now) / 8000.0).floor();
        BucketWrite {
            value: [ch.nb, ch.ns, exp],
            expire_at: Some(exp),
        }
    }
}

/// `refund.lua`'s bucket step: the value to write back (`SET .. KEEPTTL`), if the key holds one.
pub fn refund_buckets(stored: Option<[f64; 3]>, burst: f64, sustained: f64) -> Option<[f64; 3]> {
    let [tb, ts, exp] = stored?;
    Some([(tb - burst).max(0.0), (ts - sustained).max(0.0), exp])
}

/// `refund.lua`'s capacity step: the counts to write, if the hash still counts window `wend`.
pub fn refund_capacity(wend: f64, n: f64, read: CapacityRead) -> Option<(f64, f64)> {
    if wend <= 0.0 || read[0] != Some(wend) {
        return None;
    }
    let (sc, tc) = (read[1].unwrap_or(0.0), read[2].unwrap_or(0.0));
    Some(((sc - n).max(0.0), (tc - n).max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &[u8] = b"10000 1000000 36000 3600000000 100 0 0 0";

    #[test]
    fn class_constants_parse_strictly() {
        let p = class(C).unwrap();
        assert_eq!((p.bt, p.stau, p.margin, p.window), (1e4, 3.6e9, 100.0, 0.0));
        assert_eq!(class(b"1 2 3 4 5 6 7"), None, "seven numbers");
        assert_eq!(class(b"1 2 3 4 5 6 7 8 9"), None, "nine numbers");
        assert_eq!(class(b"1 2 3 4 5 6 7 x8"), None, "not digits");
        assert_eq!(class(b"1 2 3 -4 5 6 7 8"), None, "a sign");
    }

    #[test]
    fn packed_and_legacy_values() {
        let v = [1.5e15, 1.6e15, 1.7e12];
        assert_eq!(unpack(&pack(v)), Some(v));
        assert_eq!(unpack(b"100:200"), Some([100.0, 200.0, 0.0]));
        assert_eq!(unpack(b"100:"), None);
        assert_eq!(unpack(b"1:2:3"), None);
        assert_eq!(unpack(b"garbage"), None);
    }

    #[test]
    fn a_new_identity_is_admitted_with_its_expiry_set() {
        let p = class(C).unwrap();
        let now = 1_800_000_000_000_000.0;
        let ch = buckets(&p, now, 1.0, None).unwrap();
        assert_eq!((ch.nb, ch.ns), (now + 1e4, now + 36_000.0));
        let w = bucket_write(&p, now, &ch);
        // need = floor((now + 36 ms) / 1000) + 1, plus the margin and an eighth of 36 ms in ms.
        let need = ((now + 36_000.0) / 1000.0).floor() + 1.0;
        assert_eq!(w.expire_at, Some(need + 100.0 + 4.0));
        // Charged again soon after: the expiry still covers it, KEEPTTL.
        let again = buckets(&p, now + 1.0, 1.0, Some(w.value)).unwrap();
        assert_eq!(again.nb, now + 2e4);
        assert_eq!(bucket_write(&p, now + 1.0, &again).expire_at, None);
    }

    #[test]
    fn refusals_name_the_longest_wait() {
        // burst 2 per 20 ms (t 10 ms, tau 20 ms); sustained 100 per 3.6 s.
        let p = class(b"10000 20000 36000 3600000 100 0 0 0").unwrap();
        let now = 1e15;
        // Burst TAT 20 ms ahead: the next token is 10 ms away.
        let r = buckets(&p, now, 1.0, Some([now + 20_000.0, now, 0.0]));
        assert_eq!(r, Err([1.0, 10_000.0, now]));
        // Both over: the sustained wait is longer.
        let r = buckets(&p, now, 1.0, Some([now + 20_000.0, now + 3_600_000.0, 0.0]));
        assert_eq!(r, Err([2.0, 36_000.0, now]));
        // A tie names the sustained bucket.
        let q = class(b"10000 20000 10000 20000 100 0 0 0").unwrap();
        let r = buckets(&q, now, 1.0, Some([now + 20_000.0, now + 20_000.0, 0.0]));
        assert_eq!(r, Err([2.0, 10_000.0, now]));
    }

    #[test]
    fn capacity_windows() {
        // Window 1 s, 10 slots, tenant cap 4.
        let p = class(b"1 1000 1 1000 100 1000000 10 4").unwrap();
        let now = 1_000_000_250_000.0;
        let wend = 1_000_001_000_000.0;
        assert_eq!(window_end(&p, now), wend);
        // Empty: a fresh window, expiring a margin after its end.
        let w = capacity(&p, now, 2.0, 2.0, [None; 3]).unwrap();
        let expire = (wend / 1000.0).floor() + 1.0 + 100.0;
        assert_eq!(
            w,
            Some(CapacityWrite::Fresh {
                e: wend,
                n: 2.0,
                expire
            })
        );
        // Counted in this window.
        let w = capacity(&p, now, 1.0, 1.0, [Some(wend), Some(5.0), Some(3.0)]).unwrap();
        assert_eq!(w, Some(CapacityWrite::Counts { s: 6.0, t: 4.0 }));
        // The tenant's cap, then the shard's slots.
        let r = capacity(&p, now, 2.0, 2.0, [Some(wend), Some(5.0), Some(3.0)]);
        assert_eq!(r, Err([3.0, 750_000.0, now]));
        let r = capacity(&p, now, 1.0, 1.0, [Some(wend), Some(10.0), Some(0.0)]);
        assert_eq!(r, Err([4.0, 750_000.0, now]));
        // An older window starts over; a newer one (the clock stepped back) is counted in.
        let w = capacity(&p, now, 1.0, 1.0, [Some(wend - 1e6), Some(10.0), Some(4.0)]);
        assert!(matches!(w, Ok(Some(CapacityWrite::Fresh { .. }))));
        let w = capacity(&p, now, 1.0, 1.0, [Some(wend + 1e6), Some(1.0), Some(1.0)]);
        assert_eq!(w, Ok(Some(CapacityWrite::Counts { s: 2.0, t: 2.0 })));
        // A peek writes nothing.
        assert_eq!(capacity(&p, now, 0.0, 1.0, [None; 3]), Ok(None));
    }

    #[test]
    fn refunds() {
        assert_eq!(
            refund_buckets(Some([50.0, 70.0, 9.0]), 20.0, 80.0),
            Some([30.0, 0.0, 9.0])
        );
        assert_eq!(refund_buckets(None, 1.0, 1.0), None);
        assert_eq!(
            refund_capacity(5e6, 2.0, [Some(5e6), Some(3.0), Some(1.0)]),
            Some((1.0, 0.0))
        );
        assert_eq!(
            refund_capacity(5e6, 2.0, [Some(6e6), Some(3.0), Some(1.0)]),
            None
        );
        assert_eq!(refund_capacity(0.0, 2.0, [None; 3]), None);
    }
}
