-- RELEASE: gives a shard's lease up.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: the tenure (`epoch:worker`). Gives the shard up (the next owner bumps the epoch).
if holds(KEYS[4], ARGV[1]) then
  redis.call('HSET', KEYS[4], 'owner', '', 'expires', 0, 'horizon', 0)
  return 1
end
return 0
