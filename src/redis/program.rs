//! What runs a decision inside Redis, and how it is called: the `tollgate.admit` command of
//! tollgate's Redis module where the server has it loaded (`redis-module/`, native: about a
//! fifth of the function's server CPU), else the Redis function (`admit.lua`, `refund.lua`,
//! loaded with `FUNCTION LOAD`), else, before Redis 7, the same code as scripts (`EVALSHA`).
//! All three make the same decision on the same keys with the same replies, so a fleet may mix
//! nodes with and without the module.
//!
//! The module is looked for once, at connect (`COMMAND INFO tollgate.admit tollgate.refund`;
//! [`super::RedisBuilder::redis_module`] turns the look-up off). A node that answers "unknown
//! command" (a failover to a node without the module) ran nothing, so that call is made again
//! with the function, which this worker then keeps using until it reconnects from scratch (a
//! restart). Which path is in force is logged at connect and on a switch, and exported as the
//! gauge `tollgate_store_program{program}` (1 for the path in force; feature `metrics`).

use ::redis::{Cmd, FromRedisValue, RedisError, Script, Value};

use super::connection::Connection;
use crate::sync::unmodelled::{AtomicBool, Ordering};

/// The decision code; see its header for the arguments and the number ranges. It defines
/// `admit` and leaves registering or calling it to the two wrappers below.
const BODY: &str = include_str!("admit.lua");

/// Gives back one admitted call's charge (`admit_all`); see its header.
const REFUND: &str = include_str!("refund.lua");

/// The module's commands (see `redis-module/src/commands.rs`): the keys, then the function's
/// arguments.
const MODULE_ADMIT: &str = "tollgate.admit";
const MODULE_REFUND: &str = "tollgate.refund";

/// Which of the two programs a call runs.
#[derive(Clone, Copy)]
pub(super) enum Entry {
    Admit,
    Refund,
}

/// The Lua code, as functions (the class constants are parsed once per server and cached
/// between calls, and no script cache lookup) or, where the server has no functions, scripts
/// by their SHA.
enum Code {
    Functions(Functions),
    Scripts { admit: Script, refund: Script },
}

/// The function library and its two functions.
struct Functions {
    /// `tollgate_<12 hex digits of the SHA-1 of both codes>`: one library per version of the
    /// code, so workers of two versions never replace each other's. Its functions are this name
    /// (a decision) and this name with `_refund`.
    name: String,
    refund: String,
    library: String,
}

impl Functions {
    /// The function library made of `BODY` and `REFUND`.
    fn new() -> Functions {
        let hash = Script::new(&format!("{BODY}{REFUND}"))
            .get_hash()
            .to_owned();
        let name = format!("tollgate_{}", &hash[..12]);
        let refund = format!("{name}_refund");
        let library = format!(
            "#!lua name={name}\n{BODY}\n{REFUND}\nredis.register_function('{name}', admit)\n\
             redis.register_function('{refund}', refund)\n"
        );
        Functions {
            name,
            refund,
            library,
        }
    }
}

impl Code {
    /// The scripts made of `BODY` and `REFUND`, for servers without functions.
    fn scripts() -> Code {
        Code::Scripts {
            admit: Script::new(&format!("{BODY}\nreturn admit(KEYS, ARGV)\n")),
            refund: Script::new(&format!("{REFUND}\nreturn refund(KEYS, ARGV)\n")),
        }
    }
}

/// The program in force: the module while `module` holds, else the Lua code.
pub(super) struct Program {
    /// The module's commands are used (found at connect, and no node has refused them since).
    module: AtomicBool,
    code: Code,
    #[cfg(feature = "metrics")]
    gauges: [metrics::Gauge; 3],
}

/// The labels of `tollgate_store_program`, in the order of [`Program::label`]'s answers.
#[cfg(feature = "metrics")]
const LABELS: [&str; 3] = ["module", "function", "script"];

impl Program {
    /// Finds or loads the program on `conn`: the module's commands if the server has them (and
    /// `use_module`), else the function library (loaded now), else the scripts.
    pub(super) async fn load(
        conn: &mut Connection,
        use_module: bool,
    ) -> Result<Program, RedisError> {
        let module = use_module && has_module(conn).await;
        let functions = Functions::new();
        // With the module, the library is loaded only if a node without it makes the worker
        // fall back to the function.
        let code = if module || load_library(conn, &functions.library).await? {
            Code::Functions(functions)
        } else {
            let code = Code::scripts();
            if let Code::Scripts { admit, refund } = &code {
                admit.prepare_invoke().load_async(conn).await?;
                refund.prepare_invoke().load_async(conn).await?;
            }
            code
        };
        let program = Program {
            module: AtomicBool::new(module),
            code,
            #[cfg(feature = "metrics")]
            gauges: LABELS.map(|l| metrics::gauge!("tollgate_store_program", "program" => l)),
        };
        program.announce(false);
        Ok(program)
    }

    /// `module`, `function` or `script`: what decides now.
    pub(super) fn label(&self) -> &'static str {
        // Relaxed: a flag read on its own; a call that sees the old value and is refused by a
        // node without the module falls back all the same.
        if self.module.load(Ordering::Relaxed) {
            "module"
        } else {
            match self.code {
                Code::Functions(_) => "function",
                Code::Scripts { .. } => "script",
            }
        }
    }

    /// Logs and exports the path in force.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn announce(&self, switched: bool) {
        #[cfg(feature = "metrics")]
        {
            let label = self.label();
            for (g, l) in self.gauges.iter().zip(LABELS) {
                g.set(if l == label { 1.0 } else { 0.0 });
            }
            if switched {
                tracing::warn!(
                    program = label,
                    "tollgate: a Redis node does not have tollgate's module; deciding with the Redis function from now on"
                );
            } else {
                tracing::info!(program = label, "tollgate: Redis decisions via the {label}");
            }
        }
    }

    /// Runs one call: the module's command (falling back to the function on a node without
    /// it), `FCALL` (loading the library again if the node lost it: a restart without
    /// persistence, `FUNCTION FLUSH`) or `EVALSHA` (the client loads the script on `NOSCRIPT`).
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        conn: &Connection,
        entry: Entry,
        keys: &[String],
        args: &[String],
    ) -> Result<T, RedisError> {
        let mut conn = conn.clone();
        // Relaxed: see `label`.
        if self.module.load(Ordering::Relaxed) {
            let name = match entry {
                Entry::Admit => MODULE_ADMIT,
                Entry::Refund => MODULE_REFUND,
            };
            let mut c = ::redis::cmd(name);
            c.arg(keys).arg(args);
            match c.query_async(&mut conn).await {
                // Unknown: nothing ran, so calling the function instead cannot charge twice.
                Err(e) if e.to_string().contains("unknown command") => {
                    // Relaxed: only this flag is published; see `label`.
                    if self.module.swap(false, Ordering::Relaxed) {
                        self.announce(true);
                    }
                }
                r => return r,
            }
        }
        match &self.code {
            Code::Functions(Functions {
                name,
                refund,
                library,
            }) => {
                let name = match entry {
                    Entry::Admit => name,
                    Entry::Refund => refund,
                };
                let fcall = fcall(name, keys, args);
                match fcall.query_async(&mut conn).await {
                    // Not found: nothing ran, so calling again cannot charge twice.
                    Err(e) if e.to_string().contains("Function not found") => {
                        load_library(&mut conn, library).await?;
                        fcall.query_async(&mut conn).await
                    }
                    r => r,
                }
            }
            Code::Scripts { admit, refund } => {
                let script = match entry {
                    Entry::Admit => admit,
                    Entry::Refund => refund,
                };
                let mut inv = script.prepare_invoke();
                for k in keys {
                    inv.key(k);
                }
                for a in args {
                    inv.arg(a);
                }
                inv.invoke_async(&mut conn).await
            }
        }
    }

    /// The words of one decision's command (`tollgate.admit keys.. args..`, `FCALL name
    /// numkeys ..` or `EVALSHA sha numkeys ..`), for benchmarks that replay it.
    #[cfg(feature = "test-util")]
    pub(super) fn words(&self, keys: Vec<String>, args: Vec<String>) -> Vec<String> {
        // Relaxed: see `label`.
        if self.module.load(Ordering::Relaxed) {
            let mut words = vec![MODULE_ADMIT.to_owned()];
            words.extend(keys);
            words.extend(args);
            return words;
        }
        let (verb, target) = match &self.code {
            Code::Functions(f) => ("FCALL", f.name.clone()),
            Code::Scripts { admit, .. } => ("EVALSHA", admit.get_hash().to_owned()),
        };
        let mut words = vec![verb.to_owned(), target, keys.len().to_string()];
        words.extend(keys);
        words.extend(args);
        words
    }
}

/// Whether the server has both of the module's commands (`COMMAND INFO` answers nil for an
/// unknown one). An error (say, `COMMAND` refused by an ACL) counts as no.
async fn has_module(conn: &mut Connection) -> bool {
    let info: Result<Value, RedisError> = ::redis::cmd("COMMAND")
        .arg("INFO")
        .arg(MODULE_ADMIT)
        .arg(MODULE_REFUND)
        .query_async(conn)
        .await;
    match info {
        Ok(Value::Array(entries)) => {
            entries.len() == 2 && entries.iter().all(|e| !matches!(e, Value::Nil))
        }
        _ => false,
    }
}

/// `FUNCTION LOAD` (on a Cluster the client sends it to every primary; replicas get it by
/// replication): Ok if the library is (now) there, `Ok(false)` if the server has no functions
/// (before Redis 7).
async fn load_library(conn: &mut Connection, library: &str) -> Result<bool, RedisError> {
    let loaded: Result<String, RedisError> = ::redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query_async(conn)
        .await;
    match loaded {
        Ok(_) => Ok(true),
        // Some primaries had it already (on a Cluster the others loaded it in the same call).
        Err(e) if e.to_string().contains("already exists") => Ok(true),
        Err(e) if e.to_string().to_ascii_lowercase().contains("unknown") => Ok(false),
        Err(e) => Err(e),
    }
}

fn fcall(name: &str, keys: &[String], args: &[String]) -> Cmd {
    let mut c = ::redis::cmd("FCALL");
    c.arg(name).arg(keys.len()).arg(keys).arg(args);
    c
}
