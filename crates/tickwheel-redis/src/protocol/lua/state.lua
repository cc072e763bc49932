-- STATE: where a task is.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id. {0} unknown, {1, run_at, attempts, version} pending,
-- {2, due, attempt, version, visible_at} in flight, {3, failed at, attempts, version, reason}
-- failed (only when no live task has the id: a live task answers first).
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then
  local f = redis.call('ZSCORE', KEYS[6], ARGV[1])
  local r = f and redis.call('HGET', KEYS[7], ARGV[1])
  if not r then return {0} end
  local reason, _, value = record_read(r)
  local v, a = parse(value)
  return {3, tonumber(f), a, v, reason}
end
local v, a, d = parse(h)
local s = in_flight(ARGV[1])
if s then return {2, d, a, v, tonumber(s)} end
return {1, d, a, v}
