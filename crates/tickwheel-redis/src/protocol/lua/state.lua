-- STATE: where a task is.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id. {0} unknown, {1, run_at, attempts, version} pending,
-- {2, due, attempt, version, visible_at} in flight.
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return {0} end
local v, a, d = parse(h)
local s = in_flight(ARGV[1])
if s then return {2, d, a, v, tonumber(s)} end
return {1, d, a, v}
