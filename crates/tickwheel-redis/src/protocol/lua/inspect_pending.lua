-- INSPECT_PENDING: a page of a shard's pending tasks, in bucket order (1 s buckets; within
-- a bucket in the order they entered it).
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: from (`-inf`, or the bucket to resume at), its generation (empty: from the list's
-- start), offset (entries of that generation already read), to (the last bucket, or
-- `+inf`), lo, hi (run-ats kept: lo <= run-at <= hi, ms), limit (list entries read, >= 1).
-- Resumes as load.lua does, so a bucket emptied and filled again between two pages is read
-- from its start (see `open_list`). Returns {next bucket or -1 (done), its generation,
-- offset, {id, run_at, version, attempt, payload length, recurrence, ...}}.
-- Work: at most `limit` list entries, each one `HGET` and one `ZSCORE`.
local from, from_gen, offset = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lo, hi = tonumber(ARGV[5]), tonumber(ARGV[6])
local limit = tonumber(ARGV[7])
local out, read = {}, 0
local buckets = redis.call('ZRANGEBYSCORE', KEYS[1], from, ARGV[4], 'LIMIT', 0, limit + 1)
for _, bs in ipairs(buckets) do
  local list = KEYS[1] .. ':' .. bs
  local gen = redis.call('LINDEX', list, 0) or ''
  local start = 0
  if from ~= '-inf' and tonumber(bs) == tonumber(from) and gen == from_gen then
    start = offset
  end
  if read >= limit then return {tonumber(bs), gen, start, out} end
  -- Entry k of the generation is list index k + 1 (index 0 is the generation).
  local ids = redis.call('LRANGE', list, start + 1, start + limit - read)
  read = read + #ids
  for _, id in ipairs(ids) do
    local h = redis.call('HGET', KEYS[2], id)
    if h and not in_flight(id) then
      local v, a, d, rec, n = meta(h)
      if bucket(d) == bs and d >= lo and d <= hi then
        out[#out + 1] = {id, d, v, a, n, rec}
      end
    end
  end
  if read >= limit and redis.call('LLEN', list) > start + 1 + #ids then
    return {tonumber(bs), gen, start + #ids, out}
  end
end
if #buckets > limit then return {tonumber(buckets[#buckets]), '', 0, out} end
return {-1, '', 0, out}
