-- CANCEL: removes a task.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id... Returns, per id in order, 1 when the task was pending and is now gone, or
-- recurring and in flight (the series stops: the run in hand can no longer be acknowledged,
-- nor delivered again), 0 otherwise: what as many calls with one id each would return. A
-- cancelled task's error log goes with it; a failed task is not touched (see FAILED_ACT).
local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local r = 0
  local h = redis.call('HGET', KEYS[2], id)
  if h then
    local _, _, d, _, rec = parse(h)
    if not in_flight(id) then
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[5], id)
      unpush(d)
      r = 1
    elseif rec ~= '' and redis.call('ZREM', KEYS[3], id) == 1 then
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[5], id)
      r = 1
    end
  end
  out[i] = r
end
return out
