-- PRELUDE: the functions every script may use. The Rust side prepends it, after
-- `local BUCKET_MS = <the bucket width in ms>`, to every script but PROBE (src/protocol/scripts.rs).
--
-- Every change that touches more than one key runs as one script, so it is atomic, and every
-- shard script touches the keys of one shard only (one hash slot in a Redis Cluster).
--
-- Shard keys, in the order every shard script takes them (named in one place, `ShardKeys`
-- in src/protocol/mod.rs):
-- KEYS[1] the bucket index (sorted set of bucket numbers, each scored by itself), whose
-- name followed by `:<bucket>` names a bucket list; KEYS[2] the task hash (id -> the task's
-- value, see `parse`); KEYS[3] the in-flight set (sorted set id -> visibility deadline ms);
-- KEYS[4] the shard state hash (`owner`, `epoch`, `expires`, `horizon`, `seq`, `gen`,
-- `paused` (`1` while the shard is paused: nothing is claimed), `trimmed` (failed tasks
-- removed by the retention bound), and `b:<bucket>` -> pending tasks in that bucket);
-- KEYS[5] the error logs of live tasks (id -> log, see `log_add`), for tasks with failed
-- attempts; KEYS[6] the failed set (sorted set id -> failed at ms); KEYS[7] the failed
-- tasks' records (id -> record, see `fail.lua`); KEYS[8] the remembered ids (sorted set id ->
-- remembered until ms: the ids `Producer::schedule_once` named within its idempotency
-- window, read and written by SCHEDULE's create-only mode only).
--
-- A failed task has left the task hash: to every other script it is unknown, and a new task
-- may take its id. Only the failed-set scripts (FAIL, FAILED_ACT, the inspectors) read it.
--
-- A task is in flight when the in-flight set holds its id, pending otherwise; a pending
-- task's `due` is its run-at. Pending tasks are indexed by time in buckets of BUCKET_MS:
-- bucket `b` holds run-ats in `[b * BUCKET_MS, (b + 1) * BUCKET_MS)`, and its list holds its
-- generation (a number unique in the shard, given when the list is created) and then the
-- ids pushed into it, in push order. A list entry whose task has since left the bucket
-- (claimed, cancelled, replaced, rescheduled) stays until the bucket's count of pending
-- tasks reaches zero, when the list, the count and the index entry go together; readers
-- skip such entries by checking the task hash.
--
-- Time: the first argument of a script that reads the clock is either empty (use the
-- server's `TIME`, the one clock every producer and worker shares) or a number of
-- milliseconds (a manual clock, for tests on virtual time).
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
-- A task's value: `version:attempt:due:recurrence length:policy length:` then the
-- recurrence (empty for a one-shot task), the retry policy (empty: the namespace's, see
-- `policy`) and the payload. `colons` gives the positions of the five colons and the two
-- lengths; `parse` gives version, attempt, due, payload, recurrence, policy.
local function colons(h)
  local a = string.find(h, ':', 1, true)
  local b = string.find(h, ':', a + 1, true)
  local c = string.find(h, ':', b + 1, true)
  local d = string.find(h, ':', c + 1, true)
  local e = string.find(h, ':', d + 1, true)
  return a, b, c, d, e, tonumber(string.sub(h, c + 1, d - 1)), tonumber(string.sub(h, d + 1, e - 1))
end
local function parse(h)
  local a, b, c, d, e, n, m = colons(h)
  return tonumber(string.sub(h, 1, a - 1)), tonumber(string.sub(h, a + 1, b - 1)),
         tonumber(string.sub(h, b + 1, c - 1)), string.sub(h, e + 1 + n + m),
         string.sub(h, e + 1, e + n), string.sub(h, e + 1 + n, e + n + m)
end
local function header(v, a, d, rec, pol)
  return string.format('%d:%d:%d:%d:%d:', v, a, d, #rec, #pol) .. rec .. pol
end
-- An error log (KEYS[5], and inside a failed task's record): `failures:first failure ms:`
-- then the last ERRORS_KEPT failures, oldest first, each `attempt:at ms:length:` and its
-- error text. `log_read` gives failures, first failure ms and the entries (strings);
-- `log_add` a log with one more failure, and the new failure count.
local function log_read(log)
  local a = string.find(log, ':', 1, true)
  local b = string.find(log, ':', a + 1, true)
  local entries, p = {}, b + 1
  while p <= #log do
    local x = string.find(log, ':', p, true)
    local y = string.find(log, ':', x + 1, true)
    local z = string.find(log, ':', y + 1, true)
    local len = tonumber(string.sub(log, y + 1, z - 1))
    entries[#entries + 1] = string.sub(log, p, z + len)
    p = z + len + 1
  end
  return tonumber(string.sub(log, 1, a - 1)), tonumber(string.sub(log, a + 1, b - 1)), entries
end
local function log_add(log, attempt, now, text)
  local failures, first, entries = 0, now, {}
  if log then failures, first, entries = log_read(log) end
  entries[#entries + 1] = string.format('%d:%d:%d:', attempt, now, #text) .. text
  local from = math.max(1, #entries - ERRORS_KEPT + 1)
  return string.format('%d:%d:', failures + 1, first) .. table.concat(entries, '', from),
         failures + 1
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
-- Whether the shard is held under `tenure` (`epoch:worker`, the fencing token): its state
-- names that worker as owner under that epoch. Both, since a failover that loses a write can
-- issue an epoch twice, to two workers.
local function holds(state, tenure)
  local e, w = string.match(tenure, '^(%d+):(.*)$')
  if not e then return false end
  local st = redis.call('HMGET', state, 'owner', 'epoch')
  return st[1] == w and tonumber(st[2] or '0') == tonumber(e)
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
-- Takes the delivery of `id` out of the in-flight set if it is still the current one: the
-- task exists with that version and attempt, and is in flight. The one test ACK, FAIL and
-- RETRY apply before they touch a task, so a late or repeated call on a delivery that has
-- since been re-armed, retried, cancelled or delivered again changes nothing. Returns the
-- task's fields as `parse` gives them (version, attempt, due, payload, recurrence, policy)
-- and then its stored value, or nil when the delivery is stale.
local function take_delivery(id, version, attempt)
  local h = redis.call('HGET', KEYS[2], id)
  if not h then return nil end
  local v, a, d, payload, rec, pol = parse(h)
  if v ~= tonumber(version) or a ~= tonumber(attempt)
      or redis.call('ZREM', KEYS[3], id) == 0 then
    return nil
  end
  return v, a, d, payload, rec, pol, h
end
-- A failed task's record (KEYS[7]): `reason:log length:` then its error log (see
-- `log_add`) and its value as it was when it failed (see `parse`). `record_read` gives the
-- reason, the log and the value.
local function record(reason, log, value)
  return reason .. ':' .. #log .. ':' .. log .. value
end
local function record_read(r)
  local a = string.find(r, ':', 1, true)
  local b = string.find(r, ':', a + 1, true)
  local n = tonumber(string.sub(r, a + 1, b - 1))
  return string.sub(r, 1, a - 1), string.sub(r, b + 1, b + n), string.sub(r, b + n + 1)
end
-- A run retried (after a failure or a snooze) keeps its series' phase: a period's stored
-- form `p<ms>` gains `@<the run's due>` while the run is retried (the worker computes the
-- next run from that instant), and loses it when the series moves on to its next run. A
-- cron pattern needs no anchor: its instants do not depend on the run's.
local function anchored(rec, d)
  if string.byte(rec, 1) == 112 and not string.find(rec, '@', 1, true) then
    return rec .. '@' .. string.format('%d', d)
  end
  return rec
end
local function unanchored(rec)
  local at = string.find(rec, '@', 1, true)
  if at and string.byte(rec, 1) == 112 then return string.sub(rec, 1, at - 1) end
  return rec
end
-- Where a task is: {0} unknown, {1, run_at, attempts, version} pending,
-- {2, due, attempt, version, visible_at} in flight, {3, failed at, attempts, version, reason}
-- failed (only when no live task has the id: a live task answers first).
local function state_of(id)
  local h = redis.call('HGET', KEYS[2], id)
  if not h then
    local f = redis.call('ZSCORE', KEYS[6], id)
    local r = f and redis.call('HGET', KEYS[7], id)
    if not r then return {0} end
    local reason, _, value = record_read(r)
    local v, a = parse(value)
    return {3, tonumber(f), a, v, reason}
  end
  local v, a, d = parse(h)
  local s = in_flight(id)
  if s then return {2, d, a, v, tonumber(s)} end
  return {1, d, a, v}
end
