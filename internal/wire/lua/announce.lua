-- announce: tell the observers of an election that a new term began.
-- Go: Election.announce in election.go.
--
-- KEYS[1]  lease key  <prefix>{<name>}:lease  names the slot; not read
-- ARGV[1]  '1' on Redis Cluster (shard channel); absent elsewhere
-- The leader channel, <prefix>{<name>}:leader, is the lease key with its last
-- word changed (keys.go), as release.lua makes the wake channel.
--
-- Publishes '*' on the leader channel: every observer that hears it reads
-- the term (inspect.lua) and reports it if it is newer than the last it
-- reported. Returns 1.
local ch = string.sub(KEYS[1], 1, -#'lease' - 1) .. 'leader'
if ARGV[1] == '1' then
  redis.call('SPUBLISH', ch, '*')
else
  redis.call('PUBLISH', ch, '*')
end
return 1
