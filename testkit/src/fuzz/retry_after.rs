//! The `retry_after` check: what `fuzz/fuzz_targets/retry_after.rs` runs on every input, and what
//! `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/retry_after/`.
//!
//! `parse_retry_after` never panics, for any string and any `now` (before or after the epoch);
//! on the delay-seconds form (optional spaces/tabs around ASCII digits) it agrees with a second,
//! obviously written implementation (u128 arithmetic, saturating at `MAX_RETRY_AFTER`); an
//! HTTP-date it accepts is never more than `MAX_RETRY_AFTER` away.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The reference for delay-seconds: `None` unless the trimmed value is non-empty ASCII digits.
fn delay_seconds_reference(s: &str) -> Option<Duration> {
    let t = s.trim_matches(|c| c == ' ' || c == '\t');
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let cap = tollgate_client::MAX_RETRY_AFTER.as_secs();
    // Leading zeros do not change the value; more than 39 significant digits is over any cap.
    let significant = t.trim_start_matches('0');
    let secs: u128 = if significant.len() > 38 {
        u128::MAX
    } else if significant.is_empty() {
        0
    } else {
        significant.parse().expect("digits")
    };
    Some(Duration::from_secs(secs.min(u128::from(cap)) as u64))
}

/// Runs one input: the first 8 bytes pick `now` (seconds from the epoch, signed, within
/// +-2^40 s), the rest is the header value.
pub fn check(data: &[u8]) {
    let (now_bytes, rest) = data.split_at(data.len().min(8));
    let mut b = [0u8; 8];
    b[..now_bytes.len()].copy_from_slice(now_bytes);
    let offset = i64::from_le_bytes(b) >> 23; // +-2^40 s, either side of the epoch
    let now = if offset >= 0 {
        UNIX_EPOCH + Duration::from_secs(offset as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(offset.unsigned_abs())
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    let got = tollgate_client::parse_retry_after(value, now);
    check_value(value, now, got);
    // The same value at a fixed, ordinary `now` as well.
    let fixed = UNIX_EPOCH + Duration::from_secs(1_780_000_000);
    check_value(
        value,
        fixed,
        tollgate_client::parse_retry_after(value, fixed),
    );
}

fn check_value(value: &str, now: SystemTime, got: Option<Duration>) {
    if let Some(want) = delay_seconds_reference(value) {
        assert_eq!(got, Some(want), "delay-seconds {value:?}");
    }
    if let Some(d) = got {
        assert!(
            d <= tollgate_client::MAX_RETRY_AFTER,
            "{value:?} at {now:?}: {d:?}"
        );
    }
}
