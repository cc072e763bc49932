-- FAILED_ACT: retries or discards failed tasks.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, channel, shard, action (`retry`|`discard`), then either `ids` and ids..., or
-- `scan`, from ms, skip, to ms, limit, error text (empty: any).
-- Retry: the task is pending again at now with its payload, recurrence and policy, a new
-- version and attempt 0; its error log goes back to KEYS[5] with its failure count at 0
-- (the entries are kept, so the history stays visible) and it leaves the failed set. A live
-- task with the same id (a later schedule, or the series of a failed recurring run) is
-- never replaced: the failed task stays, answered `exists`. Discard: the record goes.
-- `ids`: returns per id 1 done, 0 not in the failed set, 2 exists.
-- `scan`: examines at most `limit` failed tasks in failed-at order from the cursor (failed
-- at `from` ms or later, the first `skip` of those at `from` passed over: tasks acted on
-- leave the set, so the cursor counts only those kept), up to failed-at `to` ms, acting on
-- those whose error log contains the text. Returns {1 | 0 (done: nothing left in range),
-- next from, next skip, acted, exists, examined}.
local now = clock(ARGV[1])
local horizon = nil
local note = {}
local function act(id)
  local r = redis.call('HGET', KEYS[7], id)
  if not r then return 0 end
  if ARGV[4] == 'retry' then
    if redis.call('HEXISTS', KEYS[2], id) == 1 then return 2 end
    local _, log, value = record_read(r)
    local _, _, d, payload, rec, pol = parse(value)
    local v = redis.call('HINCRBY', KEYS[4], 'seq', 1)
    redis.call('HSET', KEYS[2], id, header(v, 0, now, anchored(rec, d), pol) .. payload)
    local _, first, entries = log_read(log)
    redis.call('HSET', KEYS[5], id, string.format('0:%d:', first) .. table.concat(entries))
    push(bucket(now), {id}, 1)
    horizon = horizon or tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
    if now <= horizon then note[#note + 1] = entry(v, now, id) end
  end
  redis.call('ZREM', KEYS[6], id)
  redis.call('HDEL', KEYS[7], id)
  return 1
end
if ARGV[5] == 'ids' then
  local out = {}
  for i = 6, #ARGV do out[#out + 1] = act(ARGV[i]) end
  notify(ARGV[2], ARGV[3], note)
  return out
end
local from, skip, to, limit, text = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), ARGV[10]
local page = redis.call('ZRANGEBYSCORE', KEYS[6], from, to, 'WITHSCORES', 'LIMIT', skip, limit)
local acted, exists = 0, 0
local next_from, next_skip = from, skip
for i = 1, #page, 2 do
  local id, at = page[i], tonumber(page[i + 1])
  if at ~= next_from then next_from, next_skip = at, 0 end
  local r = redis.call('HGET', KEYS[7], id)
  local kept = true
  if r then
    local _, log = record_read(r)
    if text == '' or string.find(log, text, 1, true) then
      local done = act(id)
      if done == 1 then acted, kept = acted + 1, false end
      if done == 2 then exists = exists + 1 end
    end
  end
  if kept then next_skip = next_skip + 1 end
end
notify(ARGV[2], ARGV[3], note)
local more = 0
if #page / 2 >= limit then more = 1 end
return {more, next_from, next_skip, acted, exists, #page / 2}
