-- queue.lua: shared functions, inserted at their line '--#queue' into
-- acquire.lua, acquire_all.lua, release.lua, break.lua and the scripts of
-- shared leases, semaphore*.lua and rw_*.lua (the refresh scripts only for
-- the clock and grow).
--
-- The waiters of one resource queue in Redis, so that a release wakes exactly
-- one of them (no stampede) and, for fair leases, so that the lease goes to
-- waiters in arrival order:
--   <prefix>{<resource>}:queue  ZSET  member -> arrival time, server µs (the
--                                     order; µs, not ms, so that two waiters
--                                     arriving within one ms keep their
--                                     order instead of being sorted by their
--                                     random member)
--   <prefix>{<resource>}:alive  HASH  member -> deadline, server ms; a
--                                     waiter that stops refreshing it is
--                                     dropped; and '>' .. member -> a
--                                     waiter's request for a direct
--                                     handoff (see acquire.lua)
-- A member is '<owner token>/<client id>': the client id names the wake
-- channel of the waiter's client, so a wake-up reaches one process only.
-- Both keys expire when no waiter has refreshed them for a waiter timeout,
-- which is the same for every client, so a refresh never shortens another
-- waiter's life.

local clock -- the server time in µs, read at most once per call
local function now_us()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- first returns the first live waiter, dropping dead ones ahead of it.
local function first(queue, alive)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    local deadline = tonumber(redis.call('HGET', alive, head))
    if deadline and deadline > now_ms() then
      return head
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', alive, head, '>' .. head)
  end
end

-- enqueue adds owner to the queue at its arrival time unless it is already
-- in it (NX keeps its place), and keeps it alive for timeout ms.
local function enqueue(queue, alive, owner, timeout)
  local now = now_ms()
  redis.call('ZADD', queue, 'NX', now_us(), owner)
  redis.call('HSET', alive, owner, now + timeout)
  redis.call('PEXPIRE', queue, timeout)
  redis.call('PEXPIRE', alive, timeout)
end

-- publish sends message on channel: a shard channel of the resource's slot
-- on Redis Cluster (sharded is '1'), where SPUBLISH needs Redis 7 and an
-- older cluster gets no wake-up (waiters then retry on their timers).
local function publish(channel, message, sharded)
  if sharded == '1' then
    redis.pcall('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

-- wake_member tells the waiter whose queue member is member that the
-- lease is free: its owner token on <channel>:<client id>, the channel of
-- its client only (publish).
local function wake_member(member, channel, sharded)
  local owner, client = string.match(member, '^(.*)/([^/]*)$')
  if owner then
    channel = channel .. ':' .. client
  else
    owner = member
  end
  publish(channel, owner, sharded)
end

-- wake tells the first live waiter that the lease is free (wake_member).
local function wake(queue, alive, channel, sharded)
  local head = first(queue, alive)
  if head then
    wake_member(head, channel, sharded)
  end
end

-- wake_readers tells every live waiting reader (see rw_read.lua) that it may
-- try again: once per client, a message '*' on <channel>:<client id>, which
-- wakes all of that client's waiters of the resource. Readers whose
-- deadline passed are dropped.
local function wake_readers(readq, channel, sharded)
  redis.call('ZREMRANGEBYSCORE', readq, '-inf', now_ms())
  local sent = {}
  for _, m in ipairs(redis.call('ZRANGE', readq, 0, -1)) do
    local client = string.match(m, '/([^/]*)$')
    if client and not sent[client] then
      sent[client] = true
      publish(channel .. ':' .. client, '*', sharded)
    end
  end
end

-- grow makes key live at least ttl ms more, never less: the keys of shared
-- leases live as long as their longest holder or waiter.
local function grow(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- One kind of lease per name. A resource's lease key holds its exclusive
-- lease; while the resource's semaphore or read/write leases are held or
-- waited for, it holds the mark '\1<kind>' instead ('\1semaphore',
-- '\1read/write'; an owner token never starts with byte 1), for as long as
-- the longest of them. An exclusive acquire then finds the name taken and
-- answers WRONGKIND at no cost to its common case (acquire.lua), and a
-- shared acquire finds an exclusive lease or another kind's mark here.

-- claim returns nil if the name is free or kind's, and else the error reply
-- 'WRONGKIND <the kind it is>' ('lease' for an exclusive lease).
local function claim(lease, kind)
  local cur = redis.call('GET', lease)
  if not cur or cur == '\1' .. kind then
    return nil
  end
  if string.byte(cur, 1) == 1 then
    return redis.error_reply('WRONGKIND ' .. string.sub(cur, 2))
  end
  return redis.error_reply('WRONGKIND lease')
end

-- mark makes the name kind's for at least ms more, if it is free or
-- kind's already (never another's lease, whose TTL it would lengthen).
local function mark(lease, kind, ms)
  local m = '\1' .. kind
  if not redis.call('SET', lease, m, 'NX', 'PX', ms) and redis.call('GET', lease) == m then
    grow(lease, ms)
  end
end

-- unmark frees the name of kind's mark when none of its leases is held
-- (held is false) and nobody waits in queues (a list of queue keys).
local function unmark(lease, kind, held, queues)
  if held or redis.call('EXISTS', unpack(queues)) > 0 then
    return
  end
  if redis.call('GET', lease) == '\1' .. kind then
    redis.call('DEL', lease)
  end
end
