-- INSPECT_TASK: one task, in full but for its payload.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id, preview (most payload bytes returned).
-- Returns {0} unknown, else {1 pending | 2 in flight, version, attempt, due, visible at or
-- -1, recurrence, payload length, the payload's first `preview` bytes}.
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return {0} end
local v, a, d, rec, n, at = meta(h)
local s = in_flight(ARGV[1])
local state, vis = 1, -1
if s then state, vis = 2, tonumber(s) end
return {state, v, a, d, vis, rec, n, string.sub(h, at, at + tonumber(ARGV[2]) - 1)}
