//! The Lua scripts: every change that touches more than one key runs as one script, so it is
//! atomic, and every script touches the keys of one shard only (one hash slot in a Redis
//! Cluster).
//!
//! Shard keys, in the order every shard script takes them:
//! `KEYS[1]` the bucket index (sorted set of bucket numbers, each scored by itself), whose
//! name followed by `:<bucket>` names a bucket list; `KEYS[2]` the task hash (id →
//! `version:attempt:due:recurrence length:recurrence payload`, see `parse`); `KEYS[3]` the
//! in-flight set (sorted set id → visibility deadline ms); `KEYS[4]` the shard state hash
//! (`owner`, `epoch`, `expires`, `horizon`, `seq`, and `b:<bucket>` → pending tasks in that
//! bucket).
//!
//! A task is in flight when the in-flight set holds its id, pending otherwise; a pending
//! task's `due` is its run-at. Pending tasks are indexed by time in buckets of
//! [`BUCKET_MS`]: bucket `b` holds run-ats in `[b * BUCKET_MS, (b + 1) * BUCKET_MS)`, and its
//! list holds its generation (a number unique in the shard, given when the list is created)
//! and then the ids pushed into it, in push order. A list entry whose task has since left
//! the bucket (claimed, cancelled, replaced, rescheduled) stays until the bucket's count of
//! pending tasks reaches zero, when the list, the count and the index entry go together;
//! readers skip such entries by checking the task hash.
//!
//! Time: the first argument of a script that reads the clock is either empty (use the server's
//! `TIME`, the one clock every producer and worker shares) or a number of milliseconds (a
//! manual clock, for tests on virtual time).

use redis::Script;
use std::sync::OnceLock;

/// The width of a time bucket, ms (part of the schema).
pub(crate) const BUCKET_MS: u64 = 1000;

const PRELUDE: &str = r#"
local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function clock_us(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) * 1000 end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The node that runs the script, whose clock `TIME` read: its Cluster node id when `flag` is
-- `1` (a Cluster), else '' (one server).
local function node_id(flag)
  if flag == '1' then return redis.call('CLUSTER', 'MYID') end
  return ''
end
-- A task's value: `version:attempt:due:recurrence length:` then the recurrence (empty for
-- a one-shot task) then the payload. Returns version, attempt, due, payload, recurrence.
local function parse(h)
  local a = string.find(h, ':', 1, true)
  local b = string.find(h, ':', a + 1, true)
  local c = string.find(h, ':', b + 1, true)
  local d = string.find(h, ':', c + 1, true)
  local n = tonumber(string.sub(h, c + 1, d - 1))
  return tonumber(string.sub(h, 1, a - 1)), tonumber(string.sub(h, a + 1, b - 1)),
         tonumber(string.sub(h, b + 1, c - 1)), string.sub(h, d + 1 + n),
         string.sub(h, d + 1, d + n)
end
local function header(v, a, d, rec)
  return string.format('%d:%d:%d:%d:', v, a, d, #rec) .. rec
end
-- A notification names a shard and one or more tasks: `shard:` then, per task,
-- `version:run_at:id length:id`. One PUBLISH per script call, however many tasks it stored.
local function entry(v, run_at, id)
  return string.format('%d:%d:%d:', v, run_at, #id) .. id
end
local function notify(channel, shard, entries)
  if #entries > 0 then
    redis.call('PUBLISH', channel, shard .. ':' .. table.concat(entries))
  end
end
local function epoch_is(state, e)
  return tonumber(redis.call('HGET', state, 'epoch') or '0') == tonumber(e)
end
local function bucket(ms)
  return string.format('%d', math.floor(tonumber(ms) / BUCKET_MS))
end
-- A bucket list that does not exist yet starts with its generation: a number no other list
-- of the shard ever had. Window reads resume at (bucket, generation, offset): a list that
-- was deleted and created again between two reads has another generation, and is read from
-- its start (every entry it holds came after the last read).
local function open_list(list)
  redis.call('RPUSH', list, redis.call('HINCRBY', KEYS[4], 'gen', 1))
end
-- Pending tasks enter a bucket (`n` of them, their ids in `ids`) ...
local function push(b, ids, n)
  local list = KEYS[1] .. ':' .. b
  if redis.call('HINCRBY', KEYS[4], 'b:' .. b, n) == n then
    redis.call('ZADD', KEYS[1], b, b)
    open_list(list)
  end
  redis.call('RPUSH', list, unpack(ids))
end
-- ... and leave it (its list entry stays until the bucket is empty).
local function unpush(run_at)
  local b = bucket(run_at)
  if redis.call('HINCRBY', KEYS[4], 'b:' .. b, -1) <= 0 then
    redis.call('HDEL', KEYS[4], 'b:' .. b)
    redis.call('DEL', KEYS[1] .. ':' .. b)
    redis.call('ZREM', KEYS[1], b)
  end
end
local function in_flight(id)
  return redis.call('ZSCORE', KEYS[3], id)
end
"#;

/// ARGV: now, channel, shard, then per task: id, run-at (`<ms>` an instant, `-<ms>` a delay
/// from now), and the value's tail `<recurrence length>:<recurrence><payload>` (see `parse`;
/// the recurrence is empty for a one-shot task).
/// Returns how many tasks replaced an existing one (an id given twice in one call counts
/// twice, as two calls would; the earlier task takes a version, and is replaced at once).
/// A call costs a handful of variadic commands whatever its size: one `HMGET` of the ids,
/// one `HSET` of all the values, per bucket touched one `RPUSH` of its ids, one `HMGET` and
/// one `HSET` of those buckets' counts, one `ZADD` of those buckets, and one notification
/// naming every task at or before the horizon (see `notify`); replacing a stored task adds
/// a `ZREM`, and one `HINCRBY` per bucket it leaves. Variadic commands go in slices of
/// `CHUNK` elements (Lua's C stack bounds `unpack`).
const SCHEDULE: &str = r#"
local CHUNK = 2000
local function call_chunked(cmd, key, args, step)
  local i = 1
  while i <= #args do
    local j = math.min(#args, i + CHUNK - 1)
    j = j - ((j - i + 1) % step)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end
local n = (#ARGV - 3) / 3
local horizon = tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
local v = redis.call('HINCRBY', KEYS[4], 'seq', n) - n
local now = nil
local replaced = 0
local ids, ms_at, at, last = {}, {}, {}, {}
local dup = false
for k = 1, n do
  local i = 3 * k + 1
  local id, when = ARGV[i], ARGV[i + 1]
  local ms = tonumber(when)
  if string.byte(when, 1) == 45 then -- '-': a delay
    now = now or clock(ARGV[1])
    ms = now - ms
    when = string.format('%d', ms)
  end
  ids[k], ms_at[k], at[k] = id, ms, when
  if last[id] then
    replaced = replaced + 1
    dup = true
  end
  last[id] = k
end
-- The distinct ids, each with its last task; what each replaces among the stored tasks.
local uniq, h, note = ids, {}, {}
if dup then uniq = {} end
local by, order = {}, {}
for k = 1, n do
  local id = ids[k]
  if last[id] == k then
    if dup then uniq[#uniq + 1] = id end
    local ms, run_at = ms_at[k], at[k]
    h[#h + 1] = id
    h[#h + 1] = (v + k) .. ':0:' .. run_at .. ':' .. ARGV[3 * k + 3]
    if ms <= horizon then note[#note + 1] = entry(v + k, run_at, id) end
    local b = math.floor(ms / BUCKET_MS)
    local list = by[b]
    if not list then
      list = {}
      by[b] = list
      order[#order + 1] = b
    end
    list[#list + 1] = id
  end
end
local left = {}
local i = 1
while i <= #uniq do
  local j = math.min(#uniq, i + CHUNK - 1)
  local old = redis.call('HMGET', KEYS[2], unpack(uniq, i, j))
  for m = 1, j - i + 1 do
    if old[m] then
      replaced = replaced + 1
      if redis.call('ZREM', KEYS[3], uniq[i + m - 1]) == 0 then
        local _, _, d = parse(old[m])
        local b = bucket(d)
        left[b] = (left[b] or 0) + 1
      end
    end
  end
  i = j + 1
end
-- Replaced pending tasks leave their buckets before the new ones enter (see `unpush`).
for b, c in pairs(left) do
  if redis.call('HINCRBY', KEYS[4], 'b:' .. b, -c) <= 0 then
    redis.call('HDEL', KEYS[4], 'b:' .. b)
    redis.call('DEL', KEYS[1] .. ':' .. b)
    redis.call('ZREM', KEYS[1], b)
  end
end
call_chunked('HSET', KEYS[2], h, 2)
-- The buckets' counts: read together (an empty bucket's list is opened, see `open_list`),
-- written together.
local index, fields, counts = {}, {}, {}
for o, b in ipairs(order) do
  local bs = string.format('%d', b)
  index[2 * o - 1], index[2 * o] = bs, bs
  fields[o] = 'b:' .. bs
end
i = 1
while i <= #fields do
  local j = math.min(#fields, i + CHUNK - 1)
  local c = redis.call('HMGET', KEYS[4], unpack(fields, i, j))
  for m = 1, j - i + 1 do
    local b = order[i + m - 1]
    local list = KEYS[1] .. ':' .. string.format('%d', b)
    if not c[m] then open_list(list) end
    call_chunked('RPUSH', list, by[b], 1)
    counts[2 * (i + m - 1) - 1] = fields[i + m - 1]
    counts[2 * (i + m - 1)] = string.format('%d', tonumber(c[m] or '0') + #by[b])
  end
  i = j + 1
end
call_chunked('HSET', KEYS[4], counts, 2)
call_chunked('ZADD', KEYS[1], index, 2)
notify(ARGV[2], ARGV[3], note)
return replaced
"#;

/// ARGV: id. 1 when the task was pending and is now gone, or recurring and in flight (the
/// series stops: the run in hand can no longer be acknowledged, nor delivered again), 0
/// otherwise.
const CANCEL: &str = r#"
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return 0 end
local _, _, d, _, rec = parse(h)
if not in_flight(ARGV[1]) then
  redis.call('HDEL', KEYS[2], ARGV[1])
  unpush(d)
  return 1
end
if rec ~= '' and redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
return 0
"#;

/// ARGV: now, channel, shard, id, mode, ms. 1 when the pending task moved, 0 otherwise.
const RESCHEDULE: &str = r#"
local id = ARGV[4]
local h = redis.call('HGET', KEYS[2], id)
if not h or in_flight(id) then return 0 end
local _, a, d, payload, rec = parse(h)
local run_at = tonumber(ARGV[6])
if ARGV[5] == 'd' then run_at = clock(ARGV[1]) + run_at end
local v = redis.call('HINCRBY', KEYS[4], 'seq', 1)
unpush(d)
redis.call('HSET', KEYS[2], id, header(v, a, run_at, rec) .. payload)
push(bucket(run_at), {id}, 1)
if run_at <= tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0') then
  notify(ARGV[2], ARGV[3], {entry(v, run_at, id)})
end
return 1
"#;

/// ARGV: id. {0} unknown, {1, run_at, attempts, version} pending,
/// {2, due, attempt, version, visible_at} in flight.
const STATE: &str = r#"
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return {0} end
local v, a, d = parse(h)
local s = in_flight(ARGV[1])
if s then return {2, d, a, v, tonumber(s)} end
return {1, d, a, v}
"#;

/// ARGV: now, worker id, lease ms, epoch held (0 to take the shard).
/// Returns {epoch or 0, now}. Taking a shard bumps its epoch (the fencing token) and puts the
/// previous tenure's in-flight tasks back into the due set: their acks are fenced from now on.
/// A worker may take a shard whose live lease it holds itself: it asks with epoch 0 only when
/// it does not know of that lease (the reply to its acquisition was lost), and a new tenure
/// fences whatever the unknown one did.
const ACQUIRE: &str = r#"
local now = clock(ARGV[1])
local st = redis.call('HMGET', KEYS[4], 'owner', 'epoch', 'expires')
local owner, epoch, expires = st[1], tonumber(st[2] or '0'), tonumber(st[3] or '0')
local held = tonumber(ARGV[4])
if held > 0 then
  if owner == ARGV[2] and epoch == held then
    redis.call('HSET', KEYS[4], 'expires', now + tonumber(ARGV[3]))
    return {epoch, now}
  end
  return {0, now}
end
if owner and owner ~= '' and owner ~= ARGV[2] and expires > now then return {0, now} end
epoch = redis.call('HINCRBY', KEYS[4], 'epoch', 1)
redis.call('HSET', KEYS[4], 'owner', ARGV[2], 'expires', now + tonumber(ARGV[3]), 'horizon', 0)
local infl = redis.call('ZRANGE', KEYS[3], 0, -1)
if #infl > 0 then redis.call('DEL', KEYS[3]) end
for _, id in ipairs(infl) do
  local h = redis.call('HGET', KEYS[2], id)
  if h then
    local _, _, d = parse(h)
    push(bucket(d), {id}, 1)
  end
end
return {epoch, now}
"#;

/// ARGV: worker id, epoch. Gives the shard up (the next owner bumps the epoch).
const RELEASE: &str = r#"
local st = redis.call('HMGET', KEYS[4], 'owner', 'epoch')
if st[1] == ARGV[1] and tonumber(st[2] or '0') == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[4], 'owner', '', 'expires', 0, 'horizon', 0)
  return 1
end
return 0
"#;

/// ARGV: epoch, from (`-inf`, or the first bucket not read to its end), its generation (see
/// `open_list`; empty when none of its entries were read), offset (entries of that
/// generation already read), to ms, limit, with in-flight (`1`|`0`).
/// Reads the pending tasks of the buckets up to the one holding `to` (so a window ends at a
/// bucket's end, up to a bucket past `to`), in bucket order, `limit` list entries at most,
/// and sets the shard's horizon to the end of the last bucket read to its end: schedules at
/// or before the horizon are published from then on, and any later one lands in a bucket
/// not read yet, or at the tail of the one being read, past the offset, or in a new
/// generation of it, read from its start. So no task falls between the read and the
/// notifications, whatever happens to a bucket between two reads.
/// Returns {-1} when fenced, else {horizon, next bucket, next generation, next offset,
/// more (1|0), {id, run_at, version, ...}, {id, visible_at, version, ...}}.
const LOAD: &str = r#"
if not epoch_is(KEYS[4], ARGV[1]) then return {-1} end
local from, from_gen, offset = ARGV[2], ARGV[3], tonumber(ARGV[4])
local last = math.floor(tonumber(ARGV[5]) / BUCKET_MS)
local limit = tonumber(ARGV[6])
local next_b, next_gen, next_off, more = last + 1, '', 0, 0
local out, read = {}, 0
local buckets = {}
if last >= 0 and (from == '-inf' or tonumber(from) <= last) then
  buckets = redis.call('ZRANGEBYSCORE', KEYS[1], from, last)
end
for _, bs in ipairs(buckets) do
  local b = tonumber(bs)
  local list = KEYS[1] .. ':' .. bs
  local gen = redis.call('LINDEX', list, 0) or ''
  local start = 0
  if from ~= '-inf' and b == tonumber(from) and gen == from_gen then start = offset end
  if read >= limit then
    next_b, next_gen, next_off, more = b, gen, start, 1
    break
  end
  -- Entry k of the generation is list index k + 1 (index 0 is the generation).
  local ids = redis.call('LRANGE', list, start + 1, start + limit - read)
  read = read + #ids
  for _, id in ipairs(ids) do
    local h = redis.call('HGET', KEYS[2], id)
    if h and not in_flight(id) then
      local v, _, d = parse(h)
      if bucket(d) == bs then
        out[#out + 1] = id
        out[#out + 1] = d
        out[#out + 1] = v
      end
    end
  end
  if read >= limit and redis.call('LLEN', list) > start + 1 + #ids then
    next_b, next_gen, next_off, more = b, gen, start + #ids, 1
    break
  end
end
local horizon = next_b * BUCKET_MS - 1
redis.call('HSET', KEYS[4], 'horizon', horizon)
local infl = {}
if ARGV[7] == '1' then
  local r = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 1, #r, 2 do
    local h = redis.call('HGET', KEYS[2], r[i])
    if h then
      infl[#infl + 1] = r[i]
      infl[#infl + 1] = r[i + 1]
      infl[#infl + 1] = (parse(h))
    end
  end
end
return {horizon, next_b, next_gen, next_off, more, out, infl}
"#;

/// ARGV: now, epoch, visibility ms, ahead ms, cluster (`1`|`0`), force (`1`|`0`), ids...
/// Claims each task that is pending and due within `ahead` ms (its run-at at most now +
/// ahead: the worker holds it and delivers it at its run-at), or in flight past its
/// visibility deadline, or with force in flight whatever its deadline (the worker sends again
/// the claims whose reply it lost: under the same epoch, a task in flight was claimed by
/// it): attempt + 1, into the in-flight set with the deadline max(now, due) + visibility.
/// Returns {-1, now, now_us, node} when fenced, else {1, now, now_us, node, entry...} with
/// entries {1, id, version, attempt, due, payload, recurrence, deadline} claimed,
/// {2, id, ms, version} not claimable before now + ahead reaches ms, {0, id} gone. `node`
/// names the node whose clock judged the claims (see `node_id`): the worker delivers what it
/// claimed ahead by its estimate of that node's clock.
const DELIVER: &str = r#"
local us = clock_us(ARGV[1])
local now = math.floor(us / 1000)
local node = node_id(ARGV[5])
if not epoch_is(KEYS[4], ARGV[2]) then return {-1, now, us, node} end
local out = {1, now, us, node}
local ahead = tonumber(ARGV[4])
for i = 7, #ARGV do
  local id = ARGV[i]
  local h = redis.call('HGET', KEYS[2], id)
  if not h then
    out[#out + 1] = {0, id}
  else
    local v, a, d, payload, rec = parse(h)
    local s = in_flight(id)
    if s and tonumber(s) > now and ARGV[6] ~= '1' then
      out[#out + 1] = {2, id, tonumber(s) + ahead, v}
    elseif not s and d > now + ahead then
      out[#out + 1] = {2, id, d, v}
    else
      if not s then unpush(d) end
      a = a + 1
      local vis = math.max(now, d) + tonumber(ARGV[3])
      redis.call('ZADD', KEYS[3], vis, id)
      redis.call('HSET', KEYS[2], id, header(v, a, d, rec) .. payload)
      out[#out + 1] = {1, id, v, a, d, payload, rec, vis}
    end
  end
end
return out
"#;

/// ARGV: epoch, channel, shard, then (id, version, attempt, next run ms or 0) per delivery.
/// Acknowledges each delivery that is still the current one (same epoch, version and
/// attempt): a one-shot task, or a recurring one with next 0 (its series ended), is removed;
/// a recurring task with a next run is re-armed in the same step, at that run with a new
/// version and attempt 0 (published when at or before the horizon). A crash can therefore
/// fall only before the acknowledgement (the run is delivered again) or after the re-arm.
/// Returns {-1} when fenced, else {1, acked...} with 1 where the delivery was acknowledged.
const ACK: &str = r#"
if not epoch_is(KEYS[4], ARGV[1]) then return {-1} end
local out = {1}
local note = {}
local horizon = nil
for i = 4, #ARGV, 4 do
  local id = ARGV[i]
  local ok = 0
  local h = redis.call('HGET', KEYS[2], id)
  if h then
    local v, a, _, payload, rec = parse(h)
    if v == tonumber(ARGV[i + 1]) and a == tonumber(ARGV[i + 2])
        and redis.call('ZREM', KEYS[3], id) == 1 then
      local nxt = tonumber(ARGV[i + 3])
      if rec ~= '' and nxt > 0 then
        local nv = redis.call('HINCRBY', KEYS[4], 'seq', 1)
        redis.call('HSET', KEYS[2], id, header(nv, 0, nxt, rec) .. payload)
        push(bucket(nxt), {id}, 1)
        horizon = horizon or tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
        if nxt <= horizon then note[#note + 1] = entry(nv, nxt, id) end
      else
        redis.call('HDEL', KEYS[2], id)
      end
      ok = 1
    end
  end
  out[#out + 1] = ok
end
notify(ARGV[2], ARGV[3], note)
return out
"#;

/// ARGV: now, epoch, id, version, attempt, delay ms, undo (`1`|`0`). Puts an in-flight
/// delivery back among the pending tasks at now + delay, keeping its attempt count; with
/// undo, a claim that was never delivered (its lease lapsed in the worker) goes back as it
/// was: at its due time, the attempt count one less. {-1} fenced, {0} stale, {1, run_at}.
const RETRY: &str = r#"
local now = clock(ARGV[1])
if not epoch_is(KEYS[4], ARGV[2]) then return {-1} end
local id = ARGV[3]
local h = redis.call('HGET', KEYS[2], id)
if not h then return {0} end
local v, a, d, payload, rec = parse(h)
if v ~= tonumber(ARGV[4]) or a ~= tonumber(ARGV[5]) or redis.call('ZREM', KEYS[3], id) == 0 then
  return {0}
end
local run_at = now + tonumber(ARGV[6])
if ARGV[7] == '1' then
  run_at = d
  a = a - 1
end
redis.call('HSET', KEYS[2], id, header(v, a, run_at, rec) .. payload)
push(bucket(run_at), {id}, 1)
return {1, run_at}
"#;

/// KEYS: the namespace's worker set. ARGV: now, worker id, ttl ms (0 to leave), cluster
/// (`1`|`0`). Returns {live workers, now, now_us, node} (see `node_id`).
const HEARTBEAT: &str = r#"
local us = clock_us(ARGV[1])
local now = math.floor(us / 1000)
local node = node_id(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[3]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[2])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
end
return {redis.call('ZCARD', KEYS[1]), now, us, node}
"#;

/// No keys: sent by `EVAL` to each primary of a Cluster in turn, for the workers' clock
/// estimates. Returns {seconds, microseconds, node id}: a reading of the node's clock and the
/// node it belongs to, in one atomic step.
pub(crate) const PROBE: &str = r#"
local t = redis.call('TIME')
return {t[1], t[2], redis.call('CLUSTER', 'MYID')}
"#;

/// KEYS: the namespace's meta hash. ARGV: schema version, shard count. Creates the namespace
/// when absent; returns {schema, shards} as stored ({false, false} for a foreign key).
const INIT: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'schema', ARGV[1], 'shards', ARGV[2])
end
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return {false, false} end
return redis.call('HMGET', KEYS[1], 'schema', 'shards')
"#;

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
