-- HEARTBEAT: registers a live worker and counts the live ones.
--
-- KEYS: the namespace's worker set. ARGV: now, worker id, ttl ms (0 to leave), cluster
-- (`1`|`0`). Returns {live workers, now, now_us, node} (see `node_id`).
local us = clock_us(ARGV[1])
local now = math.floor(us / 1000)
local node = node_id(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[3]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[2])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
end
return {redis.call('ZCARD', KEYS[1]), now, us, node}
