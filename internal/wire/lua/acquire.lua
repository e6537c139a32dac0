-- acquire: take the lease of one resource if it is free, and draw its fence.
-- Model: model/redlease.pml, inline acquire_lua (and proctype Other, for a second resource of the slot); a change here is a change there (docs/MODEL.md).
-- (queue.lua is inserted at the line '--#queue'.)
-- Go: acquisition.attempt in grant.go.
--
-- KEYS[1]  lease key    <prefix>{<resource>}:lease  "<owner>:<fence>[:<holder>]"
--                       (and, after a NUL byte, its lock delay) with a TTL
-- KEYS[2]  fence key    <prefix>{<t>}:fences        the fence counter of the resource's
--                       hash slot (t hashes to it), never expires
-- KEYS[3]  queue key    <prefix>{<resource>}:queue  (see queue.lua)
-- KEYS[4]  alive key    <prefix>{<resource>}:alive  (see queue.lua)
-- ARGV[1]  owner token (random, unique per logical acquire)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  the mode: the waiter timeout in ms (when > 0 and the lease is
--          busy, queue the owner, or refresh its place, for that long), after
--          the letter 'f' for a fair acquire (a free lease goes to the first
--          live waiter) and 'a' if this is not the acquire call's first
--          attempt (the owner may hold the lease already, after a lost reply,
--          or be queued), then, for a waiter that asks for a direct
--          handoff, 'h' and its stamp (below): '3000', 'fa3000', 'a0',
--          'a3000h25012'. One word for four, because every word of a call
--          costs the server time to parse.
-- ARGV[4]  the owner's queue member, '<owner>/<client id>' (see queue.lua)
-- ARGV[5]  the lease value's tail: the holder's description, then, for a
--          lease with a lock delay (WithLockDelay), a NUL byte and the delay
--          in ms, which break.lua honours; absent for none (a campaign sends
--          it)
-- KEYS[5]  handover key <prefix>{<resource>}:handover  an election's preferred
--          next leader (see handover.lua); sent by a campaign only, absent
--          for every other acquire
-- ARGV[6]  '1' on Redis Cluster (shard channel), for a campaign; absent
--          for every other acquire
--
-- When the lease is ours the reply is its fence (> 0), an integer: newly
-- taken (the slot's counter is incremented in the same step, so no lease
-- ever exists without a fence, and every new holder of the resource gets a
-- larger one than every earlier holder), or already ours because an earlier
-- attempt with the same owner succeeded and its reply was lost (then the TTL
-- is reset and the same fence is returned: a retry never creates a second
-- holder or burns a second fence).
-- When it is not, {pttl, first, holder}: pttl is the time the holder's lease
-- has left in ms (-1 if someone stored the key without a TTL, 0 if the lease
-- is free but a fair acquire must let an earlier waiter go first); first is
-- 1 if the owner is now the first live waiter in the queue; holder is the
-- holder's description ('' if none).
-- When the name is another kind's (its semaphore's or read/write leases are
-- held or waited for: see queue.lua), the error reply 'WRONGKIND <kind>'.
--
-- A campaign (KEYS[5] sent) while a handover is pending (Election.Handover)
-- may take a free lease only if its holder description is the preferred
-- one, which then goes before every queued waiter and ends the handover.
-- Any other campaign finds the name busy for as long as the handover lasts,
-- and, if it found the lease free (a release woke it), wakes the preferred
-- campaigner in its place, if that one is waiting.
--
-- A waiter that asks for a direct handoff (mode 'h<stamp>': Acquire of one
-- exclusive lease) and finds the lease busy also leaves, in the alive hash
-- under '>' .. member, its TTL, its stamp, the server time in ms and its
-- value's tail: '<ttl> <stamp> <ms>[:<tail>]'. The stamp is the waiter's
-- own reading of its clock when it sent this attempt, which the waiter gets
-- back; each busy attempt replaces it. A release that frees the lease gives
-- it to the first live waiter that asked recently (release.lua), and a
-- stamp it finds is that of an attempt that ran before the release: a local
-- deadline counted from it ends before the handed lease's TTL does.
--
-- A waiter that finds the lease busy marks it as waited for: a NUL byte at
-- the end of its value, which the release script reads instead of looking
-- for a queue, and every parser of lease values ignores. Every lease that a
-- waiter may be waiting for is so marked: a waiter sleeps only after an
-- attempt that found the lease busy (and marked it); a waiter that takes the
-- lease marks it while others wait; and a lease taken by someone else after
-- a release of a marked one was taken when that release woke the first
-- waiter, whose next attempt finds the new lease busy and marks it.
local lease, owner, mode, member, holder = KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local mine = owner .. ':'
local fair = string.find(mode, 'f', 1, true) ~= nil
local queued = string.find(mode, 'a', 1, true) ~= nil
-- A campaign's handover: other is true while a handover to another campaigner
-- is pending, preferred while one to this campaigner's value is.
local handover, other, preferred = KEYS[5], false, false
if handover then
  local to = redis.call('HGET', handover, 'to')
  preferred = to ~= false and to == string.match(holder or '', '^[^%z]*')
  other = to ~= false and not preferred
end

-- The common cases first, before the queue's functions are defined (which
-- costs time on every call). The first attempt of an acquire that need not
-- let a queued waiter go first draws the fence and takes the lease if it is
-- free, in two commands (a fence drawn for a busy lease is skipped: fences
-- need only rise). Later attempts first look whether the lease is already
-- theirs, so that a retry burns no fence. A first attempt may find the lease
-- its own too: the client library sent it again after its reply was lost
-- (go-redis retries on a reset connection); it is the same lease then.
local cur
if not queued and not fair and not other and not preferred then
  local fence = redis.call('INCR', KEYS[2])
  local value = mine .. string.format('%d', fence)
  if holder then
    value = value .. ':' .. holder
  end
  cur = redis.call('SET', lease, value, 'NX', 'PX', ARGV[2], 'GET')
  if not cur then
    return fence
  end
else
  cur = redis.call('GET', lease)
end
if cur and string.byte(cur, 1) == 1 then -- the name is another kind's (see queue.lua)
  return redis.error_reply('WRONGKIND ' .. string.sub(cur, 2))
end
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('PEXPIRE', lease, ARGV[2])
  return tonumber(string.match(cur, '^%d+', #mine + 1))
end

--#queue

local function take(waited)
  local fence = redis.call('INCR', KEYS[2])
  local value = mine .. string.format('%d', fence)
  if holder then
    value = value .. ':' .. holder
  end
  if waited then
    value = value .. '\0'
  end
  redis.call('SET', lease, value, 'PX', ARGV[2])
  if preferred then
    redis.call('DEL', handover) -- handed over
  end
  return fence
end

local function busy(pttl)
  local timeout = tonumber(string.match(mode, '^%a*(%d+)'))
  if timeout > 0 then
    enqueue(KEYS[3], KEYS[4], member, timeout)
    local stamp = string.match(mode, 'h(%d+)$')
    if stamp then -- ask the release to hand the lease over (release.lua)
      redis.call('HSET', KEYS[4], '>' .. member,
        ARGV[2] .. ' ' .. stamp .. ' ' .. now_ms() .. (holder and ':' .. holder or ''))
    end
    queued = true
    if preferred then -- so that another campaign can wake it
      redis.call('HSET', handover, 'member', member)
    end
    if cur and string.byte(cur, -1) ~= 0 then
      redis.call('SET', lease, cur .. '\0', 'KEEPTTL') -- waited for
    end
  end
  local head = 0
  if queued and first(KEYS[3], KEYS[4]) == member then
    head = 1
  end
  return {pttl, head, cur and string.match(cur, '^[^:]*:%d+:([^%z]*)') or ''}
end

if cur then
  return busy(redis.call('PTTL', lease))
end
if other then
  -- Free, but promised: wake the preferred campaigner if it waits, and
  -- stay away for as long as the handover lasts.
  local m = redis.call('HGET', handover, 'member')
  if m then
    wake_member(m, string.sub(lease, 1, -#'lease' - 1) .. 'wake', ARGV[6])
  end
  return busy(redis.call('PTTL', handover))
end
if fair and not preferred then
  local head = first(KEYS[3], KEYS[4])
  if head and head ~= member then
    return busy(0)
  end
end
if queued and redis.call('ZREM', KEYS[3], member) == 1 then
  redis.call('HDEL', KEYS[4], member, '>' .. member)
end
-- A waiter that takes the lease marks it if others still wait: they sleep,
-- and its release must wake the next.
return take(queued and redis.call('EXISTS', KEYS[3]) == 1)
