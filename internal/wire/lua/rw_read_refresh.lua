-- rw_read_refresh: compare-and-renew of a read lease. (queue.lua is
-- inserted at '--#queue', for its clock and grow.)
-- Go: Lease.refreshCall in shared_lease.go.
--
-- KEYS[1] readers, KEYS[2] readinfo, KEYS[3] lease: the name's kind (see rw_read.lua)
-- ARGV[1] owner token   ARGV[2] TTL in ms
--
-- Returns 1 if the owner's read lease was unexpired and now has the full
-- TTL again, else 0.
--#queue
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp and exp > now_ms() then
  redis.call('ZADD', KEYS[1], 'XX', now_ms() + tonumber(ARGV[2]), ARGV[1])
  grow(KEYS[1], ARGV[2])
  grow(KEYS[2], ARGV[2])
  mark(KEYS[3], 'read/write', ARGV[2])
  return 1
end
return 0
