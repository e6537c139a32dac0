-- resume: take up a held lease in another process, by its token: only while
-- the token's owner still holds it with the token's fence, and then renew
-- it to the full TTL in the same step, so that the lease never goes
-- unrenewed between the check and the renewal. (queue.lua is inserted at
-- '--#queue', for its clock, grow and mark.)
-- Go: Client.Resume in resume.go.
-- Model: model/redlease.pml, inline resume_lua; a change here is a change there (docs/MODEL.md).
--
-- KEYS[1] lease    <prefix>{<resource>}:lease     an exclusive lease "<owner>:<fence>[:<holder>]",
--                  or the name's kind (see queue.lua)
-- KEYS[2] permits, KEYS[3] holders                a semaphore's (see semaphore.lua)
-- KEYS[4] writer   <prefix>{<resource>}:writer    the write lease (see rw_write.lua)
-- KEYS[5] readers, KEYS[6] readinfo               the read leases (see rw_read.lua)
-- ARGV[1] the kind: 'x' an exclusive lease, 'p' a semaphore's permit, 'r' a
--         read lease, 'w' the write lease
-- ARGV[2] owner token   ARGV[3] the fence, in decimal   ARGV[4] TTL in ms
-- ARGV[5] the permit, for 'p'; absent for the other kinds
-- ARGV[6] the semaphore's number of permits, for 'p'; absent for the other kinds
--
-- The checks are those of the kind's refresh script (refresh.lua,
-- semaphore_refresh.lua, rw_read_refresh.lua, rw_write_refresh.lua), with
-- the fence besides the owner, and so are the renewals.
--
-- Returns {1, value} when the lease was the owner's with that fence and
-- unexpired, and now has the full TTL again: value is "<owner>:<fence>[:<holder>]"
-- as Redis keeps it (an exclusive lease's may end with the NUL byte of
-- acquire.lua). {0} when it has expired, was released, or is another
-- owner's or another fence's (nothing is written then). {-1, n} for a
-- permit that is the owner's with that fence while the semaphore has n
-- permits, not ARGV[6] (nothing is written then).
--#queue
local kind, owner, fence, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- holds reports whether v begins with head and then ends, or goes on with
-- the holder description or the NUL mark: '<owner>:7' is not '<owner>:71'.
local function holds(v, head)
  if not v or string.sub(v, 1, #head) ~= head then
    return false
  end
  local after = string.sub(v, #head + 1, #head + 1)
  return after == '' or after == ':' or after == '\0'
end

local head = owner .. ':' .. fence
if kind == 'x' or kind == 'w' then
  local key = KEYS[1]
  if kind == 'w' then
    key = KEYS[4]
  end
  local cur = redis.call('GET', key)
  if not holds(cur, head) then
    return {0}
  end
  redis.call('PEXPIRE', key, ttl)
  if kind == 'w' then
    mark(KEYS[1], 'read/write', ttl)
  end
  return {1, cur}
end

if kind == 'p' then
  local p = ARGV[5]
  local v = redis.call('HGET', KEYS[3], p)
  local exp = tonumber(redis.call('ZSCORE', KEYS[2], p))
  if not (holds(v, head) and exp and exp > now_ms()) then
    return {0}
  end
  local n = tonumber(redis.call('HGET', KEYS[3], 'n'))
  if n ~= tonumber(ARGV[6]) then
    return {-1, n or 0}
  end
  redis.call('ZADD', KEYS[2], 'XX', now_ms() + tonumber(ttl), p)
  grow(KEYS[2], ttl)
  grow(KEYS[3], ttl)
  mark(KEYS[1], 'semaphore', ttl)
  return {1, v}
end

-- 'r': the readers hold owner -> expiry, readinfo owner -> '<fence>[:<holder>]'.
local exp = tonumber(redis.call('ZSCORE', KEYS[5], owner))
local info = redis.call('HGET', KEYS[6], owner)
if not (exp and exp > now_ms() and holds(info, fence)) then
  return {0}
end
redis.call('ZADD', KEYS[5], 'XX', now_ms() + tonumber(ttl), owner)
grow(KEYS[5], ttl)
grow(KEYS[6], ttl)
mark(KEYS[1], 'read/write', ttl)
return {1, owner .. ':' .. info}
