-- SCHEDULE: stores tasks (one call, one shard): replacing those with the same ids, or, in
-- create-only mode (`Producer::schedule_once`), only those whose id is free.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, channel, shard, window (empty: replace; else create-only, with this
-- idempotency window in ms), then per task: id, run-at (`<ms>` an instant, `-<ms>` a delay
-- from now), and the value's tail `<recurrence length>:<policy length>:<recurrence><policy>
-- <payload>` (see `parse`; the recurrence is empty for a one-shot task, the policy for a task
-- that follows the namespace's).
-- Replace mode returns {first version, now (or -1 when no delay needed the clock),
-- {replaced...}}: task `k` (from 1, in ARGV order) took version `first + k - 1`, its run-at
-- is the instant given or now + its delay, and `replaced` lists (in no particular order) the
-- `k` of every task that replaced an existing one. An id given twice in one call replaces
-- twice, as two calls would: the later task replaces the earlier, which takes a version and
-- is replaced at once, and the first task of an id replaces the stored one.
-- Create-only mode stores a task only when its id is free: no live task (pending or in
-- flight), no failed task (so `state_of` answers {0}), no earlier task of the call, and
-- not remembered (KEYS[8]: id -> remembered until, ms; while that is later than now). Then
-- every id of the call is remembered until now + window (`ZADD GT`: never shortened; not
-- at all for a window of 0), after up to `2 n + 10` entries remembered until now or
-- earlier are removed (so the set holds about the ids named within a window). Returns
-- {first version, now, {}, {answer...}}, an answer per task in ARGV order: {0} stored (the
-- stored tasks take versions `first`, `first + 1`, ... in ARGV order), the id's state as
-- STATE answers it after the call (`state_of`: pending, in flight or failed) when it was
-- taken, {4} when it was remembered.
-- A call costs a handful of variadic commands whatever its size: one `HMGET` of the ids,
-- one `HSET` of all the values, per bucket touched one `RPUSH` of its ids, one `HMGET` and
-- one `HSET` of those buckets' counts, one `ZADD` of those buckets, and one notification
-- naming every task at or before the horizon (see `notify`); replacing a stored task adds
-- a `ZREM`, one `HINCRBY` per bucket it leaves, and one `HDEL` of the replaced tasks' error
-- logs (a new version starts with no failures). Create-only mode adds per task an
-- `HEXISTS` (and `state_of` for a taken id), and per call a `ZMSCORE` of the ids in the
-- failed set and in the remembered ids, one range read and `ZREM` of expired entries and
-- one `ZADD` of the ids. Variadic commands go in
-- slices of `CHUNK` elements (Lua's C stack bounds `unpack`).
local CHUNK = 2000
local function call_chunked(cmd, key, args, step)
  local i = 1
  while i <= #args do
    local j = math.min(#args, i + CHUNK - 1)
    j = j - ((j - i + 1) % step)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end
-- `src[k]`: the ARGV index of the `k`-th task stored.
local src, now, answers = {}, nil, nil
if ARGV[4] == '' then
  for k = 1, (#ARGV - 4) / 3 do src[k] = 3 * k + 2 end
else
  local all = (#ARGV - 4) / 3
  local window = tonumber(ARGV[4])
  now = clock(ARGV[1])
  call_chunked('ZREM', KEYS[8],
    redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now, 'LIMIT', 0, 2 * all + 10), 1)
  answers = {}
  -- The ids' scores in the failed set and the remembered ids, read a chunk at a time.
  local ids, failed, until_ms = {}, {}, {}
  for k = 1, all do ids[k] = ARGV[3 * k + 2] end
  local i = 1
  while i <= all do
    local j = math.min(all, i + CHUNK - 1)
    local f = redis.call('ZMSCORE', KEYS[6], unpack(ids, i, j))
    local r = redis.call('ZMSCORE', KEYS[8], unpack(ids, i, j))
    for m = 1, j - i + 1 do
      failed[i + m - 1] = f[m]
      until_ms[i + m - 1] = tonumber(r[m] or '0')
    end
    i = j + 1
  end
  local stored, remember = {}, {}
  for k = 1, all do
    local id = ids[k]
    if stored[id] or redis.call('HEXISTS', KEYS[2], id) == 1
        or (failed[k] and redis.call('HEXISTS', KEYS[7], id) == 1) then
      answers[k] = false -- its state, once the call has stored what it stores
    elseif until_ms[k] > now then
      answers[k] = {4}
    else
      answers[k] = {0}
      stored[id] = true
      src[#src + 1] = 3 * k + 2
    end
    if window > 0 then
      remember[#remember + 1] = now + window
      remember[#remember + 1] = id
    end
  end
  i = 1
  while i <= #remember do
    local j = math.min(#remember, i + CHUNK - 1)
    redis.call('ZADD', KEYS[8], 'GT', unpack(remember, i, j))
    i = j + 1
  end
  if #src == 0 then
    for k = 1, all do
      if not answers[k] then answers[k] = state_of(ARGV[3 * k + 2]) end
    end
    return {0, now, {}, answers}
  end
end
local n = #src
local horizon = tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
local v = redis.call('HINCRBY', KEYS[4], 'seq', n) - n
local rep = {}
local ids, ms_at, at, last = {}, {}, {}, {}
local dup = false
for k = 1, n do
  local i = src[k]
  local id, when = ARGV[i], ARGV[i + 1]
  local ms = tonumber(when)
  if string.byte(when, 1) == 45 then -- '-': a delay
    now = now or clock(ARGV[1])
    ms = now - ms
    when = string.format('%d', ms)
  end
  ids[k], ms_at[k], at[k] = id, ms, when
  if last[id] then
    rep[#rep + 1] = k
    dup = true
  end
  last[id] = k
end
-- The distinct ids, each with its last task; what each replaces among the stored tasks.
local uniq, h, note = ids, {}, {}
if dup then uniq = {} end
local by, order = {}, {}
for k = 1, n do
  local id = ids[k]
  if last[id] == k then
    if dup then uniq[#uniq + 1] = id end
    local ms, run_at = ms_at[k], at[k]
    h[#h + 1] = id
    h[#h + 1] = (v + k) .. ':0:' .. run_at .. ':' .. ARGV[src[k] + 2]
    if ms <= horizon then note[#note + 1] = entry(v + k, run_at, id) end
    local b = math.floor(ms / BUCKET_MS)
    local list = by[b]
    if not list then
      list = {}
      by[b] = list
      order[#order + 1] = b
    end
    list[#list + 1] = id
  end
end
-- The first task of each id (its index in `ids`, which is `uniq` unless an id repeats).
local first = nil
if dup then
  first = {}
  for k = n, 1, -1 do first[ids[k]] = k end
end
local left, gone = {}, {}
local i = 1
while i <= #uniq do
  local j = math.min(#uniq, i + CHUNK - 1)
  local old = redis.call('HMGET', KEYS[2], unpack(uniq, i, j))
  for m = 1, j - i + 1 do
    if old[m] then
      local k = i + m - 1
      if dup then k = first[uniq[k]] end
      rep[#rep + 1] = k
      gone[#gone + 1] = uniq[i + m - 1]
      if redis.call('ZREM', KEYS[3], uniq[i + m - 1]) == 0 then
        local _, _, d = parse(old[m])
        local b = bucket(d)
        left[b] = (left[b] or 0) + 1
      end
    end
  end
  i = j + 1
end
-- Replaced pending tasks leave their buckets before the new ones enter (see `unpush`).
for b, c in pairs(left) do
  if redis.call('HINCRBY', KEYS[4], 'b:' .. b, -c) <= 0 then
    redis.call('HDEL', KEYS[4], 'b:' .. b)
    redis.call('DEL', KEYS[1] .. ':' .. b)
    redis.call('ZREM', KEYS[1], b)
  end
end
call_chunked('HDEL', KEYS[5], gone, 1)
call_chunked('HSET', KEYS[2], h, 2)
-- The buckets' counts: read together (an empty bucket's list is opened, see `open_list`),
-- written together.
local index, fields, counts = {}, {}, {}
for o, b in ipairs(order) do
  local bs = string.format('%d', b)
  index[2 * o - 1], index[2 * o] = bs, bs
  fields[o] = 'b:' .. bs
end
i = 1
while i <= #fields do
  local j = math.min(#fields, i + CHUNK - 1)
  local c = redis.call('HMGET', KEYS[4], unpack(fields, i, j))
  for m = 1, j - i + 1 do
    local b = order[i + m - 1]
    local list = KEYS[1] .. ':' .. string.format('%d', b)
    if not c[m] then open_list(list) end
    call_chunked('RPUSH', list, by[b], 1)
    counts[2 * (i + m - 1) - 1] = fields[i + m - 1]
    counts[2 * (i + m - 1)] = string.format('%d', tonumber(c[m] or '0') + #by[b])
  end
  i = j + 1
end
call_chunked('HSET', KEYS[4], counts, 2)
call_chunked('ZADD', KEYS[1], index, 2)
notify(ARGV[2], ARGV[3], note)
if answers then
  for k = 1, #answers do
    if not answers[k] then answers[k] = state_of(ARGV[3 * k + 2]) end
  end
  return {v + 1, now, rep, answers}
end
return {v + 1, now or -1, rep}
