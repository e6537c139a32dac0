-- acquire_all: take the leases of several resources at once, all or none.
-- Model: model/redlease.pml, inline acquire_lua, per key; a change here is a change there (docs/MODEL.md).
-- (queue.lua is inserted at the line '--#queue'.) All keys must be in one
-- Redis Cluster hash slot (Redis refuses the script with CROSSSLOT
-- otherwise): for resources in several slots the client takes the leases
-- one by one in a global order instead.
-- Go: acquisition.attempt in grant.go.
--
-- KEYS[4i-3..4i]  for the i-th resource: lease, fence, queue and alive keys,
--                 as in acquire.lua (the fence keys are all the one slot's)
-- ARGV[1]  owner token, shared by the leases of this set
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  waiter timeout in ms: when > 0, queue the owner on a busy resource
-- ARGV[4]  '1' if this is not the acquire call's first attempt: the owner may
--          hold the leases already (a lost reply), or be queued
-- ARGV[5]  the owner's queue member, '<owner>/<client id>' (see queue.lua)
-- ARGV[6]  the lease values' tail, as acquire.lua's ARGV[5]; '' for none
--
-- Returns {1, fence1, fence2, ...} when every lease is ours (newly taken, or
-- already ours from an attempt whose reply was lost), each fence drawn from
-- the slot's counter; or {0, pttl, first, i, holder} when resource i is held
-- by another owner (nothing is taken then), as in acquire.lua; the error
-- reply 'WRONGKIND <kind>' when a name is another kind's (see queue.lua).
--#queue
local owner, member = ARGV[1], ARGV[5]
local mine = owner .. ':'
local n = #KEYS / 4
for i = 1, n do
  local cur = redis.call('GET', KEYS[4 * i - 3])
  if cur and string.byte(cur, 1) == 1 then -- another kind's (see queue.lua)
    return redis.error_reply('WRONGKIND ' .. string.sub(cur, 2))
  end
  if cur and string.sub(cur, 1, #mine) ~= mine then
    local queue, alive = KEYS[4 * i - 1], KEYS[4 * i]
    local timeout = tonumber(ARGV[3])
    if timeout > 0 then
      enqueue(queue, alive, member, timeout)
      if string.byte(cur, -1) ~= 0 then
        redis.call('SET', KEYS[4 * i - 3], cur .. '\0', 'KEEPTTL') -- waited for (see acquire.lua)
      end
    end
    local head = 0
    if timeout > 0 and first(queue, alive) == member then
      head = 1
    end
    return {0, redis.call('PTTL', KEYS[4 * i - 3]), head, i, string.match(cur, '^[^:]*:%d+:([^%z]*)') or ''}
  end
end
local out = {1}
for i = 1, n do
  local lease = KEYS[4 * i - 3]
  local cur = redis.call('GET', lease)
  local fence
  if ARGV[4] == '1' and redis.call('ZREM', KEYS[4 * i - 1], member) == 1 then
    redis.call('HDEL', KEYS[4 * i], member)
  end
  if cur then
    redis.call('PEXPIRE', lease, ARGV[2])
    fence = tonumber(string.match(cur, '^%d+', #mine + 1))
  else
    fence = redis.call('INCR', KEYS[4 * i - 2])
    local value = mine .. string.format('%d', fence)
    if ARGV[6] ~= '' then
      value = value .. ':' .. ARGV[6]
    end
    if redis.call('EXISTS', KEYS[4 * i - 1]) == 1 then
      value = value .. '\0' -- others wait: its release must wake them (see acquire.lua)
    end
    redis.call('SET', lease, value, 'PX', ARGV[2])
  end
  out[i + 1] = fence
end
return out
