-- handover: ask an election's leader to end its term at its next renewal,
-- and promise the next term to the campaigner whose value is ARGV[1].
-- Go: Election.Handover in election_handover.go.
--
-- KEYS[1]  lease key     <prefix>{<name>}:lease     the current term
-- KEYS[2]  handover key  <prefix>{<name>}:handover  HASH: 'to', the preferred
--          value; 'member', that campaigner's queue member once it waits
--          (acquire.lua records it)
-- ARGV[1]  the preferred campaigner's value (its holder description)
-- ARGV[2]  how long the handover outlives the current term's lease, in ms
--
-- The term's renewal (refresh.lua, sent with the handover key) finds the
-- handover and is refused; a campaign (acquire.lua, likewise) takes a free
-- lease only if it is the preferred campaigner's, which ends the handover.
-- The handover expires ARGV[2] ms after the current term's lease would, so
-- that other campaigners win again if the preferred one never comes. A
-- later handover replaces an earlier one.
--
-- Returns 0 if nobody leads (the name is free or another kind's: nothing is
-- written), 1 if the preferred campaigner leads already (nothing is
-- written), 2 if the handover is recorded.
local cur = redis.call('GET', KEYS[1])
if not cur or string.byte(cur, 1) == 1 then
  return 0
end
if (string.match(cur, '^[^:]*:%d+:([^%z]*)') or '') == ARGV[1] then
  return 1
end
local pttl = math.max(redis.call('PTTL', KEYS[1]), 0)
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'to', ARGV[1])
redis.call('PEXPIRE', KEYS[2], pttl + tonumber(ARGV[2]))
return 2
