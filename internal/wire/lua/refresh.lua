-- refresh: compare-and-renew. Extends the lease to the full TTL only while it is ours.
-- Model: model/redlease.pml, inline refresh_lua; a change here is a change there (docs/MODEL.md).
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease  "<owner>:<fence>[:<holder>]"
--          (a write lease is renewed by rw_write_refresh.lua)
-- KEYS[2]  handover key <prefix>{<resource>}:handover (see handover.lua);
--          sent for an election's term only, absent for every other lease
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
--
-- Returns 1 if the lease was ours and now has the full TTL again, 0 if it has
-- expired or belongs to another owner (it is never recreated), 2 if it is
-- ours, a term, and a handover to another campaigner is pending: it is then
-- not renewed, and its holder ends the term.
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur and string.sub(cur, 1, #mine) == mine then
  if KEYS[2] then
    local to = redis.call('HGET', KEYS[2], 'to')
    if to and to ~= (string.match(cur, '^[^:]*:%d+:([^%z]*)') or '') then
      return 2
    end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
