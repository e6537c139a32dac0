-- rw_write_refresh: compare-and-renew of a write lease: refresh.lua on the
-- writer key, and the name's mark kept as long. (queue.lua is inserted at
-- '--#queue', for its grow and mark.)
-- Go: Lease.refreshCall in shared_lease.go.
--
-- KEYS[1] writer  <prefix>{<resource>}:writer  "<owner>:<fence>[:<holder>]"
-- KEYS[2] lease   <prefix>{<resource>}:lease   the name's kind (see queue.lua)
-- ARGV[1] owner token   ARGV[2] TTL in ms
--
-- Returns 1 if the write lease was ours and now has the full TTL again, 0
-- if it has expired or belongs to another owner (it is never recreated).
--#queue
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  mark(KEYS[2], 'read/write', ARGV[2])
  return 1
end
return 0
