-- inspect: read what Redis holds for one resource, at one moment, of every
-- kind of lease. Reads only. Go: Client.inspect in admin.go.
--
-- KEYS[1] lease    <prefix>{<resource>}:lease     KEYS[2] fence <prefix>{<t>}:fences
-- KEYS[3] queue, KEYS[4] alive                   the waiters (see queue.lua)
-- KEYS[5] permits, KEYS[6] holders                a semaphore (see semaphore.lua)
-- KEYS[7] writer, KEYS[8] readers, KEYS[9] readinfo, KEYS[10] readq
--                                                 read/write leases (see rw_read.lua)
--
-- Returns {value, pttl, counter, waiters, permits, holders}: the lease value
-- ('' if none; the mark '\1<kind>' of the kind of lease that holds the name,
-- when not an exclusive lease: see queue.lua) and its PTTL in ms (-2 if
-- none, -1 if it has no expiry), the
-- slot's fence counter as Redis holds it, a string ('0' if absent: Go
-- checks it, see counter.lua), the number of queued waiters (readers
-- included), the semaphore's number of permits (0 if none), and the live
-- holders of shared leases as {kind, permit, value, pttl} each: kind 'p' (a
-- permit), 'w' (the write lease) or 'r' (a read lease), value
-- "<owner>:<fence>[:<holder>]".
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('GET', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or '0'
local waiters = redis.call('ZCARD', KEYS[3]) + redis.call('ZCOUNT', KEYS[10], '(' .. now, '+inf')
local holders = {}
local live = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local v = redis.call('HGET', KEYS[6], live[i]) or ''
  table.insert(holders, {'p', tonumber(live[i]), v, tonumber(live[i + 1]) - now})
end
local w = redis.call('GET', KEYS[7])
if w then
  table.insert(holders, {'w', 0, w, redis.call('PTTL', KEYS[7])})
end
live = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local info = redis.call('HGET', KEYS[9], live[i]) or '0'
  table.insert(holders, {'r', 0, live[i] .. ':' .. info, tonumber(live[i + 1]) - now})
end
return {cur or '', redis.call('PTTL', KEYS[1]), counter, waiters,
  tonumber(redis.call('HGET', KEYS[6], 'n')) or 0, holders}
