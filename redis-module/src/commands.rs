//! `tollgate.admit` and `tollgate.refund`: arguments in, the keyspace read, [`crate::decision`]
//! run, [`crate::effects`] written, the function's reply out.
//!
//! ```text
//! TOLLGATE.ADMIT  <identity> <constants> <n> <deadline> <reloaded>        (no shared capacity)
//! TOLLGATE.ADMIT  <identity> <capacity> <constants> <n> <deadline> <reloaded> <field>
//! TOLLGATE.REFUND <identity> <burst cost> <sustained cost> <window end> <n>
//! TOLLGATE.REFUND <identity> <capacity> <burst cost> <sustained cost> <window end> <n> <field>
//! ```
//!
//! The keys first, then the function's `ARGV` (`admit.lua`, `refund.lua`); how many keys there
//! are follows from the count of arguments. Unlike the function, every argument is checked
//! before anything is read or written: wrong arity, a number that is not a decimal integer, bad
//! class constants, shared capacity without its key and field, one key given as both, or a
//! tenant's field named as the window's own (`e`, `s`) give an error reply and change nothing.

use core::ffi::{c_int, CStr};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::api::{
    self, api, bytes, Ctx, Key, RString, KEYTYPE_EMPTY, KEYTYPE_HASH, KEYTYPE_STRING, OK,
};
use crate::decision::{self, CapacityWrite, Reply};
use crate::effects;

/// The server's clock, microseconds since the Unix epoch: what `TIME` reads (`gettimeofday`,
/// the realtime clock), read once per decision as the function reads `TIME` once.
fn now_micros() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64) as f64
}

fn error(ctx: *mut Ctx, msg: &CStr) -> c_int {
    // SAFETY: `ctx` is the running command's; Redis copies the message.
    unsafe { (api().reply_with_error)(ctx, msg.as_ptr()) }
}

/// `{ outcome, wait_us, now_us }`, as the function's table reaches the client (integers,
/// truncated as Redis truncates Lua numbers).
fn reply(ctx: *mut Ctx, r: Reply) -> c_int {
    let api = api();
    // SAFETY: `ctx` is the running command's; an array of three integers.
    unsafe {
        (api.reply_with_array)(ctx, 3);
        for v in r {
            (api.reply_with_long_long)(ctx, v as i64);
        }
    }
    OK
}

/// Answers a key-position request (Cluster routing, ACLs): the identity, and the capacity hash
/// when the arguments carry one. `true` if it was one.
fn key_positions(ctx: *mut Ctx, with_capacity: bool) -> bool {
    let api = api();
    // SAFETY: `ctx` is the running command's.
    if unsafe { (api.is_keys_position_request)(ctx) } == 0 {
        return false;
    }
    // SAFETY: asked for its keys, the command names their positions.
    unsafe {
        (api.key_at_pos)(ctx, 1);
        if with_capacity {
            (api.key_at_pos)(ctx, 2);
        }
    }
    true
}

/// The value at an identity key: `Ok(None)` if missing, `Err` if not a string.
fn identity(key: &Key) -> Result<Option<Vec<u8>>, ()> {
    match key.kind() {
        KEYTYPE_EMPTY => Ok(None),
        KEYTYPE_STRING => Ok(key.read_string()),
        _ => Err(()),
    }
}

fn is_hash_or_empty(key: &Key) -> bool {
    matches!(key.kind(), KEYTYPE_EMPTY | KEYTYPE_HASH)
}

/// The command's arguments after its name.
///
/// # Safety
/// `argv` and `argc` must be what Redis passed to the command.
unsafe fn arguments<'a>(argv: *mut *mut RString, argc: c_int) -> &'a [*mut RString] {
    // SAFETY: Redis passes `argc` live strings at `argv` (the name first), alive for the call.
    unsafe { core::slice::from_raw_parts(argv, argc as usize) }
}

/// Why the keys or the tenant's field of a call cannot be used, if they cannot: one key given
/// as both the identity and the capacity hash (Redis would create it twice: the first write
/// makes it a string, the second handle, opened while it was missing, adds it again and
/// aborts the server), or a tenant's field that is one of the window's own (`e`, `s`).
///
/// # Safety
/// `keys` and `field` must be the running command's arguments.
unsafe fn aliased(keys: &[*mut RString], field: Option<*mut RString>) -> Option<&'static CStr> {
    if let [id, capacity] = keys {
        // SAFETY: arguments live for the call (the caller's promise).
        if unsafe { bytes(*id) == bytes(*capacity) } {
            return Some(c"ERR tollgate: the identity's key and the capacity key must differ");
        }
    }
    // SAFETY: as above.
    let field = field.map(|f| unsafe { bytes(f) });
    if matches!(field, Some(b"e" | b"s")) {
        return Some(c"ERR tollgate: the tenant's field cannot be 'e' or 's', the window's own");
    }
    None
}

/// `tollgate.admit`: one decision, as `admit.lua`.
///
/// # Safety
/// Called by Redis only, as a `RedisModuleCmdFunc`.
pub unsafe extern "C" fn admit(ctx: *mut Ctx, argv: *mut *mut RString, argc: c_int) -> c_int {
    if key_positions(ctx, argc == 8) {
        return OK;
    }
    // SAFETY: Redis's own arguments.
    let argv = unsafe { arguments(argv, argc) };
    let with_capacity = match argc {
        6 => false,
        8 => true,
        // SAFETY: `ctx` is the running command's.
        _ => return unsafe { (api().wrong_arity)(ctx) },
    };
    let (keys, args) = argv[1..].split_at(if with_capacity { 2 } else { 1 });
    // SAFETY: arguments live for the call; read before any write.
    let arg = |i: usize| unsafe { bytes(args[i]) };
    let Some(p) = decision::class(arg(0)) else {
        return error(ctx, c"tollgate: bad class constants");
    };
    let Some(n) = decision::int(arg(1)) else {
        return error(ctx, c"ERR tollgate: the cost (n) is not an integer");
    };
    let Some(deadline) = decision::int(arg(2)) else {
        return error(ctx, c"ERR tollgate: the deadline is not an integer");
    };
    let Some(reloaded) = decision::int(arg(3)) else {
        return error(ctx, c"ERR tollgate: the reload instant is not an integer");
    };
    if p.window > 0.0 && !with_capacity {
        return error(
            ctx,
            c"ERR tollgate: shared capacity needs the shard's key and the tenant's field",
        );
    }
    // SAFETY: the command's own arguments.
    if let Some(msg) = unsafe { aliased(keys, args.get(4).copied()) } {
        return error(ctx, msg);
    }
    let now = now_micros();
    // A call queued behind a stalled server whose caller gave up: charge nothing.
    if n > 0.0 && deadline > 0.0 && now > deadline {
        return reply(ctx, [255.0, 0.0, now]);
    }

    // SAFETY: `ctx` is the running command's, the key one of its arguments; dropped before
    // returning.
    let id = unsafe { Key::open(ctx, keys[0]) };
    let Ok(value) = identity(&id) else {
        return error(ctx, api::ERRORMSG_WRONGTYPE);
    };
    let stored = value.as_deref().and_then(decision::unpack);
    let charge = match decision::buckets(&p, now, n, stored, reloaded) {
        Ok(c) => c,
        Err(r) => return reply(ctx, r),
    };

    let mut capacity = None;
    if p.window > 0.0 {
        // SAFETY: as for `id`.
        let key = unsafe { Key::open(ctx, keys[1]) };
        if !is_hash_or_empty(&key) {
            return error(ctx, api::ERRORMSG_WRONGTYPE);
        }
        let field = args[4];
        let read = effects::read_hash(&key, field);
        match decision::capacity(&p, now, n, charge.c, read) {
            Ok(w) => capacity = w.map(|w| (key, field, w)),
            Err(r) => return reply(ctx, r),
        }
    }

    if n > 0.0 {
        let w = decision::bucket_write(&p, now, &charge);
        // Never reached for a string or missing key; if Redis refused, nothing was written
        // and the caller must not count an admission.
        if !effects::set_tats(&id, &w.value, w.expire_at) {
            return error(
                ctx,
                c"ERR tollgate: the identity's key could not be written",
            );
        }
        match capacity {
            Some((key, field, CapacityWrite::Fresh { e, n, expire })) => {
                effects::hash_fresh(&key, field, e, n, expire)
            }
            Some((key, field, CapacityWrite::Counts { s, t })) => {
                effects::hash_counts(&key, field, s, t)
            }
            None => {}
        }
    }
    // Admitted: the burst's debt after this request.
    reply(ctx, [0.0, charge.nb - now, now])
}

/// `tollgate.refund`: gives back one admitted call's charge, as `refund.lua`. Replies 0.
///
/// # Safety
/// Called by Redis only, as a `RedisModuleCmdFunc`.
pub unsafe extern "C" fn refund(ctx: *mut Ctx, argv: *mut *mut RString, argc: c_int) -> c_int {
    if key_positions(ctx, argc == 8) {
        return OK;
    }
    // SAFETY: Redis's own arguments.
    let argv = unsafe { arguments(argv, argc) };
    let with_capacity = match argc {
        6 => false,
        8 => true,
        // SAFETY: `ctx` is the running command's.
        _ => return unsafe { (api().wrong_arity)(ctx) },
    };
    let (keys, args) = argv[1..].split_at(if with_capacity { 2 } else { 1 });
    // SAFETY: arguments live for the call; read before any write.
    let arg = |i: usize| unsafe { bytes(args[i]) };
    let mut nums = [0f64; 4];
    for (i, x) in nums.iter_mut().enumerate() {
        match decision::int(arg(i)) {
            Some(v) => *x = v,
            None => return error(ctx, c"ERR tollgate: refund arguments must be integers"),
        }
    }
    let [burst, sustained, wend, n] = nums;
    if wend > 0.0 && !with_capacity {
        return error(
            ctx,
            c"ERR tollgate: a capacity refund needs the shard's key and the tenant's field",
        );
    }
    // SAFETY: the command's own arguments.
    if let Some(msg) = unsafe { aliased(keys, args.get(4).copied()) } {
        return error(ctx, msg);
    }
    // SAFETY: `ctx` is the running command's, the keys its arguments; dropped before returning.
    let id = unsafe { Key::open(ctx, keys[0]) };
    let Ok(value) = identity(&id) else {
        return error(ctx, api::ERRORMSG_WRONGTYPE);
    };
    let hash = if wend > 0.0 {
        // SAFETY: as for `id`.
        let key = unsafe { Key::open(ctx, keys[1]) };
        if !is_hash_or_empty(&key) {
            return error(ctx, api::ERRORMSG_WRONGTYPE);
        }
        Some(key)
    } else {
        None
    };
    let stored = value.as_deref().and_then(decision::unpack);
    if let Some(v) = decision::refund_buckets(stored, n, burst, sustained) {
        if !effects::set_tats(&id, &v, None) {
            return error(
                ctx,
                c"ERR tollgate: the identity's key could not be written",
            );
        }
    }
    if let Some(key) = hash {
        let field = args[4];
        let read = effects::read_hash(&key, field);
        if let Some((s, t)) = decision::refund_capacity(wend, n, read) {
            effects::hash_counts(&key, field, s, t);
        }
    }
    // SAFETY: `ctx` is the running command's.
    unsafe { (api().reply_with_long_long)(ctx, 0) }
}
