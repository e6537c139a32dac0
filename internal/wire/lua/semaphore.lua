-- semaphore: take one of a resource's N permits, and draw its fence.
-- (queue.lua is inserted at the line '--#queue'.)
-- Go: acquisition.attempt in grant.go, shared_lease.go.
--
-- KEYS[1]  permits  <prefix>{<resource>}:permits  ZSET permit -> its holder's expiry,
--                   server ms (0: released); permits are '0'..'N-1', each
--                   added when first used
-- KEYS[2]  holders  <prefix>{<resource>}:holders  HASH permit -> "<owner>:<fence>[:<holder>]",
--                   'o:'<owner> -> its permit, 'r:'<permit> -> its last released
--                   holder (see semaphore_release.lua), 'n' -> N
-- KEYS[3]  fence    <prefix>{<t>}:fences  the counter of the resource's hash slot
-- KEYS[4]  queue, KEYS[5] alive: the waiters (see queue.lua)
-- KEYS[6]  lease    <prefix>{<resource>}:lease  the name's kind: a semaphore's
--                   mark while permits are held or waited for (see queue.lua)
-- ARGV[1]  owner token   ARGV[2] TTL in ms   ARGV[3] waiter timeout in ms (0: do not queue)
-- ARGV[4]  '1' for fair  ARGV[5] '1' if the owner may be queued
-- ARGV[6]  the owner's queue member   ARGV[7] the value's tail (acquire.lua's ARGV[5])   ARGV[8] N
-- ARGV[9]  wake channel <prefix>{<resource>}:wake   ARGV[10] '1' on Cluster
--
-- Finding a permit costs O(log N), whatever the number of expired holders:
-- the lowest expiry is reused once it has passed, else the next unused
-- permit is added. Both keys expire with their longest-lived holder.
--
-- A waiter that takes a permit while another is free wakes the next
-- waiter (see below).
--
-- Returns {1, permit, fence} when the owner holds a permit (newly, or already
-- from an attempt whose reply was lost); {0, pttl, first, ''} when all N are
-- held (pttl: until the first expires); {-1, M} when the resource is in use
-- with M permits, not N, and some permit is held (once none is, N may
-- change); the error reply 'WRONGKIND <kind>' when the name is another
-- kind's ('lease': an exclusive lease holds it; see queue.lua).
--#queue
local permits, holders = KEYS[1], KEYS[2]
local owner, ttl, member, n = ARGV[1], tonumber(ARGV[2]), ARGV[6], tonumber(ARGV[8])
local mine = owner .. ':'
local queued = ARGV[5] == '1'
local now = now_ms()

local wrong = claim(KEYS[6], 'semaphore')
if wrong then
  return wrong
end

local known = tonumber(redis.call('HGET', holders, 'n'))
if known and known ~= n then
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > now then
    return {-1, known}
  end
  -- Nobody holds a permit: N may change. The permits go (one above the new
  -- N must not be taken); the holders hash stays, for its 'r:'<permit>
  -- records, so that a release retried after the change is still
  -- recognised. Its other entries are harmless: a permit's holder and its
  -- 'o:' entry count only with the permit's expiry, gone now, and each is
  -- replaced when its permit is taken again. Those of permits above a
  -- smaller new N stay until the key expires, at most the old N's worth.
  redis.call('DEL', permits)
end

local function hold(p, value)
  redis.call('ZADD', permits, now + ttl, p)
  redis.call('HSET', holders, p, value, 'o:' .. owner, p, 'n', n)
  grow(permits, ttl)
  grow(holders, ttl)
  mark(KEYS[6], 'semaphore', ttl)
end

local had = redis.call('HGET', holders, 'o:' .. owner)
if had then
  local v = redis.call('HGET', holders, had)
  local exp = tonumber(redis.call('ZSCORE', permits, had))
  if v and string.sub(v, 1, #mine) == mine and exp and exp > now then
    hold(had, v)
    return {1, tonumber(had), tonumber(string.match(v, '^%d+', #mine + 1))}
  end
end

-- free returns a permit free now, or nil and the time until one is.
local function free()
  local low = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
  if low[1] and tonumber(low[2]) <= now then
    return low[1]
  end
  local used = redis.call('ZCARD', permits)
  if used < n then
    return tostring(used)
  end
  return nil, tonumber(low[2]) - now
end

local p, wait = free()
local head = nil
if p and (queued or ARGV[4] == '1') then
  head = first(KEYS[4], KEYS[5])
end
if not p or (ARGV[4] == '1' and head and head ~= member) then
  local timeout = tonumber(ARGV[3])
  if timeout > 0 then
    enqueue(KEYS[4], KEYS[5], member, timeout)
    mark(KEYS[6], 'semaphore', timeout)
    queued = true
  end
  local isfirst = 0
  if queued and first(KEYS[4], KEYS[5]) == member then
    isfirst = 1
  end
  return {0, wait or 0, isfirst, ''}
end
if queued and redis.call('ZREM', KEYS[4], member) == 1 then
  redis.call('HDEL', KEYS[5], member)
end
local prev = redis.call('HGET', holders, p)
if prev then
  redis.call('HDEL', holders, 'o:' .. string.match(prev, '^[^:]*'))
end
local fence = redis.call('INCR', KEYS[3])
local value = mine .. string.format('%d', fence)
if ARGV[7] ~= '' then
  value = value .. ':' .. ARGV[7]
end
hold(p, value)
-- A chain wake-up: a release wakes the first live waiter, which stays first
-- until its own attempt runs, so releases in quick succession all wake that
-- same waiter, and the others would sleep until their timers (with WithFair
-- the free permit would sit idle meanwhile). So a waiter that takes a
-- permit passes the wake-up on while a permit is still free: every release
-- is then followed by one grant to a waiter, which wakes the next, at one
-- message per grant. (Waking as many waiters as free permits at each release
-- would wake the same still-queued waiters again at every release.)
if queued and free() then
  wake(KEYS[4], KEYS[5], ARGV[9], ARGV[10])
end
return {1, tonumber(p), fence}
