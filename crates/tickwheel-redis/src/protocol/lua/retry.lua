-- RETRY: puts an in-flight delivery back among the pending tasks.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, the tenure (`epoch:worker`), id, version, attempt, delay ms, undo (`1`|`0`). Puts an in-flight
-- delivery back among the pending tasks at now + delay, keeping its attempt count; with
-- undo, a claim that was never delivered (its lease lapsed in the worker) goes back as it
-- was: at its due time, the attempt count one less. {-1} fenced, {0} stale, {1, run_at}.
local now = clock(ARGV[1])
if not holds(KEYS[4], ARGV[2]) then return {-1} end
local id = ARGV[3]
local v, a, d, payload, rec, pol = take_delivery(id, ARGV[4], ARGV[5])
if not v then return {0} end
local run_at = now + tonumber(ARGV[6])
if ARGV[7] == '1' then
  run_at = d
  a = a - 1
else
  rec = anchored(rec, d)
end
redis.call('HSET', KEYS[2], id, header(v, a, run_at, rec, pol) .. payload)
push(bucket(run_at), {id}, 1)
return {1, run_at}
