//! tollgate's Redis decision as a native Redis module: `tollgate.admit` and `tollgate.refund`
//! make exactly the decision of the Redis function tollgate loads by default
//! (`src/redis/admit.lua`, `refund.lua` in the main crate), on the same keys in the same
//! encodings and with byte-identical replies, at the cost of a native command instead of a Lua
//! call. A fleet may mix nodes with and without the module; `RedisLimiter` uses the module's
//! commands where the server has them (see the guide's Redis chapter, `docs/guide/redis.md`).
//!
//! ```text
//! cargo build --release --manifest-path redis-module/Cargo.toml
//! redis-server --loadmodule redis-module/target/release/libtollgate_redis.so
//! ```
//!
//! Needs Redis 7.0 or later (`RedisModule_SetAbsExpire`, key-position requests). The commands
//! are flagged `write deny-oom` and name their keys on request (`getkeys-api`: one or two keys,
//! by the count of arguments), so Cluster routing and ACL key checks see both keys. Replicas
//! and the AOF receive the writes (`SET .. PXAT`/`KEEPTTL`, `HSET`, `PEXPIREAT`, `DEL`, with
//! absolute times), never the command: a replica does not decide again on its own clock. See
//! [`commands`] for the arguments and [`decision`] for the arithmetic.
//!
//! The commands' names carry the protocol: a future change of keys, arguments or replies takes
//! new names, so a module and a worker of different versions never misread each other.

mod api;
pub mod commands;
pub mod decision;
mod effects;

use core::ffi::c_int;

use api::{Ctx, RString, APIVER_1, ERR, OK};

/// The module's version as `MODULE LIST` shows it.
const VERSION: c_int = 1;

/// Called by Redis on `MODULE LOAD` / `--loadmodule`: fills the API table and registers the
/// commands. Takes no arguments.
///
/// # Safety
/// Called by Redis only, with its load context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut Ctx,
    _argv: *mut *mut RString,
    _argc: c_int,
) -> c_int {
    // SAFETY: `ctx` is the load context (our contract with Redis).
    let api = match unsafe { api::init(ctx) } {
        Ok(api) => api,
        Err(missing) => {
            eprintln!("tollgate: this Redis lacks {missing:?} (Redis 7.0 or later needed)");
            return ERR;
        }
    };
    // SAFETY: plain calls on the load context with NUL-terminated names; the command
    // functions have the `RedisModuleCmdFunc` signature.
    unsafe {
        if (api.is_module_name_busy)(c"tollgate".as_ptr()) != 0 {
            return ERR;
        }
        (api.set_module_attribs)(ctx, c"tollgate".as_ptr(), VERSION, APIVER_1);
        (api.set_module_options)(ctx, api::OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
        let commands: [(&core::ffi::CStr, api::CmdFunc); 2] = [
            (c"tollgate.admit", commands::admit),
            (c"tollgate.refund", commands::refund),
        ];
        for (name, f) in commands {
            let flags = c"write deny-oom getkeys-api";
            if (api.create_command)(ctx, name.as_ptr(), f, flags.as_ptr(), 1, 1, 1) != OK {
                return ERR;
            }
        }
        (api.log)(
            ctx,
            c"notice".as_ptr(),
            c"%s".as_ptr(),
            c"tollgate.admit and tollgate.refund registered".as_ptr(),
        );
    }
    api::fields();
    OK
}
