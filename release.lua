-- release: compare-and-delete. Deletes the lease only while it is ours.
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease
-- ARGV[1]  owner token
--
-- Returns 1 if our lease was deleted, 0 if it had expired or belongs to another
-- owner (nothing is deleted then). The fence counter is never touched.
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
