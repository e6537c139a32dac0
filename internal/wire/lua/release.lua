-- release: compare-and-delete, and hand the resource to the next waiter.
-- Model: model/redlease.pml, inline release_lua (the queue part left out); a change here is a change there (docs/MODEL.md).
-- (queue.lua is inserted at the line '--#queue'.)
--
-- KEYS[1]  lease key     <prefix>{<resource>}:lease
-- KEYS[2]  queue key     <prefix>{<resource>}:queue     (see queue.lua)
-- KEYS[3]  alive key     <prefix>{<resource>}:alive     (see queue.lua)
-- KEYS[4]  released key  <prefix>{<resource>}:released  the last released lease
-- ARGV[1]  owner token
-- ARGV[2]  the owner's queue member if it may be waiting in the queue; absent
--          or '' if not
-- ARGV[3]  '1' on Redis Cluster (shard channel); absent elsewhere
-- The wake channel, <prefix>{<resource>}:wake, is the lease key with its last
-- word changed (keys.go): a channel is not a key, and a word not sent is
-- time the server does not spend parsing it on every release.
--
-- Deletes the lease only while it is ours, and takes the owner out of the
-- queue if it is waiting there (a waiter that gives up releases too). If that
-- left the lease free and the lease was marked as waited for (its value ends
-- with a NUL byte: see acquire.lua), the first live waiter is woken by a
-- message carrying its owner token. The fence counter is never touched.
--
-- Returns 1 if our lease was deleted, by this call or by an earlier one whose
-- reply was lost; 0 if the lease had expired or belongs to another owner
-- (nothing is deleted then). The lease is deleted by renaming it to the
-- released key, one command instead of a delete and a write: that key keeps
-- the last released lease, owner and fence, for as long as the lease had
-- left, so a retried release is not mistaken for a lost lease.
local lease, mine, member = KEYS[1], ARGV[1] .. ':', ARGV[2] or ''
local deleted = 0
local cur = redis.call('GET', lease)
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('RENAME', lease, KEYS[4])
  deleted = 1
  -- The common case, decided before the queue's functions are defined:
  -- nobody is waiting (a waiter that found the lease busy marked it, see
  -- acquire.lua), and the owner was not queued.
  if member == '' and string.byte(cur, -1) ~= 0 then
    return 1
  end
else
  local last = redis.call('GET', KEYS[4])
  if last and string.sub(last, 1, #mine) == mine then
    -- An earlier call deleted it, and woke the next waiter then. The owner
    -- may have queued again since (an acquire that gave a lease back and
    -- retried with the same token): it still leaves the queue below.
    if member == '' then
      return 1
    end
    deleted = 2
  end
end

--#queue

local left = 0
if member ~= '' then
  left = redis.call('ZREM', KEYS[2], member)
  if left == 1 then
    redis.call('HDEL', KEYS[3], member)
  end
end
if deleted == 1 or (left == 1 and not cur) then
  wake(KEYS[2], KEYS[3], string.sub(lease, 1, -#'lease' - 1) .. 'wake', ARGV[3] or '0')
end
return math.min(deleted, 1)
