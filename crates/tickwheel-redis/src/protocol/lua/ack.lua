-- ACK: acknowledges deliveries (re-arming recurring tasks).
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: the tenure (`epoch:worker`), channel, shard, then (id, version, attempt, next run ms or 0) per delivery.
-- Acknowledges each delivery that is still the current one (same epoch, version and
-- attempt): a one-shot task, or a recurring one with next 0 (its series ended), is removed;
-- a recurring task with a next run is re-armed in the same step, at that run with a new
-- version and attempt 0 (published when at or before the horizon). Either way the task's
-- error log goes: a re-armed run starts with no failures. A crash can therefore
-- fall only before the acknowledgement (the run is delivered again) or after the re-arm.
-- Returns {-1} when fenced, else {1, acked...} with 1 where the delivery was acknowledged.
if not holds(KEYS[4], ARGV[1]) then return {-1} end
local out = {1}
local note = {}
local horizon = nil
for i = 4, #ARGV, 4 do
  local id = ARGV[i]
  local ok = 0
  local v, _, _, payload, rec, pol = take_delivery(id, ARGV[i + 1], ARGV[i + 2])
  if v then
    local nxt = tonumber(ARGV[i + 3])
    if rec ~= '' and nxt > 0 then
      local nv = redis.call('HINCRBY', KEYS[4], 'seq', 1)
      redis.call('HSET', KEYS[2], id, header(nv, 0, nxt, unanchored(rec), pol) .. payload)
      push(bucket(nxt), {id}, 1)
      horizon = horizon or tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
      if nxt <= horizon then note[#note + 1] = entry(nv, nxt, id) end
    else
      redis.call('HDEL', KEYS[2], id)
    end
    redis.call('HDEL', KEYS[5], id)
    ok = 1
  end
  out[#out + 1] = ok
end
notify(ARGV[2], ARGV[3], note)
return out
