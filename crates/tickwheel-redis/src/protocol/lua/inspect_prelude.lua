-- INSPECT_PRELUDE: what the read-only inspection scripts (`inspect_*.lua`) share, appended
-- to prelude.lua. The Rust side (src/protocol/inspect.rs) starts each of them with
-- `#!lua flags=no-writes`, so Redis refuses any write they might attempt, runs them on a
-- replica too, and never waits for an fsync on their account.
--
-- Every inspection script bounds its own work by an argument (`limit`, `scan`): a caller
-- pages through a large shard in many short calls, so that reading never holds Redis long
-- enough to make a running worker late.
--
-- A task's value without copying its payload: version, attempt, due, recurrence, payload
-- length, payload offset (see `colons` and `parse` in prelude.lua).
local function meta(h)
  local a, b, c, d, e, n, m = colons(h)
  return tonumber(string.sub(h, 1, a - 1)), tonumber(string.sub(h, a + 1, b - 1)),
         tonumber(string.sub(h, b + 1, c - 1)), string.sub(h, e + 1, e + n),
         #h - e - n - m, e + n + m + 1
end
