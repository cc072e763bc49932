-- PROBE: reads a Cluster node's clock.
--
-- No keys: sent by `EVAL` to each primary of a Cluster in turn, for the workers' clock
-- estimates. Returns {seconds, microseconds, node id}: a reading of the node's clock and the
-- node it belongs to, in one atomic step.
local t = redis.call('TIME')
return {t[1], t[2], redis.call('CLUSTER', 'MYID')}
