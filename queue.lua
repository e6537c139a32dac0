-- queue.lua: shared functions, prepended to acquire.lua and release.lua.
--
-- The waiters of one resource queue in Redis, so that a release wakes exactly
-- one of them (no stampede) and, for fair leases, so that the lease goes to
-- waiters in arrival order:
--   <prefix>{<resource>}:queue  ZSET  owner -> arrival ticket (the order)
--   <prefix>{<resource>}:alive  HASH  owner -> deadline, server ms; a waiter
--                                     that stops refreshing it is dropped
-- Both keys expire when no waiter has refreshed them for a waiter timeout.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- first returns the first live waiter, dropping dead ones ahead of it.
local function first(queue, alive)
  local now
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    now = now or now_ms()
    local deadline = tonumber(redis.call('HGET', alive, head))
    if deadline and deadline > now then
      return head
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', alive, head)
  end
end

-- enqueue adds owner at the end of the queue unless it is already in it, and
-- keeps it alive for timeout ms.
local function enqueue(queue, alive, owner, timeout)
  if not redis.call('ZSCORE', queue, owner) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
    redis.call('ZADD', queue, (tonumber(last) or 0) + 1, owner)
  end
  redis.call('HSET', alive, owner, now_ms() + timeout)
  for _, key in ipairs({queue, alive}) do
    if redis.call('PTTL', key) < timeout then
      redis.call('PEXPIRE', key, timeout)
    end
  end
end

-- wake tells the first live waiter, by its owner token on the resource's
-- channel, that the lease is free. sharded is '1' on Redis Cluster, where the
-- channel is a shard channel of the resource's slot; SPUBLISH needs Redis 7,
-- and an older cluster gets no wake-up (waiters then retry on their timers).
local function wake(queue, alive, channel, sharded)
  local head = first(queue, alive)
  if head then
    if sharded == '1' then
      redis.pcall('SPUBLISH', channel, head)
    else
      redis.call('PUBLISH', channel, head)
    end
  end
end
