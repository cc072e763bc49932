-- INSPECT_TASK: one task, in full but for its payload.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id, preview (most payload bytes returned), failed only (`1`: read the failed set
-- alone, even when a live task has the id).
-- Returns {0} unknown, else {1 pending | 2 in flight | 3 failed, version, attempt, due,
-- visible at (in flight) or failed at (failed) or -1, recurrence, payload length, the
-- payload's first `preview` bytes, error log (see `log_add`; empty when no attempt failed),
-- failure reason (failed) or ''}. A live task answers before a failed one of the same id.
local h = nil
if ARGV[3] ~= '1' then h = redis.call('HGET', KEYS[2], ARGV[1]) end
local state, vis, reason, log = 1, -1, '', nil
if h then
  local s = in_flight(ARGV[1])
  if s then state, vis = 2, tonumber(s) end
  log = redis.call('HGET', KEYS[5], ARGV[1]) or ''
else
  local r = redis.call('HGET', KEYS[7], ARGV[1])
  if not r then return {0} end
  reason, log, h = record_read(r)
  state, vis = 3, tonumber(redis.call('ZSCORE', KEYS[6], ARGV[1]) or '-1')
end
local v, a, d, rec, n, at = meta(h)
return {state, v, a, d, vis, rec, n, string.sub(h, at, at + tonumber(ARGV[2]) - 1), log, reason}
