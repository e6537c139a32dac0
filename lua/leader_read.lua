-- leader_read: read an election's current term, at one moment. Reads only.
--
-- KEYS[1]  lease key   <prefix>{<name>}:lease   "<owner>:<fence>" (see acquire.lua)
-- KEYS[2]  leader key  <prefix>{<name>}:leader  "<owner> <value>" (see leader.lua)
--
-- Returns {lease, pttl, leader}: the lease value ('' if none), its PTTL in ms
-- (-2 if none) and the leader record ('' if none).
local cur = redis.call('GET', KEYS[1])
return {cur or '', redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
