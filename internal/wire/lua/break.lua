-- break: an operator's forced release, of any kind of lease. (queue.lua is
-- inserted at the line '--#queue'.) Go: Client.breakLease in admin.go.
-- Model: model/redlease.pml, inline break_lua (fence 0, an exclusive lease); a change here is a change there (docs/MODEL.md).
--
-- KEYS[1..10] as inspect.lua's
-- ARGV[1]  the fence of the lease to remove, in decimal; '0' for any (every
--          holder of the resource)
-- ARGV[2]  wake channel  <prefix>{<resource>}:wake    ARGV[3] '1' on Cluster
-- ARGV[4]  the break channels' stem <prefix>break:, or '' to tell no holder
--
-- Reads the resource as inspect.lua does and, in the same step, removes the
-- leases that have that fence: the lease key, a semaphore's permit (its
-- expiry becomes -1: free, and not mistaken for released by its holder), the
-- write lease, a read lease; then wakes waiters as the holders' releases
-- would, and frees the name of its kind's mark once none of that kind's
-- leases or waiters is left (see queue.lua). The fence counter and the
-- released markers are never touched, so
-- the next holder gets a larger fence than the removed one, and the removed
-- holder's own Release reports a lost lease.
--
-- A lease with a lock delay (its value ends with a NUL byte and the delay
-- in ms: see acquire.lua) is not removed but broken: its owner becomes
-- 'broken', which no owner token matches, so that its holder can neither
-- renew nor release it, and it stays for the delay (or the time it had
-- left, if less) and keeps the resource as a lapsed one would. For the
-- lease and the write lease that is their key's value; for a permit, its
-- holder's value and expiry; read leases leave one reader 'broken', with the
-- latest such expiry. Waiters are woken all the same, to learn how long
-- that is. A break of a broken lease removes it.
--
-- Each removed lease whose owner is an owner token (a UUID, whose first 8
-- hex digits name the holder's Client) is told to its holder: a message
-- '<owner>:<fence>:<KEYS[1]>' on the channel ARGV[4] .. <those 8 digits>,
-- with PUBLISH, a classic channel on Cluster too (a script may publish on
-- any channel, and the cluster bus carries the message to every node).
--
-- Returns inspect.lua's reply, of before the removal, and the number of
-- leases removed.
--#queue
local now = now_ms()
local function matches(v)
  return v and (ARGV[1] == '0' or string.match(v, '^[^:]*:(%d+)') == ARGV[1])
end
local function tell(v)
  local owner, fence = string.match(v, '^(%x%x%x%x%x%x%x%x%-[%x%-]+):(%d+)')
  if owner and #owner == 36 and ARGV[4] ~= '' then
    -- pcall: a publish that fails (an ACL that denies the channel) must
    -- not fail the script after its removals; the holder then finds out
    -- at its next renewal.
    redis.pcall('PUBLISH', ARGV[4] .. string.sub(owner, 1, 8), owner .. ':' .. fence .. ':' .. KEYS[1])
  end
end
local cur = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or '0'
local waiters = redis.call('ZCARD', KEYS[3]) + redis.call('ZCOUNT', KEYS[10], '(' .. now, '+inf')
local n = tonumber(redis.call('HGET', KEYS[6], 'n')) or 0
local holders, removed = {}, 0
local wakeOne, wakeRW, delayed = false, false, false

-- kept returns, for a removed lease's value v that has a lock delay, the
-- value that keeps the resource meanwhile and for how long (at most left
-- ms, the time the lease had); nil for a lease without one, or broken.
local function kept(v, left)
  local owner = string.match(v, '^[^:]*')
  local delay = string.match(v, '%z(%d+)')
  if delay and left > 0 and owner ~= 'broken' then
    delayed = true
    return 'broken' .. string.sub(v, #owner + 1), math.min(tonumber(delay), left)
  end
end

if matches(cur) and string.byte(cur, 1) ~= 1 then -- an exclusive lease, not a mark (see queue.lua)
  local value, ms = kept(cur, pttl)
  if value then
    redis.call('SET', KEYS[1], value, 'PX', ms)
  else
    redis.call('DEL', KEYS[1])
  end
  removed = removed + 1
  wakeOne = true
  tell(cur)
end
local live = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local v = redis.call('HGET', KEYS[6], live[i]) or ''
  table.insert(holders, {'p', tonumber(live[i]), v, tonumber(live[i + 1]) - now})
  if matches(v) then
    local value, ms = kept(v, tonumber(live[i + 1]) - now)
    if value then
      redis.call('ZADD', KEYS[5], 'XX', now + ms, live[i])
      redis.call('HSET', KEYS[6], live[i], value)
    else
      redis.call('ZADD', KEYS[5], 'XX', -1, live[i])
    end
    redis.call('HDEL', KEYS[6], 'o:' .. string.match(v, '^[^:]*'))
    removed = removed + 1
    wakeOne = true
    tell(v)
  end
end
local w = redis.call('GET', KEYS[7])
if w then
  table.insert(holders, {'w', 0, w, redis.call('PTTL', KEYS[7])})
  if matches(w) then
    local value, ms = kept(w, redis.call('PTTL', KEYS[7]))
    if value then
      redis.call('SET', KEYS[7], value, 'PX', ms)
    else
      redis.call('DEL', KEYS[7])
    end
    removed = removed + 1
    wakeRW = true
    tell(w)
  end
end
live = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. now, '+inf', 'WITHSCORES')
local upto, info -- the reader 'broken' that the removed read leases leave
for i = 1, #live, 2 do
  local v = live[i] .. ':' .. (redis.call('HGET', KEYS[9], live[i]) or '0')
  table.insert(holders, {'r', 0, v, tonumber(live[i + 1]) - now})
  if matches(v) then
    local value, ms = kept(v, tonumber(live[i + 1]) - now)
    if value and (not upto or upto < now + ms) then
      upto, info = now + ms, string.sub(value, #'broken:' + 1)
    end
    redis.call('ZREM', KEYS[8], live[i])
    redis.call('HDEL', KEYS[9], live[i])
    removed = removed + 1
    wakeRW = true
    tell(v)
  end
end
if upto and upto > (tonumber(redis.call('ZSCORE', KEYS[8], 'broken')) or 0) then
  redis.call('ZADD', KEYS[8], upto, 'broken')
  redis.call('HSET', KEYS[9], 'broken', info)
end
if wakeOne then
  wake(KEYS[3], KEYS[4], ARGV[2], ARGV[3])
end
if wakeRW then
  local last = redis.call('ZRANGE', KEYS[8], -1, -1, 'WITHSCORES')
  local readers = last[2] and tonumber(last[2]) > now
  if delayed or redis.call('EXISTS', KEYS[7]) == 0 and not readers then
    if first(KEYS[3], KEYS[4]) then
      wake(KEYS[3], KEYS[4], ARGV[2], ARGV[3])
    else
      wake_readers(KEYS[10], ARGV[2], ARGV[3])
    end
  end
end
-- The name's mark goes with the last of its kind's leases and waiters.
if cur and string.byte(cur, 1) == 1 then
  local held = #redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'LIMIT', 0, 1) > 0
    or redis.call('EXISTS', KEYS[7]) == 1
    or #redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. now, '+inf', 'LIMIT', 0, 1) > 0
  unmark(KEYS[1], string.sub(cur, 2), held, {KEYS[3], KEYS[10]})
end
return {cur or '', pttl, counter, waiters, n, holders, removed}
