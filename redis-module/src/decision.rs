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

/// An identity's stored value (`admit.lua`'s keys[1]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stored {
    /// Burst TAT, sustained TAT, the expiry last set (ms).
    pub tats: [f64; 3],
    /// The burst and sustained emission intervals the TATs are counted in and when the value
    /// was last charged (us); `None` for the previous versions' values, counted in the current
    /// intervals.
    pub counted: Option<[f64; 3]>,
}

/// An identity's stored value: 48 bytes are six little-endian doubles (`'<dddddd'`), 24 bytes
/// three (no intervals); the older text "<burst>:<sustained>" has no expiry (0) either.
/// Anything else reads as absent, and so does a value tollgate never writes: a number that is
/// not finite, or an interval below 1 us (`admit.lua`'s `readable`). Such a value would
/// otherwise turn into NaN TATs, admitted and written back, and expiries no replica accepts.
pub fn unpack(v: &[u8]) -> Option<Stored> {
    let stored = unpack_any(v)?;
    let finite = stored.tats.iter().all(|x| x.is_finite());
    let counted = stored.counted.is_none_or(|[fb, fs, at]| {
        fb >= 1.0 && fs >= 1.0 && [fb, fs, at].iter().all(|x| x.is_finite())
    });
    (finite && counted).then_some(stored)
}

fn unpack_any(v: &[u8]) -> Option<Stored> {
    let d = |i: usize| f64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
    if v.len() == 48 {
        return Some(Stored {
            tats: [d(0), d(1), d(2)],
            counted: Some([d(3), d(4), d(5)]),
        });
    }
    if v.len() == 24 {
        return Some(Stored {
            tats: [d(0), d(1), d(2)],
            counted: None,
        });
    }
    let colon = v.iter().position(|b| *b == b':')?;
    let (a, b) = (&v[..colon], &v[colon + 1..]);
    let digits = |w: &[u8]| !w.is_empty() && w.iter().all(u8::is_ascii_digit);
    if !digits(a) || !digits(b) {
        return None;
    }
    let num = |w: &[u8]| core::str::from_utf8(w).ok()?.parse::<f64>().ok();
    Some(Stored {
        tats: [num(a)?, num(b)?, 0.0],
        counted: None,
    })
}

/// `struct.pack('<ddd', ..)` or `'<dddddd'`: at most six doubles, little-endian, in order; the
/// buffer and how many of its bytes they took.
pub fn pack(v: &[f64]) -> ([u8; 48], usize) {
    let mut out = [0u8; 48];
    for (i, x) in v.iter().take(6).enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    (out, 8 * v.len().min(6))
}

/// `admit.lua`'s `DEBT_CAP`: the embedded limiter's cap on a converted debt, 2^56 ns, rounded
/// up to whole microseconds.
pub const DEBT_CAP: f64 = 72_057_594_037_928.0;

/// `admit.lua`'s `owed`: `ceil(d * tn / to)` capped at [`DEBT_CAP`]. The function computes it
/// exactly in doubles (its parts stay below 2^48); here it is computed exactly in `u128`, so
/// the result is the same integer (all three are integers below 2^53, see `admit.lua`).
///
/// A value tollgate did not write (an interval below 1 or not a number) must not stop the
/// server: the Lua's arithmetic gives NaN for a zero interval, and so does this; a product
/// past `u128` (only such values reach one) is capped.
pub fn owed(d: f64, to: f64, tn: f64) -> f64 {
    if !(to >= 1.0 && d.is_finite() && tn.is_finite()) {
        return f64::NAN;
    }
    let (d, to, tn) = (d as u128, to as u128, tn as u128);
    d.checked_mul(tn)
        .map_or(DEBT_CAP as u128, |x| x.div_ceil(to).min(DEBT_CAP as u128)) as f64
}

/// `admit.lua`'s `convert`: a TAT counted in tokens of `from` us as one in tokens of `to` us,
/// converted at `at` (a bucket full at `at` is kept as it is).
pub fn convert(tat: f64, from: f64, to: f64, at: f64) -> f64 {
    if tat <= at || from == to {
        return tat;
    }
    at + owed(tat - at, from, to)
}

/// What `admit` replies: `{ outcome, wait_us, now_us }` (255: past the deadline).
pub type Reply = [f64; 3];

/// The identity's write: the new value (burst TAT, sustained TAT, expiry, the intervals they
/// are counted in, now) and, if the expiry must move, the new expiry (ms since the Unix epoch;
/// `None`: `SET .. KEEPTTL`).
#[derive(Debug, PartialEq)]
pub struct BucketWrite {
    pub value: [f64; 6],
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
/// the new TATs (`nb`, `ns`), the expiry last set and the cost counted (`c`). `reloaded` is
/// `ARGV[4]`, when the worker's profile took effect (us): a value counted in other intervals
/// is converted as of the later of it and the value's last charge, at most `now`.
pub fn buckets(
    p: &Class,
    now: f64,
    n: f64,
    stored: Option<Stored>,
    reloaded: f64,
) -> Result<Charge, Reply> {
    let c = if n > 0.0 { n } else { 1.0 };
    let (mut tb, mut ts, mut exp) = (now, now, 0.0);
    if let Some(Stored {
        tats: [b, s, e],
        counted,
    }) = stored
    {
        (tb, ts, exp) = (b, s, e);
        if let Some([fb, fs, at]) = counted {
            if fb != p.bt || fs != p.st {
                // math.min(math.max(reloaded, at), now)
                let at = reloaded.max(at).min(now);
                (tb, ts) = (convert(tb, fb, p.bt, at), convert(ts, fs, p.st, at));
            }
        }
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
            value: [ch.nb, ch.ns, ch.exp, p.bt, p.st, now],
            expire_at: None,
        }
    } else {
        let exp = need + p.margin + ((m - now) / 8000.0).floor();
        BucketWrite {
            value: [ch.nb, ch.ns, exp, p.bt, p.st, now],
            expire_at: Some(exp),
        }
    }
}

/// `refund.lua`'s bucket step: the value to write back (`SET .. KEEPTTL`), if the key holds one:
/// `n` tokens of the intervals a 48-byte value is counted in, else the worker's costs `burst`
/// and `sustained` (written back as 24 bytes).
pub fn refund_buckets(
    stored: Option<Stored>,
    n: f64,
    burst: f64,
    sustained: f64,
) -> Option<Vec<f64>> {
    let Stored {
        tats: [tb, ts, exp],
        counted,
    } = stored?;
    Some(match counted {
        Some([fb, fs, at]) => vec![
            (tb - n * fb).max(0.0),
            (ts - n * fs).max(0.0),
            exp,
            fb,
            fs,
            at,
        ],
        None => vec![(tb - burst).max(0.0), (ts - sustained).max(0.0), exp],
    })
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

    /// A value of the previous versions (no intervals).
    fn old(tats: [f64; 3]) -> Option<Stored> {
        Some(Stored {
            tats,
            counted: None,
        })
    }

    #[test]
    fn a_reload_carries_the_debt_in_tokens() {
        // 100 per 1 s (10 ms a token) emptied at `now`, then the class is 100 per 10 s.
        let a = class(b"10000 1000000 1 1000000 100 0 0 0").unwrap();
        let b = class(b"100000 10000000 1 1000000 100 0 0 0").unwrap();
        let now = 1.8e15;
        let emptied = Some(Stored {
            tats: [now + 1e6, now, 0.0],
            counted: Some([a.bt, a.st, now]),
        });
        // Converted as of the reload (now): 100 tokens of 100 ms; the next one in 100 ms.
        assert_eq!(buckets(&b, now, 1.0, emptied, now), Err([1.0, 1e5, now]));
        // The same value read 1 s later: 9 s (90 tokens) owed, 10 tokens left.
        let r = buckets(&b, now + 1e6, 1.0, emptied, now).unwrap();
        assert_eq!(r.nb, now + 1e7 + 1e5);
        // A reload this worker took 500 ms later: half the debt had drained at the old rate,
        // 50 tokens owed.
        let r = buckets(&b, now + 5e5, 1.0, emptied, now + 5e5).unwrap();
        assert_eq!(r.nb, now + 5e5 + 5e6 + 1e5);
        // As of the last charge, never earlier (a reload instant before it), never after now.
        assert_eq!(buckets(&b, now, 1.0, emptied, 0.0), Err([1.0, 1e5, now]));
        // The same intervals: nothing is converted (the old value's 1 s of debt, 10 ms late).
        assert_eq!(buckets(&a, now, 1.0, emptied, now), Err([1.0, 1e4, now]));
    }

    #[test]
    fn conversions_round_up_and_cap() {
        assert_eq!(owed(1e6, 1e4, 1e5), 1e7);
        assert_eq!(owed(101.0, 3.0, 2.0), 68.0, "ceil(202 / 3)");
        assert_eq!(convert(500.0, 3.0, 2.0, 400.0), 467.0);
        assert_eq!(
            convert(400.0, 3.0, 2.0, 400.0),
            400.0,
            "full at the instant"
        );
        // 2^40 us of 1 us tokens owed in tokens of a month: capped at 2^56 ns.
        assert_eq!(owed(2f64.powi(40), 1.0, 2.6e12), DEBT_CAP);
        // Beyond 2^53 on the way, exact at the end: (2^45 + 1) * (2^45 - 1) / 2^45.
        let (d, t) = (2f64.powi(45) + 1.0, 2f64.powi(45));
        assert_eq!(owed(d, t, t - 1.0), t);
        assert!(owed(5.0, 0.0, 1.0).is_nan(), "a zero interval is no panic");
    }

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
        let (b, len) = pack(&v);
        assert_eq!(unpack(&b[..len]), old(v));
        let w = [1.5e15, 1.6e15, 1.7e12, 1e4, 36e3, 1.4e15];
        let (b, len) = pack(&w);
        assert_eq!(len, 48);
        let counted = Some([1e4, 36e3, 1.4e15]);
        assert_eq!(unpack(&b[..len]), Some(Stored { tats: v, counted }));
        assert_eq!(unpack(b"100:200"), old([100.0, 200.0, 0.0]));
        assert_eq!(unpack(b"100:"), None);
        assert_eq!(unpack(b"1:2:3"), None);
        assert_eq!(unpack(b"garbage"), None);
        // What tollgate never writes reads as absent: NaN, infinities, intervals below 1 us.
        for bad in [
            [f64::NAN, 1.6e15, 1.7e12, 1e4, 36e3, 1.4e15],
            [1.5e15, f64::INFINITY, 1.7e12, 1e4, 36e3, 1.4e15],
            [1.5e15, 1.6e15, 1.7e12, 0.0, 36e3, 1.4e15],
            [1.5e15, 1.6e15, 1.7e12, 1e4, -3.0, 1.4e15],
            [1.5e15, 1.6e15, 1.7e12, 1e4, 36e3, f64::NEG_INFINITY],
        ] {
            assert_eq!(unpack(&pack(&bad).0), None, "{bad:?}");
        }
        assert_eq!(unpack(&pack(&[f64::NAN, 1.0, 2.0]).0[..24]), None);
        assert_eq!(unpack(format!("{}:1", "9".repeat(400)).as_bytes()), None);
    }

    #[test]
    fn a_new_identity_is_admitted_with_its_expiry_set() {
        let p = class(C).unwrap();
        let now = 1_800_000_000_000_000.0;
        let ch = buckets(&p, now, 1.0, None, 0.0).unwrap();
        assert_eq!((ch.nb, ch.ns), (now + 1e4, now + 36_000.0));
        let w = bucket_write(&p, now, &ch);
        // need = floor((now + 36 ms) / 1000) + 1, plus the margin and an eighth of 36 ms in ms.
        let need = ((now + 36_000.0) / 1000.0).floor() + 1.0;
        assert_eq!(w.expire_at, Some(need + 100.0 + 4.0));
        // Charged again soon after: the expiry still covers it, KEEPTTL.
        let stored = unpack(&pack(&w.value).0);
        let again = buckets(&p, now + 1.0, 1.0, stored, 0.0).unwrap();
        assert_eq!(again.nb, now + 2e4);
        assert_eq!(bucket_write(&p, now + 1.0, &again).expire_at, None);
    }

    #[test]
    fn refusals_name_the_longest_wait() {
        // burst 2 per 20 ms (t 10 ms, tau 20 ms); sustained 100 per 3.6 s.
        let p = class(b"10000 20000 36000 3600000 100 0 0 0").unwrap();
        let now = 1e15;
        // Burst TAT 20 ms ahead: the next token is 10 ms away.
        let r = buckets(&p, now, 1.0, old([now + 20_000.0, now, 0.0]), 0.0);
        assert_eq!(r, Err([1.0, 10_000.0, now]));
        // Both over: the sustained wait is longer.
        let r = buckets(
            &p,
            now,
            1.0,
            old([now + 20_000.0, now + 3_600_000.0, 0.0]),
            0.0,
        );
        assert_eq!(r, Err([2.0, 36_000.0, now]));
        // A tie names the sustained bucket.
        let q = class(b"10000 20000 10000 20000 100 0 0 0").unwrap();
        let r = buckets(
            &q,
            now,
            1.0,
            old([now + 20_000.0, now + 20_000.0, 0.0]),
            0.0,
        );
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
            refund_buckets(old([50.0, 70.0, 9.0]), 2.0, 20.0, 80.0),
            Some(vec![30.0, 0.0, 9.0])
        );
        // Counted in intervals 5 and 40: two tokens of those, whatever the worker's costs.
        let counted = Some(Stored {
            tats: [50.0, 70.0, 9.0],
            counted: Some([5.0, 40.0, 3.0]),
        });
        assert_eq!(
            refund_buckets(counted, 2.0, 20.0, 80.0),
            Some(vec![40.0, 0.0, 9.0, 5.0, 40.0, 3.0])
        );
        assert_eq!(refund_buckets(None, 1.0, 1.0, 1.0), None);
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
