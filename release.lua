-- release: compare-and-delete, and hand the resource to the next waiter.
-- (queue.lua is prepended.)
--
-- KEYS[1]  lease key     <prefix>{<resource>}:lease
-- KEYS[2]  queue key     <prefix>{<resource>}:queue     (see queue.lua)
-- KEYS[3]  alive key     <prefix>{<resource>}:alive     (see queue.lua)
-- KEYS[4]  released key  <prefix>{<resource>}:released  the last releasing owner
-- ARGV[1]  owner token
-- ARGV[2]  wake channel  <prefix>{<resource>}:wake
-- ARGV[3]  '1' on Redis Cluster (shard channel), else '0'
-- ARGV[4]  how long to remember the release, in ms (the lease TTL)
-- ARGV[5]  the owner's queue member if it may be waiting in the queue, else ''
--
-- Deletes the lease only while it is ours, and takes the owner out of the
-- queue if it is waiting there (a waiter that gives up releases too). If that
-- left the lease free, the first live waiter is woken by a message carrying
-- its owner token. The fence counter is never touched.
--
-- Returns 1 if our lease was deleted, by this call or by an earlier one whose
-- reply was lost (the released key remembers the last releasing owner, so a
-- retried release is not mistaken for a lost lease); 0 if the lease had
-- expired or belongs to another owner (nothing is deleted then).
local lease, owner = KEYS[1], ARGV[1]
local mine = owner .. ':'
local deleted = 0
local cur = redis.call('GET', lease)
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('DEL', lease)
  redis.call('SET', KEYS[4], owner, 'PX', ARGV[4])
  deleted = 1
elseif redis.call('GET', KEYS[4]) == owner then
  return 1
end
local left = 0
if ARGV[5] ~= '' then
  left = redis.call('ZREM', KEYS[2], ARGV[5])
  if left == 1 then
    redis.call('HDEL', KEYS[3], ARGV[5])
  end
end
if deleted == 1 or (left == 1 and not cur) then
  wake(KEYS[2], KEYS[3], ARGV[2], ARGV[3])
end
return deleted
