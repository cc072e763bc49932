-- RELEASE: gives a shard's lease up.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: worker id, epoch. Gives the shard up (the next owner bumps the epoch).
local st = redis.call('HMGET', KEYS[4], 'owner', 'epoch')
if st[1] == ARGV[1] and tonumber(st[2] or '0') == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[4], 'owner', '', 'expires', 0, 'horizon', 0)
  return 1
end
return 0
