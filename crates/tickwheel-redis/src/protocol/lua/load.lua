-- LOAD: reads a step of a shard's window.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: the tenure (`epoch:worker`), from (`-inf`, or the first bucket not read to its end), its generation (see
-- `open_list`; empty when none of its entries were read), offset (entries of that
-- generation already read), to ms, limit, with in-flight (`1`|`0`).
-- Reads the pending tasks of the buckets up to the one holding `to` (so a window ends at a
-- bucket's end, up to a bucket past `to`), in bucket order, `limit` list entries at most,
-- and sets the shard's horizon to the end of the last bucket read to its end: schedules at
-- or before the horizon are published from then on, and any later one lands in a bucket
-- not read yet, or at the tail of the one being read, past the offset, or in a new
-- generation of it, read from its start. So no task falls between the read and the
-- notifications, whatever happens to a bucket between two reads.
-- Returns {-1} when fenced, else {horizon, next bucket, next generation, next offset,
-- more (1|0), {id, run_at, version, ...}, {id, visible_at, version, ...}}.
if not holds(KEYS[4], ARGV[1]) then return {-1} end
local from, from_gen, offset = ARGV[2], ARGV[3], tonumber(ARGV[4])
local last = math.floor(tonumber(ARGV[5]) / BUCKET_MS)
local limit = tonumber(ARGV[6])
local next_b, next_gen, next_off, more = last + 1, '', 0, 0
local out, read = {}, 0
local buckets = {}
if last >= 0 and (from == '-inf' or tonumber(from) <= last) then
  buckets = redis.call('ZRANGEBYSCORE', KEYS[1], from, last)
end
for _, bs in ipairs(buckets) do
  local b = tonumber(bs)
  local list = KEYS[1] .. ':' .. bs
  local gen = redis.call('LINDEX', list, 0) or ''
  local start = 0
  if from ~= '-inf' and b == tonumber(from) and gen == from_gen then start = offset end
  if read >= limit then
    next_b, next_gen, next_off, more = b, gen, start, 1
    break
  end
  -- Entry k of the generation is list index k + 1 (index 0 is the generation).
  local ids = redis.call('LRANGE', list, start + 1, start + limit - read)
  read = read + #ids
  for _, id in ipairs(ids) do
    local h = redis.call('HGET', KEYS[2], id)
    if h and not in_flight(id) then
      local v, _, d = parse(h)
      if bucket(d) == bs then
        out[#out + 1] = id
        out[#out + 1] = d
        out[#out + 1] = v
      end
    end
  end
  if read >= limit and redis.call('LLEN', list) > start + 1 + #ids then
    next_b, next_gen, next_off, more = b, gen, start + #ids, 1
    break
  end
end
local horizon = next_b * BUCKET_MS - 1
redis.call('HSET', KEYS[4], 'horizon', horizon)
local infl = {}
if ARGV[7] == '1' then
  local r = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 1, #r, 2 do
    local h = redis.call('HGET', KEYS[2], r[i])
    if h then
      infl[#infl + 1] = r[i]
      infl[#infl + 1] = r[i + 1]
      infl[#infl + 1] = (parse(h))
    end
  end
end
return {horizon, next_b, next_gen, next_off, more, out, infl}
