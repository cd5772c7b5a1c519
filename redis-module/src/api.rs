//! The part of the Redis module API this module uses, by hand (no bindgen, no C headers): the
//! opaque types, the constants of `redismodule.h` (Redis 7.0) and the function pointers, looked
//! up once by name through `RedisModule_GetApi`, which Redis places as the first word of the
//! context it passes to `RedisModule_OnLoad` (what the header's static `RedisModule_Init` does).
//!
//! Every function used here exists in Redis 7.0's `redismodule.h` with the signature written
//! below; a server that lacks one refuses to load the module, naming it.

use core::ffi::{c_char, c_int, c_long, c_longlong, c_void, CStr};
use core::{mem, ptr};
use std::sync::OnceLock;

/// `RedisModuleCtx`: a command's (or the load's) context; only Redis reads it.
#[repr(C)]
pub struct Ctx {
    _opaque: [u8; 0],
}

/// `RedisModuleString`: a Redis string object.
#[repr(C)]
pub struct RString {
    _opaque: [u8; 0],
}

/// `RedisModuleKey`: an open key.
#[repr(C)]
pub struct RKey {
    _opaque: [u8; 0],
}

pub const OK: c_int = 0;
pub const ERR: c_int = 1;
pub const APIVER_1: c_int = 1;
pub const READ: c_int = 1 << 0;
pub const WRITE: c_int = 1 << 1;
pub const KEYTYPE_EMPTY: c_int = 0;
pub const KEYTYPE_STRING: c_int = 1;
pub const KEYTYPE_HASH: c_int = 3;
pub const HASH_NONE: c_int = 0;
pub const NOTIFY_GENERIC: c_int = 1 << 2;
pub const NOTIFY_STRING: c_int = 1 << 3;
pub const NOTIFY_HASH: c_int = 1 << 6;
/// Keys opened for writing are not signalled as modified on close: the commands signal only
/// what they write (a refusal writes nothing and must not wake a `WATCH`, as with the function).
pub const OPTION_NO_IMPLICIT_SIGNAL_MODIFIED: c_int = 1 << 1;
pub const ERRORMSG_WRONGTYPE: &CStr =
    c"WRONGTYPE Operation against a key holding the wrong kind of value";

/// `RedisModuleCmdFunc`.
pub type CmdFunc = unsafe extern "C" fn(*mut Ctx, *mut *mut RString, c_int) -> c_int;

/// `RedisModule_GetApi`: fills `*ptr` with the named function, `OK` if Redis has it.
type GetApi = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int;

macro_rules! api {
    ($($field:ident = $name:literal : $ty:ty;)*) => {
        /// The functions, as `redismodule.h` declares them (Redis 7.0).
        pub struct Api {
            $(pub $field: $ty,)*
        }

        impl Api {
            /// Looks every function up; the name of the first one Redis lacks otherwise.
            ///
            /// # Safety
            /// `get` must be Redis's `RedisModule_GetApi`.
            unsafe fn load(get: GetApi) -> Result<Api, &'static CStr> {
                Ok(Api {
                    $($field: {
                        let mut p: *mut c_void = ptr::null_mut();
                        // SAFETY: `get` is Redis's lookup (the caller's promise); it writes
                        // one function pointer through the pointer to `p` it is given.
                        let found = unsafe { get($name.as_ptr(), (&raw mut p).cast()) };
                        if found != OK || p.is_null() {
                            return Err($name);
                        }
                        // SAFETY: Redis stored the address of its function of this name, whose
                        // C signature is the one `$ty` spells (checked against the 7.0
                        // header); data and function pointers have one size on every platform
                        // Redis runs on.
                        unsafe { mem::transmute::<*mut c_void, $ty>(p) }
                    },)*
                })
            }
        }
    };
}

api! {
    set_module_attribs = c"RedisModule_SetModuleAttribs":
        unsafe extern "C" fn(*mut Ctx, *const c_char, c_int, c_int);
    is_module_name_busy = c"RedisModule_IsModuleNameBusy": unsafe extern "C" fn(*const c_char) -> c_int;
    set_module_options = c"RedisModule_SetModuleOptions": unsafe extern "C" fn(*mut Ctx, c_int);
    create_command = c"RedisModule_CreateCommand":
        unsafe extern "C" fn(*mut Ctx, *const c_char, CmdFunc, *const c_char, c_int, c_int, c_int) -> c_int;
    is_keys_position_request = c"RedisModule_IsKeysPositionRequest": unsafe extern "C" fn(*mut Ctx) -> c_int;
    key_at_pos = c"RedisModule_KeyAtPos": unsafe extern "C" fn(*mut Ctx, c_int);
    open_key = c"RedisModule_OpenKey": unsafe extern "C" fn(*mut Ctx, *mut RString, c_int) -> *mut RKey;
    close_key = c"RedisModule_CloseKey": unsafe extern "C" fn(*mut RKey);
    key_type = c"RedisModule_KeyType": unsafe extern "C" fn(*mut RKey) -> c_int;
    delete_key = c"RedisModule_DeleteKey": unsafe extern "C" fn(*mut RKey) -> c_int;
    string_dma = c"RedisModule_StringDMA": unsafe extern "C" fn(*mut RKey, *mut usize, c_int) -> *mut c_char;
    string_truncate = c"RedisModule_StringTruncate": unsafe extern "C" fn(*mut RKey, usize) -> c_int;
    set_abs_expire = c"RedisModule_SetAbsExpire": unsafe extern "C" fn(*mut RKey, c_longlong) -> c_int;
    hash_get = c"RedisModule_HashGet": unsafe extern "C" fn(*mut RKey, c_int, ...) -> c_int;
    hash_set = c"RedisModule_HashSet": unsafe extern "C" fn(*mut RKey, c_int, ...) -> c_int;
    string_ptr_len = c"RedisModule_StringPtrLen": unsafe extern "C" fn(*const RString, *mut usize) -> *const c_char;
    create_string = c"RedisModule_CreateString": unsafe extern "C" fn(*mut Ctx, *const c_char, usize) -> *mut RString;
    create_string_from_long_long = c"RedisModule_CreateStringFromLongLong":
        unsafe extern "C" fn(*mut Ctx, c_longlong) -> *mut RString;
    free_string = c"RedisModule_FreeString": unsafe extern "C" fn(*mut Ctx, *mut RString);
    reply_with_array = c"RedisModule_ReplyWithArray": unsafe extern "C" fn(*mut Ctx, c_long) -> c_int;
    reply_with_long_long = c"RedisModule_ReplyWithLongLong": unsafe extern "C" fn(*mut Ctx, c_longlong) -> c_int;
    reply_with_error = c"RedisModule_ReplyWithError": unsafe extern "C" fn(*mut Ctx, *const c_char) -> c_int;
    wrong_arity = c"RedisModule_WrongArity": unsafe extern "C" fn(*mut Ctx) -> c_int;
    replicate = c"RedisModule_Replicate": unsafe extern "C" fn(*mut Ctx, *const c_char, *const c_char, ...) -> c_int;
    notify_keyspace_event = c"RedisModule_NotifyKeyspaceEvent":
        unsafe extern "C" fn(*mut Ctx, c_int, *const c_char, *mut RString) -> c_int;
    signal_modified_key = c"RedisModule_SignalModifiedKey": unsafe extern "C" fn(*mut Ctx, *mut RString) -> c_int;
    log = c"RedisModule_Log": unsafe extern "C" fn(*mut Ctx, *const c_char, *const c_char, ...);
}

/// The table, filled once by `RedisModule_OnLoad` before any command is registered.
static API: OnceLock<Api> = OnceLock::new();

/// Fills the table from the load context; the name of a function the server lacks otherwise.
///
/// # Safety
/// `ctx` must be the context Redis passed to `RedisModule_OnLoad`.
pub unsafe fn init(ctx: *mut Ctx) -> Result<&'static Api, &'static CStr> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    // SAFETY: Redis's module contexts begin with the address of `RedisModule_GetApi` (the
    // contract `redismodule.h`'s `RedisModule_Init` relies on), and `ctx` is one (the caller's
    // promise).
    let get = unsafe { *ctx.cast::<GetApi>() };
    // SAFETY: `get` is that lookup.
    let api = unsafe { Api::load(get) }?;
    Ok(API.get_or_init(|| api))
}

/// The table. Only called from commands, which exist only once `init` has filled it.
pub fn api() -> &'static Api {
    API.get()
        .expect("tollgate: commands run only after RedisModule_OnLoad")
}

/// The bytes of a Redis string.
///
/// # Safety
/// `s` must be a live `RedisModuleString` (a command's argument, or one this module created),
/// and the bytes are used only while it lives and is not changed.
pub unsafe fn bytes<'a>(s: *const RString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `s` is a live string (the caller's promise); Redis writes its length to `len`
    // and returns its buffer, `len` bytes long.
    unsafe {
        let p = (api().string_ptr_len)(s, &mut len);
        core::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// A key opened for reading and writing, closed on drop.
pub struct Key {
    ctx: *mut Ctx,
    key: *mut RKey,
    pub name: *mut RString,
}

impl Key {
    /// Opens `name` for reading and writing (a missing key reads as empty and is created only
    /// by a write).
    ///
    /// # Safety
    /// `ctx` must be the running command's context and `name` one of its arguments; the key
    /// must be dropped before the command returns.
    pub unsafe fn open(ctx: *mut Ctx, name: *mut RString) -> Key {
        // SAFETY: a command may open its keys through its own context (the caller's promise).
        let key = unsafe { (api().open_key)(ctx, name, READ | WRITE) };
        Key { ctx, key, name }
    }

    pub fn kind(&self) -> c_int {
        // SAFETY: `self.key` is open (until drop).
        unsafe { (api().key_type)(self.key) }
    }

    pub fn raw(&self) -> *mut RKey {
        self.key
    }

    pub fn ctx(&self) -> *mut Ctx {
        self.ctx
    }

    /// The value of a string key (empty for a missing key), copied out.
    pub fn read_string(&self) -> Option<Vec<u8>> {
        let mut len = 0usize;
        // SAFETY: `self.key` is open; for a string (or missing) key Redis returns its buffer,
        // `len` bytes long, valid until the key is written or closed: it is copied at once.
        unsafe {
            let p = (api().string_dma)(self.key, &mut len, READ);
            if p.is_null() {
                return None;
            }
            Some(core::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
        }
    }

    /// Makes the key a string of exactly `value` (creating it if missing), keeping its expiry.
    pub fn write_string(&self, value: &[u8]) -> bool {
        let api = api();
        // SAFETY: `self.key` is open for writing and is a string or missing (the callers check
        // its type first); after the resize Redis returns its writable buffer, `len` bytes,
        // which is exactly `value.len()` long, written at once.
        unsafe {
            if (api.string_truncate)(self.key, value.len()) != OK {
                return false;
            }
            let mut len = 0usize;
            let p = (api.string_dma)(self.key, &mut len, WRITE);
            if p.is_null() || len != value.len() {
                return false;
            }
            ptr::copy_nonoverlapping(value.as_ptr(), p.cast::<u8>(), len);
        }
        true
    }

    /// Sets the key's absolute expiry, unix milliseconds.
    pub fn expire_at(&self, ms: i64) {
        // SAFETY: `self.key` is open for writing and holds a value (just written).
        unsafe { (api().set_abs_expire)(self.key, ms) };
    }

    /// Deletes the key (it stays open, empty).
    pub fn delete(&self) {
        // SAFETY: `self.key` is open for writing.
        unsafe { (api().delete_key)(self.key) };
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: opened by `open` and closed only here, within the command.
        unsafe { (api().close_key)(self.key) };
    }
}

/// A string this module owns, freed on drop.
pub struct Owned {
    ctx: *mut Ctx,
    pub ptr: *mut RString,
}

impl Owned {
    /// Wraps a string Redis returned to us (from `HashGet` or a create call), or null.
    ///
    /// # Safety
    /// `ptr` must be null or a string created with `ctx`, owned by the caller.
    pub unsafe fn new(ctx: *mut Ctx, ptr: *mut RString) -> Owned {
        Owned { ctx, ptr }
    }

    /// A decimal number as a string.
    pub fn from_i64(ctx: *mut Ctx, v: i64) -> Owned {
        // SAFETY: `ctx` is the running command's context (the only one this is called with);
        // the new string is ours to free.
        unsafe { Owned::new(ctx, (api().create_string_from_long_long)(ctx, v)) }
    }

    /// The bytes, if any.
    pub fn bytes(&self) -> Option<&[u8]> {
        // SAFETY: a non-null `ptr` is a live string we own until drop.
        (!self.ptr.is_null()).then(|| unsafe { bytes(self.ptr) })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: we own the string (created with `ctx`) and free it once.
            unsafe { (api().free_string)(self.ctx, self.ptr) };
        }
    }
}

/// Strings created once at load and kept for the server's lifetime: the capacity hash's fields
/// `e` and `s`.
pub struct Fields {
    pub e: *mut RString,
    pub s: *mut RString,
}

// SAFETY: Redis runs module commands on its main thread only; the two strings are created once,
// never changed and never freed, so sharing their addresses is sound.
unsafe impl Send for Fields {}
// SAFETY: as above: read-only after creation, used from one thread.
unsafe impl Sync for Fields {}

static FIELDS: OnceLock<Fields> = OnceLock::new();

/// The capacity hash's field names, created on first use.
pub fn fields() -> &'static Fields {
    FIELDS.get_or_init(|| {
        let api = api();
        // SAFETY: a null context creates a string outside any context (allowed by the API),
        // never freed: it lives as long as the server.
        unsafe {
            Fields {
                e: (api.create_string)(ptr::null_mut(), c"e".as_ptr(), 1),
                s: (api.create_string)(ptr::null_mut(), c"s".as_ptr(), 1),
            }
        }
    })
}
