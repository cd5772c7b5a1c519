//! `parse_retry_after` tables: every rule of RFC 9110 sections 10.2.3 and 5.6.7.
//!
//! Epoch seconds and weekdays below were computed independently (`date -u -d ... +%s%a`), not
//! with the parser's own calendar code.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate_client::{parse_retry_after, MAX_RETRY_AFTER};

/// 1994-11-06T08:49:37Z, the RFC 9110 example date.
const RFC_EXAMPLE: u64 = 784_111_777;
/// 2026-01-01T00:00:00Z (a Thursday).
const Y2026: u64 = 1_767_225_600;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

fn check(now: SystemTime, table: &[(&str, Option<Duration>)]) {
    for (value, want) in table {
        assert_eq!(
            parse_retry_after(value, now),
            *want,
            "Retry-After: {value:?} at {now:?}"
        );
    }
}

#[test]
fn delay_seconds() {
    check(
        at(Y2026),
        &[
            ("120", secs(120)), // RFC 9110 10.2.3 example
            ("0", secs(0)),
            ("1", secs(1)),
            ("007", secs(7)),
            ("0000000000000000000000000000042", secs(42)),
            (" 120", secs(120)),
            ("120 ", secs(120)),
            ("\t 120 \t", secs(120)),
            ("31535999", secs(31_535_999)),
        ],
    );
}

#[test]
fn delay_seconds_saturate() {
    assert_eq!(MAX_RETRY_AFTER, Duration::from_secs(365 * 86_400));
    check(
        at(Y2026),
        &[
            ("31536000", Some(MAX_RETRY_AFTER)),
            ("31536001", Some(MAX_RETRY_AFTER)),
            ("4294967296", Some(MAX_RETRY_AFTER)),
            ("18446744073709551616", Some(MAX_RETRY_AFTER)),
            (
                "99999999999999999999999999999999999999999",
                Some(MAX_RETRY_AFTER),
            ),
        ],
    );
}

#[test]
fn delay_seconds_invalid() {
    check(
        at(Y2026),
        &[
            ("", None),
            (" ", None),
            ("\t", None),
            ("-1", None),
            ("+5", None),
            ("1.5", None),
            ("1,5", None),
            ("1e3", None),
            ("0x10", None),
            ("12abc", None),
            ("1 2", None),
            ("\n5", None),
            ("5\r\n", None),
            ("\u{0661}\u{0662}", None), // Arabic-Indic digits are not DIGIT
            ("５", None),               // fullwidth digit
            ("seconds", None),
        ],
    );
}

#[test]
fn rfc_9110_examples_all_three_forms() {
    // RFC 9110 5.6.7: the same instant in the three forms; `now` 100 s before it.
    let now = at(RFC_EXAMPLE - 100);
    check(
        now,
        &[
            ("Sun, 06 Nov 1994 08:49:37 GMT", secs(100)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", secs(100)),
            ("Sun Nov  6 08:49:37 1994", secs(100)),
            ("Sun Nov 06 08:49:37 1994", secs(100)), // date3 day may be 2DIGIT
        ],
    );
}

#[test]
fn past_and_present_dates_are_zero() {
    let now = at(RFC_EXAMPLE);
    check(
        now,
        &[
            ("Sun, 06 Nov 1994 08:49:37 GMT", Some(Duration::ZERO)),
            ("Sun, 06 Nov 1994 08:49:36 GMT", Some(Duration::ZERO)),
            ("Thu, 01 Jan 1970 00:00:00 GMT", Some(Duration::ZERO)),
            // Before the epoch (1926-06-15 was a Tuesday): still a valid, past date.
            ("Tue, 15 Jun 1926 00:00:00 GMT", Some(Duration::ZERO)),
            ("Sun, 06 Nov 1994 08:49:38 GMT", secs(1)),
        ],
    );
    // Sub-second `now`: the wait is exact, not rounded.
    let now = at(RFC_EXAMPLE) - Duration::from_millis(250);
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
        Some(Duration::from_millis(250))
    );
}

#[test]
fn far_future_dates_saturate() {
    check(
        at(Y2026),
        &[
            ("Fri, 31 Dec 9999 23:59:59 GMT", Some(MAX_RETRY_AFTER)),
            // 2076-01-01 was computed to be a Wednesday.
            ("Wed, 01 Jan 2076 00:00:00 GMT", Some(MAX_RETRY_AFTER)),
        ],
    );
}

#[test]
fn calendar_validation() {
    // now = 2024-02-29T00:00:00Z (1709208000 - 12 h), a Thursday in a leap year.
    let now = at(1_709_208_000 - 12 * 3600);
    check(
        now,
        &[
            ("Thu, 29 Feb 2024 12:00:00 GMT", secs(12 * 3600)),
            // 2000 is a leap year (divisible by 400); 2000-02-29 was a Tuesday: valid, past.
            ("Tue, 29 Feb 2000 00:00:00 GMT", Some(Duration::ZERO)),
            ("Wed, 29 Feb 2023 00:00:00 GMT", None), // 2023 is not a leap year
            // 1900-03-01 was a Thursday (so 1900 had no Feb 29): valid and past.
            ("Thu, 01 Mar 1900 00:00:00 GMT", Some(Duration::ZERO)),
            ("Thu, 29 Feb 1900 00:00:00 GMT", None), // 1900 is not a leap year
            ("Fri, 30 Feb 2024 00:00:00 GMT", None),
            ("Wed, 31 Apr 2024 00:00:00 GMT", None),
            ("Mon, 00 Jan 2024 00:00:00 GMT", None),
            ("Thu, 32 Jan 2024 00:00:00 GMT", None),
            ("Thu, 29 Feb 2024 24:00:00 GMT", None),
            ("Thu, 29 Feb 2024 25:00:00 GMT", None),
            ("Thu, 29 Feb 2024 12:60:00 GMT", None),
            ("Thu, 29 Feb 2024 12:00:61 GMT", None),
            // A leap second is accepted and counts as the next second.
            ("Thu, 29 Feb 2024 23:59:60 GMT", secs(24 * 3600)),
        ],
    );
}

#[test]
fn wrong_weekday_is_rejected() {
    let now = at(RFC_EXAMPLE - 100);
    check(
        now,
        &[
            ("Mon, 06 Nov 1994 08:49:37 GMT", None),
            ("Monday, 06-Nov-94 08:49:37 GMT", None),
            ("Mon Nov  6 08:49:37 1994", None),
        ],
    );
}

#[test]
fn strict_grammar() {
    let now = at(RFC_EXAMPLE - 100);
    check(
        now,
        &[
            // HTTP-date is case-sensitive.
            ("sun, 06 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06 nov 1994 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 08:49:37 gmt", None),
            ("SUNDAY, 06-Nov-94 08:49:37 GMT", None),
            // Zone must be GMT, literally.
            ("Sun, 06 Nov 1994 08:49:37 UTC", None),
            ("Sun, 06 Nov 1994 08:49:37 +0000", None),
            ("Sun, 06 Nov 1994 08:49:37", None),
            // Field widths and separators.
            ("Sun, 6 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06 Nov 94 08:49:37 GMT", None),
            ("Sun, 06 Nov 1994 8:49:37 GMT", None),
            ("Sun,  06 Nov 1994 08:49:37 GMT", None),
            ("Sun 06 Nov 1994 08:49:37 GMT", None),
            ("Sun, 06-Nov-1994 08:49:37 GMT", None),
            ("Sunday, 06-Nov-1994 08:49:37 GMT", None),
            ("Sunday, 06 Nov 94 08:49:37 GMT", None),
            ("Sun Nov 6 08:49:37 1994", None),
            ("Sun Nov  6 08:49:37 94", None),
            ("Sun Nov  6 08:49:37 1994 GMT", None),
            ("Sun, 06 November 1994 08:49:37 GMT", None),
            // Trailing garbage.
            ("Sun, 06 Nov 1994 08:49:37 GMTx", None),
            ("Sun, 06 Nov 1994 08:49:37 GMT, 120", None),
            ("120 Sun, 06 Nov 1994 08:49:37 GMT", None),
            // Surrounding OWS is fine for dates too.
            (" Sun, 06 Nov 1994 08:49:37 GMT\t", secs(100)),
            ("\tSun Nov  6 08:49:37 1994 ", secs(100)),
        ],
    );
}

#[test]
fn rfc850_two_digit_year_relative_to_now() {
    // now = 2026-01-01T00:00:00Z. A two-digit year is read in now's century (20xx) unless that
    // is more than 50 years after now; then it is the previous century (19xx).
    let now = at(Y2026);
    check(
        now,
        &[
            // 2026-01-01 00:01:40 is now + 100 s.
            ("Thursday, 01-Jan-26 00:01:40 GMT", secs(100)),
            // Exactly 50 years ahead is not "more than" 50: 2076-01-01 (a Wednesday), far future.
            ("Wednesday, 01-Jan-76 00:00:00 GMT", Some(MAX_RETRY_AFTER)),
            // One second later is more than 50 years ahead: 1976-01-01 00:00:01 (a Thursday).
            ("Thursday, 01-Jan-76 00:00:01 GMT", Some(Duration::ZERO)),
            // ... so the 2076 weekday no longer matches.
            ("Wednesday, 01-Jan-76 00:00:01 GMT", None),
            // 2075-12-31 is within 50 years: read as 2075 (a Tuesday), far future.
            ("Tuesday, 31-Dec-75 23:59:59 GMT", Some(MAX_RETRY_AFTER)),
            // 77 -> 2077 would be more than 50 years ahead: 1977-01-01 (a Saturday), past.
            ("Saturday, 01-Jan-77 00:00:00 GMT", Some(Duration::ZERO)),
            // 99 -> 1999-12-31 (a Friday), past.
            ("Friday, 31-Dec-99 23:59:59 GMT", Some(Duration::ZERO)),
            // 00 -> 2000-02-29 (a Tuesday), a leap day of the right century, past.
            ("Tuesday, 29-Feb-00 00:00:00 GMT", Some(Duration::ZERO)),
            // 25 -> 2025-12-31 23:59:00 (a Wednesday), one minute ago.
            ("Wednesday, 31-Dec-25 23:59:00 GMT", Some(Duration::ZERO)),
        ],
    );
}

#[test]
fn rfc850_window_moves_with_now() {
    // With now = 2075-12-31T23:59:00Z, "75" is this year, 59 s ahead (not 1975).
    let now = at(3_345_062_399 - 59);
    assert_eq!(
        parse_retry_after("Tuesday, 31-Dec-75 23:59:59 GMT", now),
        secs(59)
    );
    // With now in 1994 (the RFC example), "94" is 1994.
    assert_eq!(
        parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", at(RFC_EXAMPLE - 1)),
        secs(1)
    );
    // The httpdate crate's fixed pivot (< 70 is 20xx) would read "26" as 2026 regardless of
    // now; with now in 1994, RFC 9110 reads "26" as 1926 (2026 is more than 50 years ahead):
    // 1926-06-15 was a Tuesday.
    assert_eq!(
        parse_retry_after("Tuesday, 15-Jun-26 00:00:00 GMT", at(RFC_EXAMPLE)),
        Some(Duration::ZERO)
    );
}
