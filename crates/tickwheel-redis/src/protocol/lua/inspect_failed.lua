-- INSPECT_FAILED: a page of a shard's failed set, in failed-at order.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: from ms, skip, to ms, limit, preview (most payload bytes returned), error text
-- (empty: any). Reads at most `limit` entries of the failed set from the cursor (failed at
-- `from` or later, the first `skip` of those at `from` passed over) up to failed-at `to`,
-- and returns those whose error log contains the text: {more (1|0), next from, next skip,
-- {id, failed at, reason, error log, version, attempt, due, recurrence, payload length,
-- payload preview}...}.
local from, skip, to, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local text = ARGV[6]
local page = redis.call('ZRANGEBYSCORE', KEYS[6], from, to, 'WITHSCORES', 'LIMIT', skip, limit)
local out = {}
local next_from, next_skip = from, skip
for i = 1, #page, 2 do
  local id, at = page[i], tonumber(page[i + 1])
  if at ~= next_from then next_from, next_skip = at, 0 end
  next_skip = next_skip + 1
  local r = redis.call('HGET', KEYS[7], id)
  if r then
    local reason, log, h = record_read(r)
    if text == '' or string.find(log, text, 1, true) then
      local v, a, d, rec, n, off = meta(h)
      out[#out + 1] = {id, at, reason, log, v, a, d, rec, n,
                       string.sub(h, off, off + tonumber(ARGV[5]) - 1)}
    end
  end
end
local more = 0
if #page / 2 >= limit then more = 1 end
return {more, next_from, next_skip, out}
