-- INIT: creates or checks a namespace's meta hash.
--
-- KEYS: the namespace's meta hash. ARGV: schema version, shard count. Creates the namespace
-- when absent; returns {schema, shards} as stored ({false, false} for a foreign key).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'schema', ARGV[1], 'shards', ARGV[2])
end
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return {false, false} end
return redis.call('HMGET', KEYS[1], 'schema', 'shards')
