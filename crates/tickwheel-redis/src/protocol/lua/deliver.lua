-- DELIVER: claims tasks for delivery.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, the tenure (`epoch:worker`), visibility ms, ahead ms, cluster (`1`|`0`), force (`1`|`0`), ids...
-- Claims each task that is pending and due within `ahead` ms (its run-at at most now +
-- ahead: the worker holds it and delivers it at its run-at), or in flight past its
-- visibility deadline, or with force in flight whatever its deadline (the worker sends again
-- the claims whose reply it lost: under the same epoch, a task in flight was claimed by
-- it): attempt + 1, into the in-flight set with the deadline max(now, due) + visibility.
-- A forced claim of a task in flight before its visibility deadline is the worker's own
-- claim whose reply was lost: Redis applied it and the task was never handed to a handler,
-- so its attempt stays (an attempt counts handler calls, not claims).
-- Returns {-1, now, now_us, node} when fenced, {-2, now, now_us, node} when the shard is
-- paused (nothing claimed), else {1, now, now_us, node, entry...} with
-- entries {1, id, version, attempt, due, payload, recurrence, deadline, was in flight
-- (1|0)} claimed,
-- {2, id, ms, version} not claimable before now + ahead reaches ms, {0, id} gone. `node`
-- names the node whose clock judged the claims (see `node_id`): the worker delivers what it
-- claimed ahead by its estimate of that node's clock.
local us = clock_us(ARGV[1])
local now = math.floor(us / 1000)
local node = node_id(ARGV[5])
if not holds(KEYS[4], ARGV[2]) then return {-1, now, us, node} end
if redis.call('HGET', KEYS[4], 'paused') == '1' then return {-2, now, us, node} end
local out = {1, now, us, node}
local ahead = tonumber(ARGV[4])
for i = 7, #ARGV do
  local id = ARGV[i]
  local h = redis.call('HGET', KEYS[2], id)
  if not h then
    out[#out + 1] = {0, id}
  else
    local v, a, d, payload, rec, pol = parse(h)
    local s = in_flight(id)
    if s and tonumber(s) > now and ARGV[6] ~= '1' then
      out[#out + 1] = {2, id, tonumber(s) + ahead, v}
    elseif not s and d > now + ahead then
      out[#out + 1] = {2, id, d, v}
    else
      if not s then unpush(d) end
      -- Forced, and in flight before its deadline: the lost claim was applied (see above).
      if not (s and tonumber(s) > now) then a = a + 1 end
      local vis = math.max(now, d) + tonumber(ARGV[3])
      redis.call('ZADD', KEYS[3], vis, id)
      redis.call('HSET', KEYS[2], id, header(v, a, d, rec, pol) .. payload)
      out[#out + 1] = {1, id, v, a, d, payload, rec, vis, s and 1 or 0}
    end
  end
end
return out
