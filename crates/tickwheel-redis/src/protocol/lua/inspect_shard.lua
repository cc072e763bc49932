-- INSPECT_SHARD: one shard at a glance.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, scan (most entries of the first bucket's list read for the next run-at).
-- Returns {now, owner or '', epoch, lease expiry ms, horizon, tasks, in flight, in flight
-- past their visibility deadline, buckets, first bucket or -1, next run-at or -1, exact,
-- failed, paused (1|0), trimmed (failed tasks removed by the retention bound, ever),
-- remembered (ids `schedule_once` remembers: their window ends after now)}:
-- tasks counts pending and in-flight tasks (pending = tasks - in flight); the next run-at
-- is the earliest among the first `scan` entries of the earliest bucket, exact (1) when
-- that was the whole bucket, else (0) only known to lie in that bucket's second.
-- Work: a handful of O(1) and O(log n) reads, and at most `scan` list entries.
local now = clock(ARGV[1])
local scan = tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[4], 'owner', 'epoch', 'expires', 'horizon', 'paused', 'trimmed')
local tasks = redis.call('HLEN', KEYS[2])
local infl = redis.call('ZCARD', KEYS[3])
local expired = redis.call('ZCOUNT', KEYS[3], '-inf', now)
local nb = redis.call('ZCARD', KEYS[1])
local first, next_at, exact = -1, -1, 1
local b = redis.call('ZRANGE', KEYS[1], 0, 0)
if #b > 0 then
  local bs = b[1]
  first = tonumber(bs)
  local list = KEYS[1] .. ':' .. bs
  local ids = redis.call('LRANGE', list, 1, scan)
  for _, id in ipairs(ids) do
    local h = redis.call('HGET', KEYS[2], id)
    if h and not in_flight(id) then
      local _, _, d = meta(h)
      if bucket(d) == bs and (next_at < 0 or d < next_at) then next_at = d end
    end
  end
  if redis.call('LLEN', list) > scan + 1 then exact = 0 end
end
return {now, st[1] or '', tonumber(st[2] or '0'), tonumber(st[3] or '0'),
        tonumber(st[4] or '0'), tasks, infl, expired, nb, first, next_at, exact,
        redis.call('ZCARD', KEYS[6]), st[5] == '1' and 1 or 0, tonumber(st[6] or '0'),
        redis.call('ZCOUNT', KEYS[8], '(' .. now, '+inf')}
