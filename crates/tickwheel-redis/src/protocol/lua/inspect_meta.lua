-- INSPECT_META: a namespace's meta hash, read without creating it (compare init.lua).
--
-- KEYS: the namespace's meta hash. ARGV: none.
-- Returns {type} when it is not a hash (`none`: the namespace does not exist), else
-- {'hash', schema or '', shards or ''}.
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'hash' then return {t} end
local m = redis.call('HMGET', KEYS[1], 'schema', 'shards')
return {t, m[1] or '', m[2] or ''}
