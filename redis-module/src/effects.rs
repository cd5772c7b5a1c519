//! The writes both commands make, each done on the keyspace and handed to replication and the
//! AOF as the command the function would have run, with absolute times (`SET .. PXAT`,
//! `PEXPIREAT`) so that a replica or a replayed AOF stores the same state whatever its clock:
//! `RedisModule_Replicate` queues them and Redis wraps one command's in `MULTI`/`EXEC`. Each
//! write also signals the key (`WATCH`, client tracking) and notifies the keyspace event the
//! function's command would (`set`, `expire`, `del`, `hset`).

use core::ffi::{c_int, c_longlong, c_void, CStr};
use core::ptr;

use crate::api::{self, api, Key, Owned, RString, NOTIFY_GENERIC, NOTIFY_HASH, NOTIFY_STRING};
use crate::decision::{pack, CapacityRead};

fn notify(key: &Key, kind: c_int, event: &CStr) {
    // SAFETY: the key's context is the running command's, its name one of the command's
    // arguments; Redis copies what it needs.
    unsafe {
        (api().notify_keyspace_event)(key.ctx(), kind, event.as_ptr(), key.name);
    }
}

fn signal(key: &Key) {
    // SAFETY: as in `notify`.
    unsafe { (api().signal_modified_key)(key.ctx(), key.name) };
}

/// Writes an identity's packed TATs and expiry (ms), keeping the key's expiry when `expire_at`
/// is `None` (`SET .. KEEPTTL`), else setting it (`SET .. PXAT`). The key is a string or
/// missing (the caller checked). `false` if Redis refused the write (nothing was written).
#[must_use]
pub fn set_tats(key: &Key, value: &[f64], expire_at: Option<f64>) -> bool {
    let (buf, len) = pack(value);
    let bytes = &buf[..len];
    if !key.write_string(bytes) {
        return false;
    }
    let api = api();
    match expire_at {
        Some(ms) => {
            key.expire_at(ms as i64);
            // SAFETY: the format "sbcl" takes a string (the key's name, a live argument), a
            // buffer and its length (48 or 24 bytes, alive until we return), a C string and a
            // long long, in that order, as passed; Redis copies them into new objects before
            // returning.
            unsafe {
                (api.replicate)(
                    key.ctx(),
                    c"SET".as_ptr(),
                    c"sbcl".as_ptr(),
                    key.name,
                    bytes.as_ptr(),
                    bytes.len(),
                    c"PXAT".as_ptr(),
                    ms as c_longlong,
                );
            }
        }
        None => {
            // SAFETY: as above, format "sbc": the key's name, the buffer and its length, a C
            // string.
            unsafe {
                (api.replicate)(
                    key.ctx(),
                    c"SET".as_ptr(),
                    c"sbc".as_ptr(),
                    key.name,
                    bytes.as_ptr(),
                    bytes.len(),
                    c"KEEPTTL".as_ptr(),
                );
            }
        }
    }
    notify(key, NOTIFY_STRING, c"set");
    if expire_at.is_some() {
        notify(key, NOTIFY_GENERIC, c"expire");
    }
    signal(key);
    true
}

/// `HMGET key e s <field>`, each read as Lua's `tonumber` would.
pub fn read_hash(key: &Key, field: *mut RString) -> CapacityRead {
    let f = api::fields();
    let (mut e, mut s, mut t): (*mut RString, *mut RString, *mut RString) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: the key is open and a hash or empty (the caller checked); each field is a live
    // string followed by where to store its value (a new string we own, or null if missing),
    // and the list ends with a null pointer, as `RedisModule_HashGet` expects.
    unsafe {
        (api().hash_get)(
            key.raw(),
            api::HASH_NONE,
            f.e,
            &raw mut e,
            f.s,
            &raw mut s,
            field,
            &raw mut t,
            ptr::null_mut::<c_void>(),
        );
    }
    // SAFETY: each value is null or a string Redis created for us with the key's context.
    let [e, s, t] = [e, s, t].map(|p| unsafe { Owned::new(key.ctx(), p) });
    [e, s, t].map(|v| crate::decision::stored_number(v.bytes()))
}

/// A new window: `DEL key`, `HSET key e <e> s <n> <field> <n>`, `PEXPIREAT key <expire>`.
pub fn hash_fresh(key: &Key, field: *mut RString, e: f64, n: f64, expire: f64) {
    let api = api();
    let f = api::fields();
    let (e, n, expire) = (e as i64, n as i64, expire as i64);
    if key.kind() != api::KEYTYPE_EMPTY {
        key.delete();
        // SAFETY: format "s": the key's name (a live argument).
        unsafe { (api.replicate)(key.ctx(), c"DEL".as_ptr(), c"s".as_ptr(), key.name) };
        notify(key, NOTIFY_GENERIC, c"del");
    }
    let (ev, nv) = (Owned::from_i64(key.ctx(), e), Owned::from_i64(key.ctx(), n));
    // SAFETY: the key is open for writing and now empty; field/value pairs of live strings,
    // ended by a null pointer. Redis copies them into the hash.
    unsafe {
        (api.hash_set)(
            key.raw(),
            api::HASH_NONE,
            f.e,
            ev.ptr,
            f.s,
            nv.ptr,
            field,
            nv.ptr,
            ptr::null_mut::<c_void>(),
        );
    }
    key.expire_at(expire);
    // SAFETY: format "sclclsl": the key's name, then "e", e, "s", n, the tenant's field (a live
    // argument), n, as passed; Redis copies them.
    unsafe {
        (api.replicate)(
            key.ctx(),
            c"HSET".as_ptr(),
            c"sclclsl".as_ptr(),
            key.name,
            c"e".as_ptr(),
            e as c_longlong,
            c"s".as_ptr(),
            n as c_longlong,
            field,
            n as c_longlong,
        );
        // SAFETY: format "sl": the key's name and the expiry (ms).
        (api.replicate)(
            key.ctx(),
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key.name,
            expire as c_longlong,
        );
    }
    notify(key, NOTIFY_HASH, c"hset");
    notify(key, NOTIFY_GENERIC, c"expire");
    signal(key);
}

/// The same window: `HSET key s <s> <field> <t>`.
pub fn hash_counts(key: &Key, field: *mut RString, s: f64, t: f64) {
    let api = api();
    let f = api::fields();
    let (s, t) = (s as i64, t as i64);
    let (sv, tv) = (Owned::from_i64(key.ctx(), s), Owned::from_i64(key.ctx(), t));
    // SAFETY: the key is open for writing and a hash or empty (checked by the caller);
    // field/value pairs of live strings, ended by a null pointer.
    unsafe {
        (api.hash_set)(
            key.raw(),
            api::HASH_NONE,
            f.s,
            sv.ptr,
            field,
            tv.ptr,
            ptr::null_mut::<c_void>(),
        );
        // SAFETY: format "sclsl": the key's name, "s", s, the tenant's field, t.
        (api.replicate)(
            key.ctx(),
            c"HSET".as_ptr(),
            c"sclsl".as_ptr(),
            key.name,
            c"s".as_ptr(),
            s as c_longlong,
            field,
            t as c_longlong,
        );
    }
    notify(key, NOTIFY_HASH, c"hset");
    signal(key);
}
