-- release: compare-and-delete, and hand the resource to the next waiter.
-- Model: model/redlease.pml, inline release_lua and, for the direct handoff, inline handoff_lua (the rest of the queue left out); a change here is a change there (docs/MODEL.md).
-- (queue.lua is inserted at the line '--#queue'.)
--
-- KEYS[1]  lease key     <prefix>{<resource>}:lease
-- KEYS[2]  queue key     <prefix>{<resource>}:queue     (see queue.lua)
-- KEYS[3]  alive key     <prefix>{<resource>}:alive     (see queue.lua)
-- KEYS[4]  released key  <prefix>{<resource>}:released  the last released lease
-- KEYS[5]  fence key     <prefix>{<t>}:fences           (see acquire.lua), for
--                        a direct handoff
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
-- message carrying its owner token.
--
-- A direct handoff: if this call deleted our lease and that first waiter
-- asked for the lease to be handed over (acquire.lua) within the last
-- 1.5 s, the waiter gets it here, in the same step, as acquire.lua's take
-- would give it: a new fence
-- from the counter, its TTL and its tail, marked as waited for if others
-- still queue; it leaves the queue, and its message carries the fence and
-- the waiter's stamp, '<owner>:<fence>:<stamp>'. The waiter then holds the
-- lease without another round trip. If the message is lost, the waiter's
-- next attempt finds the lease its own; if the waiter gave up meanwhile,
-- its own release (the same script, with its owner token) deletes it and
-- hands it on. A live waiter asks again at least once a second (each of
-- its attempts does); one that has not for 1.5 s may have died, and is
-- woken instead, so that a waiter that died in the queue holds the lease
-- only if it died within 1.5 s of the release.
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
    redis.call('HDEL', KEYS[3], member, '>' .. member)
  end
end
if deleted == 1 or (left == 1 and not cur) then
  local head = first(KEYS[2], KEYS[3])
  local ask = head and deleted == 1 and redis.call('HGET', KEYS[3], '>' .. head)
  local owner, client = string.match(head or '', '^(.*)/([^/]*)$')
  local ttl, stamp, at, tail = string.match(ask or '', '^(%d+) (%d+) (%d+)(.*)$')
  local channel = string.sub(lease, 1, -#'lease' - 1) .. 'wake'
  if ttl and owner and now_ms() - tonumber(at) <= 1500 then
    local fence = redis.call('INCR', KEYS[5])
    redis.call('ZREM', KEYS[2], head)
    redis.call('HDEL', KEYS[3], head, '>' .. head)
    local value = owner .. ':' .. string.format('%d', fence) .. tail
    if redis.call('EXISTS', KEYS[2]) == 1 then
      value = value .. '\0' -- waited for
    end
    redis.call('SET', lease, value, 'PX', ttl)
    publish(channel .. ':' .. client, owner .. ':' .. string.format('%d', fence) .. ':' .. stamp, ARGV[3] or '0')
  elseif head then
    wake_member(head, channel, ARGV[3] or '0')
  end
end
return math.min(deleted, 1)
