//! [`Period`]: a duration as profiles write it, an integer and one unit (`"250ms"`, `"1s"`,
//! `"1d"`), and printed back the same way.

use core::fmt;
use core::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::error::{value_error, ProfileError};
use super::scalars::MAX_PERIOD_NANOS;

/// A duration greater than zero, at most 366 days, in whole milliseconds (the smallest unit a
/// profile can write, so that every period prints as it parses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period(Duration);

const UNITS_MS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

impl Period {
    /// The period if it is a whole number of milliseconds from 1ms to 366d, else an
    /// `Invalid` error.
    pub fn new(d: Duration) -> Result<Period, ProfileError> {
        let nanos = d.as_nanos();
        if nanos == 0 {
            Err(ProfileError::invalid(format!(
                "invalid duration {d:?}, expected a duration greater than zero"
            )))
        } else if nanos > u128::from(MAX_PERIOD_NANOS) {
            Err(ProfileError::invalid(format!(
                "invalid duration {d:?}, expected at most 366d"
            )))
        } else if nanos % 1_000_000 != 0 {
            Err(ProfileError::invalid(format!(
                "invalid duration {d:?}, expected a whole number of milliseconds"
            )))
        } else {
            Ok(Period(d))
        }
    }

    /// [`Period::new`] of `ms` milliseconds.
    pub fn from_millis(ms: u64) -> Result<Period, ProfileError> {
        Period::new(Duration::from_millis(ms))
    }

    /// [`Period::new`] of `secs` seconds.
    pub fn from_secs(secs: u64) -> Result<Period, ProfileError> {
        Period::new(Duration::from_secs(secs))
    }

    /// Parses `"250ms"`, `"1s"`, `"5m"`, `"1h"`, `"1d"`: ASCII digits then one unit, nothing
    /// else (no sign, space, fraction or second unit).
    pub fn parse(s: &str) -> Result<Period, ProfileError> {
        let invalid = |why: &str| ProfileError::invalid(format!("invalid duration {s:?}, {why}"));
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = s.split_at(digits);
        let Some(&(_, unit_ms)) = UNITS_MS.iter().find(|(u, _)| *u == unit) else {
            return Err(invalid(
                "expected an integer and one unit of ms, s, m, h, d (\"250ms\", \"1s\", \"1h\")",
            ));
        };
        let n: u64 = num
            .parse()
            .map_err(|_| invalid("expected an integer before the unit"))?;
        let nanos = n
            .checked_mul(unit_ms)
            .and_then(|ms| ms.checked_mul(1_000_000))
            .filter(|&ns| ns <= MAX_PERIOD_NANOS)
            .ok_or_else(|| invalid("expected at most 366d"))?;
        if nanos == 0 {
            return Err(invalid("expected a duration greater than zero"));
        }
        Ok(Period(Duration::from_nanos(nanos)))
    }

    /// The duration.
    #[inline]
    pub fn get(self) -> Duration {
        self.0
    }

    /// The duration in nanoseconds (fits in 60 bits).
    #[inline]
    pub fn as_nanos(self) -> u64 {
        self.0.as_nanos() as u64
    }
}

impl TryFrom<Duration> for Period {
    type Error = ProfileError;
    fn try_from(d: Duration) -> Result<Period, ProfileError> {
        Period::new(d)
    }
}

impl fmt::Display for Period {
    /// The largest unit that divides the duration exactly, so that parsing it gives it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis() as u64;
        let (unit, size) = UNITS_MS
            .into_iter()
            .find(|&(_, size)| ms % size == 0)
            .unwrap_or(("ms", 1));
        write!(f, "{}{unit}", ms / size)
    }
}

impl Serialize for Period {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Period;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"250ms\", \"1s\" or \"1h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Period, E> {
                Period::parse(s).map_err(value_error)
            }
        }
        d.deserialize_str(V)
    }
}
