-- FAIL: a delivery's attempt failed: retry it, or move it to the failed set.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: now, the tenure (`epoch:worker`), channel, shard, id, version, attempt, error text, retry, the
-- namespace's policy, jitter draw (0 ..= 999999), failed kept per shard, failed kept ms,
-- next run ms (a recurring task's, 0 for none).
-- `retry` is `p` (by the policy), `n` (never: non-retryable) or `<ms>` (after this delay,
-- while attempts remain). A policy (the task's own when it has one, else the namespace's)
-- is `max failures,initial ms,factor,cap ms,jitter,stop series` (see `RetryPolicy::encode`):
-- the delay before retry number n is min(cap, initial * factor^(n-1)), less up to `jitter`
-- of itself (by the draw); max failures 0 means no limit.
-- Acts only on the current delivery (same epoch, version and attempt, in flight): the
-- failure joins the task's error log (KEYS[5], the last ERRORS_KEPT kept); then, while
-- failures remain below the maximum and `retry` is not `n`, the task is pending again at
-- now + delay, its attempt count kept (the worker arms it); otherwise it leaves the task
-- hash for the failed set (KEYS[6] scored by now, its record in KEYS[7]: reason
-- `exhausted` or `non_retryable`, the log and the value) and, for a recurring task whose
-- policy does not stop the series, is re-armed at its next run as ACK re-arms it (new
-- version, attempt 0, no error log; published when at or before the horizon). A record
-- already kept under the id is replaced. Then the failed set is trimmed to the retention
-- bounds (oldest first; at most 1000 by count and 100 by age per call), counted in the state's `trimmed`.
-- Returns {-1} fenced, {0} stale, {1, run_at, failures} pending again,
-- {2, reason, failures, next run or 0} failed.
local now = clock(ARGV[1])
if not holds(KEYS[4], ARGV[2]) then return {-1} end
local id = ARGV[5]
local v, a, d, payload, rec, pol, h = take_delivery(id, ARGV[6], ARGV[7])
if not v then return {0} end
local log, failures = log_add(redis.call('HGET', KEYS[5], id), a, now, ARGV[8])
local p = pol
if p == '' then p = ARGV[10] end
local f = {}
for x in string.gmatch(p, '[^,]+') do f[#f + 1] = tonumber(x) end
local max, initial, factor, cap, jitter, stop = f[1], f[2], f[3], f[4], f[5], f[6]
local retry = ARGV[9]
if retry ~= 'n' and (max == 0 or failures < max) then
  local delay
  if retry == 'p' then
    delay = math.min(cap, initial * factor ^ (failures - 1))
    delay = math.floor(delay - delay * jitter * tonumber(ARGV[11]) / 1000000)
  else
    delay = tonumber(retry)
  end
  local run_at = now + delay
  redis.call('HSET', KEYS[2], id, header(v, a, run_at, anchored(rec, d), pol) .. payload)
  redis.call('HSET', KEYS[5], id, log)
  push(bucket(run_at), {id}, 1)
  return {1, run_at, failures}
end
local reason = 'exhausted'
if retry == 'n' then reason = 'non_retryable' end
redis.call('HSET', KEYS[7], id, record(reason, log, h))
redis.call('ZADD', KEYS[6], now, id)
redis.call('HDEL', KEYS[5], id)
local nxt = tonumber(ARGV[14])
if rec ~= '' and nxt > 0 and stop ~= 1 then
  local nv = redis.call('HINCRBY', KEYS[4], 'seq', 1)
  redis.call('HSET', KEYS[2], id, header(nv, 0, nxt, unanchored(rec), pol) .. payload)
  push(bucket(nxt), {id}, 1)
  local horizon = tonumber(redis.call('HGET', KEYS[4], 'horizon') or '0')
  if nxt <= horizon then notify(ARGV[3], ARGV[4], {entry(nv, nxt, id)}) end
else
  redis.call('HDEL', KEYS[2], id)
  nxt = 0
end
-- Retention: the oldest beyond the count, then (a bounded number) those past the age.
local trimmed = 0
local over = math.min(redis.call('ZCARD', KEYS[6]) - tonumber(ARGV[12]), 1000)
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[6], 0, over - 1)
  redis.call('ZREM', KEYS[6], unpack(old))
  redis.call('HDEL', KEYS[7], unpack(old))
  trimmed = trimmed + #old
end
local aged = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[13]), 'LIMIT', 0, 100)
if #aged > 0 then
  redis.call('ZREM', KEYS[6], unpack(aged))
  redis.call('HDEL', KEYS[7], unpack(aged))
  trimmed = trimmed + #aged
end
if trimmed > 0 then redis.call('HINCRBY', KEYS[4], 'trimmed', trimmed) end
return {2, reason, failures, nxt}
