-- ACQUIRE: takes or renews a shard's lease.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, worker id, lease ms, epoch held (0 to take the shard).
-- Returns {epoch or 0, now, paused (1|0)}: whether the shard is paused (see pause.lua), so
-- that a worker that missed a pause or resume notice learns it at its next renewal. Taking a shard bumps its epoch (the fencing token) and puts the
-- previous tenure's in-flight tasks back into the due set: their acks are fenced from now on.
-- A worker may take a shard whose live lease it holds itself: it asks with epoch 0 only when
-- it does not know of that lease (the reply to its acquisition was lost), and a new tenure
-- fences whatever the unknown one did.
local now = clock(ARGV[1])
local st = redis.call('HMGET', KEYS[4], 'owner', 'epoch', 'expires', 'paused')
local paused = 0
if st[4] == '1' then paused = 1 end
local owner, epoch, expires = st[1], tonumber(st[2] or '0'), tonumber(st[3] or '0')
local held = tonumber(ARGV[4])
if held > 0 then
  if owner == ARGV[2] and epoch == held then
    redis.call('HSET', KEYS[4], 'expires', now + tonumber(ARGV[3]))
    return {epoch, now, paused}
  end
  return {0, now, paused}
end
if owner and owner ~= '' and owner ~= ARGV[2] and expires > now then return {0, now, paused} end
epoch = redis.call('HINCRBY', KEYS[4], 'epoch', 1)
redis.call('HSET', KEYS[4], 'owner', ARGV[2], 'expires', now + tonumber(ARGV[3]), 'horizon', 0)
local infl = redis.call('ZRANGE', KEYS[3], 0, -1)
if #infl > 0 then redis.call('DEL', KEYS[3]) end
for _, id in ipairs(infl) do
  local h = redis.call('HGET', KEYS[2], id)
  if h then
    local _, _, d = parse(h)
    push(bucket(d), {id}, 1)
  end
end
return {epoch, now, paused}
