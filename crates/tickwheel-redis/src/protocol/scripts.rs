//! The Lua scripts, one file each under `protocol/lua/` (each file's header says its KEYS,
//! ARGV and reply; `prelude.lua` describes the keys of a shard and the functions every script
//! shares), compiled once per process. Their arguments are encoded and their replies decoded
//! in [`crate::protocol`] only.

use redis::Script;
use std::sync::OnceLock;

/// The width of a time bucket, ms (part of the schema).
pub(crate) const BUCKET_MS: u64 = 1000;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const SCHEDULE: &str = include_str!("lua/schedule.lua");
const CANCEL: &str = include_str!("lua/cancel.lua");
const RESCHEDULE: &str = include_str!("lua/reschedule.lua");
const STATE: &str = include_str!("lua/state.lua");
const ACQUIRE: &str = include_str!("lua/acquire.lua");
const RELEASE: &str = include_str!("lua/release.lua");
const LOAD: &str = include_str!("lua/load.lua");
const DELIVER: &str = include_str!("lua/deliver.lua");
const ACK: &str = include_str!("lua/ack.lua");
const RETRY: &str = include_str!("lua/retry.lua");
const HEARTBEAT: &str = include_str!("lua/heartbeat.lua");
const INIT: &str = include_str!("lua/init.lua");

/// No keys, no prelude: sent by `EVAL` to each primary of a Cluster in turn, for the workers'
/// clock estimates (see `probe.lua`).
pub(crate) const PROBE: &str = include_str!("lua/probe.lua");

/// The compiled scripts (each a SHA1 and its source; loaded into Redis on first use).
pub(crate) struct Scripts {
    pub schedule: Script,
    pub cancel: Script,
    pub reschedule: Script,
    pub state: Script,
    pub acquire: Script,
    pub release: Script,
    pub load: Script,
    pub deliver: Script,
    pub ack: Script,
    pub retry: Script,
    pub heartbeat: Script,
    pub init: Script,
}

impl Scripts {
    /// Loads every script into Redis's script cache (after connecting: pipelines send
    /// `EVALSHA` and cannot load a missing script in the middle).
    pub fn load_all(&self, con: &mut dyn redis::ConnectionLike) -> redis::RedisResult<()> {
        for s in [
            &self.schedule,
            &self.cancel,
            &self.reschedule,
            &self.state,
            &self.acquire,
            &self.release,
            &self.load,
            &self.deliver,
            &self.ack,
            &self.retry,
            &self.heartbeat,
            &self.init,
        ] {
            s.prepare_invoke().load(con)?;
        }
        Ok(())
    }
}

/// The process-wide scripts.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let s =
            |body: &str| Script::new(&format!("local BUCKET_MS = {BUCKET_MS}\n{PRELUDE}{body}"));
        Scripts {
            schedule: s(SCHEDULE),
            cancel: s(CANCEL),
            reschedule: s(RESCHEDULE),
            state: s(STATE),
            acquire: s(ACQUIRE),
            release: s(RELEASE),
            load: s(LOAD),
            deliver: s(DELIVER),
            ack: s(ACK),
            retry: s(RETRY),
            heartbeat: s(HEARTBEAT),
            init: s(INIT),
        }
    })
}
