-- PAUSE: pauses or resumes a shard.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: channel, shard, `1` pause | `0` resume. While `paused` is set in the shard's state,
-- DELIVER claims nothing (leases, windows, schedules, cancels and inspection go on). A
-- notification `<shard>:!pause` or `<shard>:!resume` tells the workers at once (a worker
-- puts back what it claimed ahead and has not delivered; on resume it claims what fell due,
-- in run-at order). Returns 1 when the shard's state changed, 0 when it already was so.
local was = redis.call('HGET', KEYS[4], 'paused') == '1'
local want = ARGV[3] == '1'
if want then redis.call('HSET', KEYS[4], 'paused', '1') else redis.call('HDEL', KEYS[4], 'paused') end
if want then
  redis.call('PUBLISH', ARGV[1], ARGV[2] .. ':!pause')
else
  redis.call('PUBLISH', ARGV[1], ARGV[2] .. ':!resume')
end
if was == want then return 0 end
return 1
