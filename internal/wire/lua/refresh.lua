-- refresh: compare-and-renew. Extends the lease to the full TTL only while it is ours.
-- Model: model/redlease.pml, inline refresh_lua; a change here is a change there (docs/MODEL.md).
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease  "<owner>:<fence>[:<holder>]"
--          (a write lease is renewed by rw_write_refresh.lua)
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
--
-- Returns 1 if the lease was ours and now has the full TTL again, 0 if it has
-- expired or belongs to another owner (it is never recreated).
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
