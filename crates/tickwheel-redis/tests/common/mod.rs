//! Test support: a private redis-server per test (own port, own temp dir, AOF with
//! `appendfsync always`), killed on drop. A missing `redis-server` fails the test loudly.
#![allow(dead_code)]

pub mod proxy;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, ManualTime, TimeSource};

/// Starts a server or fails the test with the reason (and how to install redis-server).
pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot run the Redis tests: {e}"),
    }
}

/// A config on a manual clock starting at 1_000_000 ms.
pub fn manual(server: &RedisServer, ns: &str, shards: u32) -> (Config, ManualTime) {
    let time = ManualTime::new(1_000_000);
    let mut cfg = Config::new(server.url(), ns);
    cfg.shards = shards;
    cfg.time = TimeSource::Manual(time.clone());
    (cfg, time)
}

/// Checks the storage invariants of every shard of `ns` (see the crate's scripts module):
/// each pending task is listed in the bucket of its run-at, each bucket's count is its number
/// of pending tasks, and the bucket index names exactly the buckets with a count. Panics with
/// what is wrong.
pub fn check_layout(url: &str, ns: &str, shards: u32) {
    const CHECK: &str = r#"
local W = tonumber(ARGV[1])
local counts = {}
local tasks = redis.call('HGETALL', KEYS[2])
for i = 1, #tasks, 2 do
  local id, h = tasks[i], tasks[i + 1]
  if not redis.call('ZSCORE', KEYS[3], id) then
    local a = string.find(h, ':', 1, true)
    local b = string.find(h, ':', a + 1, true)
    local c = string.find(h, ':', b + 1, true)
    local d = tonumber(string.sub(h, b + 1, c - 1))
    local bk = string.format('%d', math.floor(d / W))
    counts[bk] = (counts[bk] or 0) + 1
    if not redis.call('LPOS', KEYS[1] .. ':' .. bk, id) then
      return 'pending ' .. id .. ' missing from bucket ' .. bk
    end
  end
end
local st = redis.call('HGETALL', KEYS[4])
local seen = 0
for i = 1, #st, 2 do
  local f = st[i]
  if string.sub(f, 1, 2) == 'b:' then
    local bk = string.sub(f, 3)
    seen = seen + 1
    if tonumber(st[i + 1]) ~= (counts[bk] or 0) then
      return 'bucket ' .. bk .. ' counts ' .. st[i + 1] .. ', holds ' .. (counts[bk] or 0)
    end
    if not redis.call('ZSCORE', KEYS[1], bk) then return 'bucket ' .. bk .. ' not indexed' end
  end
end
local n = 0
for _ in pairs(counts) do n = n + 1 end
if n ~= seen then return 'buckets with pending tasks: ' .. n .. ', counted: ' .. seen end
if redis.call('ZCARD', KEYS[1]) ~= seen then return 'index size ' .. redis.call('ZCARD', KEYS[1]) end
return 'ok'
"#;
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    for s in 0..shards {
        let tag = format!("tw:{{{ns}:{s}}}");
        let r: String = redis::Script::new(CHECK)
            .key(format!("{tag}:due"))
            .key(format!("{tag}:tasks"))
            .key(format!("{tag}:inflight"))
            .key(format!("{tag}:state"))
            .arg(1000)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(r, "ok", "namespace {ns}, shard {s}");
    }
}

/// Polls `f` every 20 ms until it holds or `within` passes; whether it held.
pub fn eventually(within: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    f()
}

/// Counts its wake-ups; unparks the thread that made it.
pub struct Counting {
    pub woken: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

pub fn counting() -> (Arc<Counting>, Waker) {
    let counting = Arc::new(Counting {
        woken: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    (Arc::clone(&counting), Waker::from(counting))
}

/// The least executor: polls `f` on this thread, parked between wake-ups.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let (_, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(answer) = f.as_mut().poll(&mut cx) {
            return answer;
        }
        std::thread::park();
    }
}
