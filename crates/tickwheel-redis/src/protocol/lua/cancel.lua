-- CANCEL: removes a task.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id. 1 when the task was pending and is now gone, or recurring and in flight (the
-- series stops: the run in hand can no longer be acknowledged, nor delivered again), 0
-- otherwise.
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
