-- INSPECT_IN_FLIGHT: a page of a shard's in-flight tasks, by visibility deadline.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: offset (rank in the in-flight set), limit (entries read, >= 1), lo, hi (due times
-- kept: lo <= due <= hi, ms). Returns {next offset or -1 (done), {id, due, version,
-- attempt, payload length, recurrence, visible at, ...}}. A page resumes at a rank: tasks
-- settled or claimed between two pages may shift it by as many entries.
-- Work: at most `limit` entries, each one `HGET`.
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local lo, hi = tonumber(ARGV[3]), tonumber(ARGV[4])
local r = redis.call('ZRANGE', KEYS[3], offset, offset + limit - 1, 'WITHSCORES')
local out = {}
for i = 1, #r, 2 do
  local h = redis.call('HGET', KEYS[2], r[i])
  if h then
    local v, a, d, rec, n = meta(h)
    if d >= lo and d <= hi then
      out[#out + 1] = {r[i], d, v, a, n, rec, tonumber(r[i + 1])}
    end
  end
end
if #r / 2 < limit then return {-1, out} end
return {offset + limit, out}
