-- refresh_many: compare-and-renew several exclusive leases in one call, each
-- as refresh.lua renews one (no election's term: those need their handover
-- key). The watchdog sends it for the leases that fall due together.
-- Model: model/redlease.pml, inline refresh_lua, per key; a change here is a change there (docs/MODEL.md).
-- The model gives a client one lease; a call on several runs refresh_lua
-- for each, back to back in one atomic step, and each lease's step reads and
-- writes only its own key.
-- Go: watchdog.send in watchdog.go.
--
-- The keys are in many hash slots: this call is for a server that is not
-- Redis Cluster, where a script may name any key (on Cluster each lease is
-- renewed by a refresh.lua call of its own). A lease this call does not
-- renew is tried again alone with refresh.lua, whose reply alone counts
-- as a loss: through a proxy that runs a script where its first key lives,
-- the other keys are not found here.
--
-- KEYS[i]     the i-th lease key  <prefix>{<resource>}:lease
--             "<owner>:<fence>[:<holder>]"
-- ARGV[2i-1]  its owner token
-- ARGV[2i]    its TTL in milliseconds
--
-- Returns an array with, for the i-th lease, 1 if it was ours and now has the
-- full TTL again, 0 if it has expired or belongs to another owner (it is
-- never recreated): refresh.lua's reply for it. A key that holds no string
-- is no lease of ours (0), so that one key cannot fail the others' renewal.
local out = {}
for i = 1, #KEYS do
  local cur = redis.pcall('GET', KEYS[i])
  local mine = ARGV[2 * i - 1] .. ':'
  if type(cur) == 'string' and string.sub(cur, 1, #mine) == mine then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
