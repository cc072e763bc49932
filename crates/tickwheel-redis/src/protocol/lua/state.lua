-- STATE: where a task is.
-- KEYS: the shard's keys (see prelude.lua).
--
-- ARGV: id. Returns `state_of(id)` (see prelude.lua).
return state_of(ARGV[1])
