-- RESCHEDULE: moves a pending task.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, channel, shard, id, mode, ms. 1 when the pending task moved, 0 otherwise.
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
