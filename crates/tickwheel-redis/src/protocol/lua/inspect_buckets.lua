-- INSPECT_BUCKETS: the pending counts of a shard's buckets in a range.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: from, to (buckets, inclusive; `-inf`/`+inf` allowed), limit (buckets, >= 1).
-- Returns {next bucket or -1 (done), {bucket, pending, ...}}.
-- Work: at most `limit` index entries and one `HMGET` of as many counts.
local limit = tonumber(ARGV[3])
local b = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, limit)
if #b == 0 then return {-1, {}} end
local fields = {}
for i, bs in ipairs(b) do fields[i] = 'b:' .. bs end
local c = redis.call('HMGET', KEYS[4], unpack(fields))
local out = {}
for i, bs in ipairs(b) do
  out[#out + 1] = tonumber(bs)
  out[#out + 1] = tonumber(c[i] or '0')
end
if #b < limit then return {-1, out} end
return {tonumber(b[#b]) + 1, out}
