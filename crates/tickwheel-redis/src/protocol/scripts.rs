//! The Lua scripts: one registry. Each script lives in its own file under `protocol/lua/`
//! (its header says its KEYS, ARGV and reply; `prelude.lua` describes the keys of a shard and
//! the functions every script shares), is named once in the `registry!` below, and is compiled
//! once per process. Their arguments are encoded and their replies decoded in
//! [`crate::protocol`] only.
//!
//! Adding a script: its file, one line in the registry, and its typed call (a struct that
//! implements [`super::Call`]) beside its neighbours.

use redis::Script;
use std::sync::OnceLock;

/// The width of a time bucket, ms (part of the schema).
pub(crate) const BUCKET_MS: u64 = 1000;

/// How many failures a task's error log keeps (the latest; part of the schema). Its count
/// of failures goes on past it.
pub(crate) const ERRORS_KEPT: usize = 10;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const INSPECT_PRELUDE: &str = include_str!("lua/inspect_prelude.lua");

/// No keys, no prelude: sent by `EVAL` to each primary of a Cluster in turn, for the workers'
/// clock estimates (see `probe.lua`).
pub(crate) const PROBE: &str = include_str!("lua/probe.lua");

/// What a script may do.
enum Kind {
    /// Reads and writes: the constants, then `prelude.lua`, then the body.
    Write,
    /// Reads only (the inspectors): compiled as `#!lua flags=no-writes`, so Redis refuses
    /// any write from it, never waits for an fsync on its account and runs it on a replica
    /// too; `inspect_prelude.lua` follows `prelude.lua`.
    Read,
}

/// A script's source: its kind's header, the constants and preludes, then `body`.
fn source(kind: Kind, body: &str) -> String {
    let constants = format!("local BUCKET_MS = {BUCKET_MS}\nlocal ERRORS_KEPT = {ERRORS_KEPT}\n");
    match kind {
        Kind::Write => format!("{constants}{PRELUDE}{body}"),
        Kind::Read => format!("#!lua flags=no-writes\n{constants}{PRELUDE}{INSPECT_PRELUDE}{body}"),
    }
}

/// The registry: `name: Kind "file under lua/"`, one line a script.
macro_rules! registry {
    ($($name:ident: $kind:ident $file:literal,)*) => {
        /// The compiled scripts (each a SHA1 and its source; loaded into Redis on connect).
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
            /// Every script's source, in the registry's order (what `SCRIPT LOAD` sends).
            sources: Vec<String>,
        }

        impl Scripts {
            fn compile() -> Scripts {
                let mut sources = Vec::new();
                Scripts {
                    $($name: {
                        let source = source(Kind::$kind, include_str!(concat!("lua/", $file)));
                        let script = Script::new(&source);
                        sources.push(source);
                        script
                    },)*
                    sources,
                }
            }

            /// A `SCRIPT LOAD` of every script, to fill a node's script cache (after
            /// connecting: pipelines send `EVALSHA` and cannot load a missing script in the
            /// middle). The connection decides which nodes each goes to (`Con::load_scripts`).
            pub(crate) fn load_commands(&self) -> impl Iterator<Item = redis::Cmd> + '_ {
                self.sources.iter().map(|source| {
                    let mut cmd = redis::cmd("SCRIPT");
                    cmd.arg("LOAD").arg(source);
                    cmd
                })
            }

            /// Whether `sha` is the hash of a script that only reads (kind `Read`, and
            /// `state.lua`, which reads only but is compiled as a `Write` for the producer):
            /// no replica need confirm it.
            pub(crate) fn reads_only(&self, sha: &[u8]) -> bool {
                self.state.get_hash().as_bytes() == sha
                    $(|| (matches!(Kind::$kind, Kind::Read) && self.$name.get_hash().as_bytes() == sha))*
            }
        }
    };
}

registry! {
    schedule: Write "schedule.lua",
    cancel: Write "cancel.lua",
    reschedule: Write "reschedule.lua",
    state: Write "state.lua",
    acquire: Write "acquire.lua",
    release: Write "release.lua",
    load: Write "load.lua",
    deliver: Write "deliver.lua",
    ack: Write "ack.lua",
    retry: Write "retry.lua",
    fail: Write "fail.lua",
    failed_act: Write "failed_act.lua",
    pause: Write "pause.lua",
    heartbeat: Write "heartbeat.lua",
    init: Write "init.lua",
    inspect_meta: Read "inspect_meta.lua",
    inspect_shard: Read "inspect_shard.lua",
    inspect_pending: Read "inspect_pending.lua",
    inspect_in_flight: Read "inspect_in_flight.lua",
    inspect_task: Read "inspect_task.lua",
    inspect_failed: Read "inspect_failed.lua",
    inspect_buckets: Read "inspect_buckets.lua",
    inspect_workers: Read "inspect_workers.lua",
}

/// The process-wide scripts.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(Scripts::compile)
}
