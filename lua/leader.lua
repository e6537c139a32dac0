-- leader: record the value of an election's term, only while the term is
-- still ours. Campaign runs it after Acquire returns: checking and writing in
-- one step means a campaigner that stalled past its TTL cannot overwrite the
-- record of the term that came after its own.
--
-- KEYS[1]  lease key   <prefix>{<name>}:lease   "<owner>:<fence>" (see acquire.lua)
-- KEYS[2]  leader key  <prefix>{<name>}:leader  "<owner> <value>", no TTL
-- ARGV[1]  the term's owner token
-- ARGV[2]  the value
--
-- The reply is 1 if the value was recorded, 0 if the lease does not hold the
-- owner (it expired, was released, or is another term's): nothing is written.
local mine = ARGV[1] .. ':'
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #mine) ~= mine then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
