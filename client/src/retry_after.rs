//! `Retry-After` parsing (RFC 9110 section 10.2.3): delay-seconds or an HTTP-date.
//!
//! The date parser is written by hand instead of using the `httpdate` crate because `httpdate`
//! reads the two-digit year of an RFC 850 date with a fixed pivot (`< 70` is 20xx), while RFC 9110
//! section 5.6.7 asks for a rule relative to the recipient's clock: a year that appears to be more
//! than 50 years in the future is the most recent past year with the same last two digits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The largest wait [`parse_retry_after`] returns: 365 days.
///
/// Larger delay-seconds values and dates further ahead saturate to this instead of failing, so a
/// server that says "a very long time" is still understood as "not soon" (a client maximum wait will
/// usually turn that into [`GiveUp::WaitTooLong`](crate::GiveUp::WaitTooLong)).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Parses a `Retry-After` field value into the wait it asks for, measured from `now`.
///
/// Accepted, surrounded by optional SP / HTAB:
/// - delay-seconds: one or more ASCII digits (leading zeros allowed); values above
///   [`MAX_RETRY_AFTER`] saturate to it.
/// - an HTTP-date in the three forms RFC 9110 section 5.6.7 requires recipients to accept:
///   IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`,
///   two-digit year: the century of `now`, or the one before when that would put the date more
///   than 50 years after `now`) and asctime (`Sun Nov  6 08:49:37 1994`). A date at or before
///   `now` is [`Duration::ZERO`]; a date beyond `now + MAX_RETRY_AFTER` saturates.
///
/// The date grammar is case-sensitive and strict, as RFC 9110 writes it: names as spelled in the
/// RFC, exactly one SP between fields (asctime pads a one-digit day with a second SP), `GMT`
/// literally. Second `60` (a leap second) is accepted and counts as the next second. A date whose
/// weekday does not match its day is **rejected**: a corrupted date is better ignored (the caller
/// then falls back to its own backoff) than trusted.
///
/// Everything else is `None`: empty, negative, fractional, trailing garbage, impossible dates
/// (Feb 30, hour 24 or 25, minute 60).
///
/// Written by hand rather than with the `httpdate` crate, whose RFC 850 reading uses a fixed
/// pivot (`00`-`69` are 20xx) instead of RFC 9110's rule relative to the recipient's clock.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tollgate_client::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 60); // 1994-11-06T08:48:37Z
/// let one_minute = Some(Duration::from_secs(60));
/// assert_eq!(parse_retry_after("60", now), one_minute);
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), one_minute);
/// assert_eq!(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), one_minute);
/// assert_eq!(parse_retry_after("Sun Nov  6 08:49:37 1994", now), one_minute);
/// assert_eq!(parse_retry_after("1.5", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t').as_bytes();
    if v.is_empty() {
        return None;
    }
    if v.iter().all(u8::is_ascii_digit) {
        return Some(parse_delay_seconds(v));
    }
    let target = parse_http_date(v, now)?;
    Some(until(target, now))
}

/// [`parse_retry_after`] for a response that also carries a `Date`: an HTTP-date is measured
/// from that `Date` (RFC 9110 section 6.6.1: the server's clock when it answered) rather than
/// from `now`, so that a client whose wall clock is ahead or behind waits exactly what the
/// server asked. Both dates are then on one clock, and the skew cancels out. A `Date` has whole
/// seconds, though: where `now` agrees with it to within that (`now` in
/// `[Date - 1 s, Date + 2 s)`: a second of truncation, up to a second in transit, clocks a little
/// apart), `now` is the finer reference, so that callers refused at different moments of one
/// second still come back at the instant the server named rather than spread over the second
/// after it. Without a `Date`, or with one that is not a valid HTTP-date, `now` is the reference
/// (what [`parse_retry_after`] does); delay-seconds never depend on either.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tollgate_client::parse_retry_after_dated;
///
/// // The client's clock is 30 s slow; the server says "in one second" as a date.
/// let server = UNIX_EPOCH + Duration::from_secs(784_111_776); // 1994-11-06T08:49:36Z
/// let client = server - Duration::from_secs(30);
/// let date = Some("Sun, 06 Nov 1994 08:49:36 GMT");
/// let wait = parse_retry_after_dated("Sun, 06 Nov 1994 08:49:37 GMT", date, client);
/// assert_eq!(wait, Some(Duration::from_secs(1)));
/// ```
pub fn parse_retry_after_dated(
    value: &str,
    date: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    let server_now = date.and_then(|d| {
        let d = d.trim_matches(|c| c == ' ' || c == '\t').as_bytes();
        let secs = parse_http_date(d, now)?;
        if secs >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(secs as u64))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
        }
    });
    let agrees = |d: SystemTime| match now.duration_since(d) {
        Ok(ahead) => ahead < DATE_AGREES,
        Err(behind) => behind.duration() <= DATE_BEHIND,
    };
    let reference = match server_now {
        Some(d) if !agrees(d) => d,
        _ => now,
    };
    parse_retry_after(value, reference)
}

/// How far past a response's `Date` the client's clock may be and still count as agreeing with
/// the server's: the `Date`'s truncation to the second plus a second in transit.
const DATE_AGREES: Duration = Duration::from_secs(2);
/// How far behind it: a second (clocks a few ms apart land on either side of it).
const DATE_BEHIND: Duration = Duration::from_secs(1);

/// Delay-seconds with saturation; `digits` is non-empty and all ASCII digits.
fn parse_delay_seconds(digits: &[u8]) -> Duration {
    let cap = MAX_RETRY_AFTER.as_secs();
    let mut secs: u64 = 0;
    for d in digits {
        secs = secs.saturating_mul(10).saturating_add(u64::from(d - b'0'));
        if secs >= cap {
            return MAX_RETRY_AFTER;
        }
    }
    Duration::from_secs(secs)
}

/// Seconds since the Unix epoch of `t`, signed, with the sub-second part (always non-negative).
fn signed_epoch(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                (-secs, 0)
            } else {
                (-secs - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

/// The wait from `now` until `target` (whole seconds since the epoch), zero when past, saturated.
fn until(target: i64, now: SystemTime) -> Duration {
    let (now_s, now_ns) = signed_epoch(now);
    // target - now = (target - now_s - 1) s + (1e9 - now_ns) ns when now_ns > 0.
    let whole = i128::from(target) - i128::from(now_s);
    let nanos = whole * 1_000_000_000 - i128::from(now_ns);
    if nanos <= 0 {
        return Duration::ZERO;
    }
    if nanos >= i128::from(MAX_RETRY_AFTER.as_secs()) * 1_000_000_000 {
        return MAX_RETRY_AFTER;
    }
    let nanos = nanos as u128; // in (0, MAX_RETRY_AFTER) nanoseconds, fits
    Duration::new(
        (nanos / 1_000_000_000) as u64,
        (nanos % 1_000_000_000) as u32,
    )
}

const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const DAY_NAMES_LONG: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A broken-down UTC timestamp, fields in calendar order so tuple comparison is time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

/// A tiny cursor over the field value; every method fails with `None` on a mismatch.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn lit(&mut self, s: &str) -> Option<()> {
        self.rest = self.rest.strip_prefix(s.as_bytes())?;
        Some(())
    }

    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Option<u32> {
        if self.rest.len() < n || !self.rest[..n].iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = self.rest[..n]
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
        self.rest = &self.rest[n..];
        Some(v)
    }

    /// One of `names`; returns its index.
    fn one_of(&mut self, names: &[&str]) -> Option<usize> {
        let i = names
            .iter()
            .position(|n| self.rest.starts_with(n.as_bytes()))?;
        self.rest = &self.rest[names[i].len()..];
        Some(i)
    }

    /// `HH:MM:SS`, range-checked (second 60 allowed for a leap second).
    fn time_of_day(&mut self) -> Option<(u32, u32, u32)> {
        let h = self.digits(2)?;
        self.lit(":")?;
        let m = self.digits(2)?;
        self.lit(":")?;
        let s = self.digits(2)?;
        (h < 24 && m < 60 && s <= 60).then_some((h, m, s))
    }

    fn end(&self) -> Option<()> {
        self.rest.is_empty().then_some(())
    }
}

/// Parses the three HTTP-date forms; returns whole seconds since the Unix epoch.
fn parse_http_date(v: &[u8], now: SystemTime) -> Option<i64> {
    imf_fixdate(v)
        .or_else(|| rfc850(v, now))
        .or_else(|| asctime(v))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(v: &[u8]) -> Option<i64> {
    let mut c = Cursor { rest: v };
    let wd = c.one_of(&DAY_NAMES)?;
    c.lit(", ")?;
    let day = c.digits(2)?;
    c.lit(" ")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.lit(" ")?;
    let year = i64::from(c.digits(4)?);
    c.lit(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.lit(" GMT")?;
    c.end()?;
    let t = Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
    };
    checked_epoch(t, wd)
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn rfc850(v: &[u8], now: SystemTime) -> Option<i64> {
    let mut c = Cursor { rest: v };
    let wd = c.one_of(&DAY_NAMES_LONG)?;
    c.lit(", ")?;
    let day = c.digits(2)?;
    c.lit("-")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.lit("-")?;
    let yy = i64::from(c.digits(2)?);
    c.lit(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.lit(" GMT")?;
    c.end()?;
    let (now_s, _) = signed_epoch(now);
    let n = civil_from_epoch(now_s);
    let mut t = Civil {
        year: n.year.div_euclid(100) * 100 + yy,
        month,
        day,
        hour,
        minute,
        second,
    };
    // RFC 9110 5.6.7: a timestamp that appears more than 50 years in the future is the most
    // recent past year with the same two digits. Compared field by field (not in seconds) so
    // "50 years" is calendar years and Feb 29 needs no special case.
    let fifty_years_on = Civil {
        year: n.year + 50,
        ..n
    };
    if t > fifty_years_on {
        t.year -= 100;
    }
    checked_epoch(t, wd)
}

/// `Sun Nov  6 08:49:37 1994` (day is `SP DIGIT` or `2DIGIT`).
fn asctime(v: &[u8]) -> Option<i64> {
    let mut c = Cursor { rest: v };
    let wd = c.one_of(&DAY_NAMES)?;
    c.lit(" ")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.lit(" ")?;
    let day = if c.lit(" ").is_some() {
        c.digits(1)?
    } else {
        c.digits(2)?
    };
    c.lit(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.lit(" ")?;
    let year = i64::from(c.digits(4)?);
    c.end()?;
    let t = Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
    };
    checked_epoch(t, wd)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        _ => 28,
    }
}

/// Validates the day of month and the weekday (`wd`: 0 = Monday), then converts to epoch seconds.
fn checked_epoch(t: Civil, wd: usize) -> Option<i64> {
    if t.day == 0 || t.day > days_in_month(t.year, t.month) {
        return None;
    }
    let days = days_from_civil(t.year, t.month, t.day);
    // 1970-01-01 was a Thursday (index 3).
    if (days + 3).rem_euclid(7) as usize != wd {
        return None;
    }
    Some(days * 86_400 + i64::from(t.hour * 3600 + t.minute * 60 + t.second))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The UTC calendar fields of `secs` since the epoch (inverse of [`days_from_civil`]).
fn civil_from_epoch(secs: i64) -> Civil {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: (sod / 3600) as u32,
        minute: (sod / 60 % 60) as u32,
        second: (sod % 60) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for secs in [
            0i64,
            784_111_777,
            -1,
            951_782_400,
            4_102_444_800,
            -62_167_219_200,
        ] {
            let c = civil_from_epoch(secs);
            let back = days_from_civil(c.year, c.month, c.day) * 86_400
                + i64::from(c.hour * 3600 + c.minute * 60 + c.second);
            assert_eq!(back, secs, "{c:?}");
        }
        assert_eq!(
            civil_from_epoch(784_111_777),
            Civil {
                year: 1994,
                month: 11,
                day: 6,
                hour: 8,
                minute: 49,
                second: 37
            }
        );
    }

    #[test]
    fn until_handles_subsecond_and_pre_epoch_now() {
        let now = UNIX_EPOCH + Duration::from_millis(1500);
        assert_eq!(until(2, now), Duration::from_millis(500));
        assert_eq!(until(1, now), Duration::ZERO);
        let before = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(signed_epoch(before), (-1, 500_000_000));
        assert_eq!(until(0, before), Duration::from_millis(500));
    }
}
