-- RESCHEDULE: moves a pending task.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, channel, shard, then per task: id, run-at (`<ms>` an instant, `-<ms>` a delay
-- from now). Moves each task that is pending to its new run-at with a new version, keeping
-- its payload, attempt count and error log, in order (an id given twice moves twice). One notification
-- names every moved task at or before the horizon (see `notify`).
-- Returns, per task in order, 1 when the pending task moved, 0 otherwise.
local out, note = {}, {}
local now, horizon = nil, nil
for i = 4, #ARGV, 2 do
  local id, when = ARGV[i], ARGV[i + 1]
  local r = 0
  local h = redis.call('HGET', KEYS[2], id)
  if h and not in_flight(id) then
    local _, a, d, payload, rec, pol = parse(h)
    local run_at = tonumber(when)
    if string.byte(when, 1) == 45 then -- '-': a delay
      now = now or clock(ARGV[1])
      run_at = now - run_at
    end
    local v = redis.call('HINCRBY', KEYS[4], 'seq', 1)
    unpush(d)
    redis.call('HSET', KEYS[2], id, header(v, a, run_at, unanchored(rec), pol) .. payload)
    push(bucket(run_at), {id}, 1)
    horizon = horizon or tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
    if run_at <= horizon then note[#note + 1] = entry(v, run_at, id) end
    r = 1
  end
  out[#out + 1] = r
end
notify(ARGV[2], ARGV[3], note)
return out
