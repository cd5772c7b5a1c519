//! Result codes: [`tg_result`], its numbers, and the sentence each one stands for.

use tollgate::KeyError;

/// What a call did. `TG_RESULT_OK` is 0; failures are in the 7000s, grouped by cause (arguments,
/// route classes, profiles, resources, bugs). Values are never renumbered or reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum tg_result {
    /// Success.
    Ok = 0,

    // 7000-7099: the caller's arguments.
    /// A pointer that must not be NULL was NULL (strings too, even with a length of 0).
    NullArgument = 7000,
    /// A length was larger than `PTRDIFF_MAX`.
    LengthOverflow = 7001,
    /// A string was not valid UTF-8.
    InvalidUtf8 = 7002,
    /// The tenant or principal id was empty.
    EmptyKey = 7003,
    /// The tenant or principal id was longer than 1024 bytes.
    KeyTooLong = 7004,
    /// An IP address was neither 4 (IPv4) nor 16 (IPv6) bytes.
    InvalidIpLength = 7005,
    /// The output buffer was too small; nothing was written.
    BufferTooSmall = 7006,
    /// A pinned identity was passed to another limiter than the one it was pinned on.
    ForeignPin = 7007,

    // 7100-7199: route classes.
    /// The route class name or number is not one of this limiter's profile.
    UnknownRouteClass = 7100,

    // 7200-7299: profiles.
    /// The profile did not parse or did not validate.
    InvalidProfile = 7200,
    /// The profile is valid but cannot replace the one in force (it removes a route class, or
    /// changes `identities.capacity` or the anonymous prefixes); the old profile stays in force.
    ReloadRefused = 7201,

    // 7300-7399: resources.
    /// The identity table could not be allocated.
    OutOfMemory = 7300,

    // 7900-7999: bugs.
    /// tollgate panicked (a bug); the panic was caught at the boundary.
    Panic = 7900,
}

/// A buffer of this many bytes holds any message of `tg_error_message`, with its NUL.
pub const TG_ERROR_MESSAGE_CAPACITY: usize = 128;

/// Writes, from one table of `variant => message`, [`tg_result::message`] and the list
/// [`ALL_RESULTS`].
///
/// The enum itself stays written out above, where cbindgen reads it (it does not expand macros).
/// The table cannot drift from it: `message` is a `match` on `self`, so the compiler refuses a
/// table that misses a variant (non-exhaustive match), and `ALL_RESULTS` is made from the same
/// arms; a variant named twice, or out of order, fails the `const` check below.
macro_rules! result_table {
    ($($variant:ident => $message:expr,)+) => {
        /// Every result code, in the order of the enum (checked below).
        pub(crate) const ALL_RESULTS: [tg_result; [$(tg_result::$variant),+].len()] =
            [$(tg_result::$variant),+];

        impl tg_result {
            /// What the code means, in one sentence (shorter than `TG_ERROR_MESSAGE_CAPACITY`).
            pub const fn message(self) -> &'static str {
                match self {
                    $(tg_result::$variant => $message,)+
                }
            }
        }
    };
}

result_table! {
    Ok => "success",
    NullArgument => "a required pointer argument is NULL",
    LengthOverflow => "a length is larger than PTRDIFF_MAX",
    InvalidUtf8 => "a string argument is not valid UTF-8",
    EmptyKey => "the tenant or principal id is empty",
    KeyTooLong => "the tenant or principal id is longer than 1024 bytes",
    InvalidIpLength => "an IP address must be 4 (IPv4) or 16 (IPv6) bytes",
    BufferTooSmall => "the output buffer is too small",
    ForeignPin => "the pinned identity belongs to another limiter",
    UnknownRouteClass => "no such route class in this limiter's profile",
    InvalidProfile => "the profile is invalid",
    ReloadRefused => "the profile cannot replace the one in force (a route class removed, or \
                      the capacity or anonymous prefixes changed)",
    OutOfMemory => "cannot allocate the identity table",
    Panic => "tollgate panicked: this is a bug, please report it",
}

// The table is in increasing order of code (so no two variants share a number) and every
// message fits `tg_error_message`'s buffer with its NUL.
const _: () = {
    let mut i = 0;
    while i < ALL_RESULTS.len() {
        assert!(
            i == 0 || (ALL_RESULTS[i - 1] as u32) < (ALL_RESULTS[i] as u32),
            "result_table! lists each code once, in increasing order"
        );
        assert!(
            ALL_RESULTS[i].message().len() < TG_ERROR_MESSAGE_CAPACITY,
            "a result message does not fit TG_ERROR_MESSAGE_CAPACITY with its NUL"
        );
        i += 1;
    }
};

impl tg_result {
    /// The code for a number, if it is one.
    pub const fn from_u32(code: u32) -> Option<tg_result> {
        let mut i = 0;
        while i < ALL_RESULTS.len() {
            if ALL_RESULTS[i] as u32 == code {
                return Some(ALL_RESULTS[i]);
            }
            i += 1;
        }
        None
    }
}

impl From<tg_result> for u32 {
    fn from(r: tg_result) -> u32 {
        r as u32
    }
}

impl TryFrom<u32> for tg_result {
    /// The number itself, which is no result code.
    type Error = u32;

    fn try_from(code: u32) -> Result<tg_result, u32> {
        tg_result::from_u32(code).ok_or(code)
    }
}

impl From<KeyError> for tg_result {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::EmptyTenant | KeyError::EmptyPrincipal => tg_result::EmptyKey,
            KeyError::TooLong => tg_result::KeyTooLong,
        }
    }
}
