-- inspect: read what Redis holds for one resource, at one moment. Reads only.
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease
-- KEYS[2]  fence key  <prefix>{<t>}:fences  the counter of the resource's slot
-- KEYS[3]  queue key  <prefix>{<resource>}:queue  (see queue.lua)
--
-- Returns {value, pttl, counter, waiters}: the lease value ('' if none), its
-- PTTL in ms (-2 if none, -1 if it has no expiry), the slot's fence counter
-- (0 if absent) and the number of queued waiters.
local cur = redis.call('GET', KEYS[1])
local counter = tonumber(redis.call('GET', KEYS[2])) or 0
return {cur or '', redis.call('PTTL', KEYS[1]), counter, redis.call('ZCARD', KEYS[3])}
