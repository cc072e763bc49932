-- INSPECT_WORKERS: the namespace's live workers.
--
-- KEYS: the namespace's worker set (id -> registration expiry ms, see heartbeat.lua).
-- ARGV: now, limit. Returns {now, live workers, {id, expires, ...}} with the first `limit`
-- live workers by expiry (expired registrations are left for the next heartbeat to remove).
local now = clock(ARGV[1])
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local r = redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0,
                     tonumber(ARGV[2]), 'WITHSCORES')
local out = {}
for i = 1, #r, 2 do
  out[#out + 1] = r[i]
  out[#out + 1] = tonumber(r[i + 1])
end
return {now, live, out}
