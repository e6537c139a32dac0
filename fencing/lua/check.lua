-- fence check: the tail of every fenced script. Go prepends the body as
-- Model: model/redlease.pml, inline guard_write; a change here is a change there (docs/MODEL.md).
--
--   local function body(KEYS, ARGV, FENCE, OWNER) <body> end
--
-- and this runs it only if the caller's fence is not older than the newest
-- recorded for the data, having recorded the caller's fence first.
--
-- KEYS[1]  fence record  hash {fence, owner}: the newest fence accepted for the
--          data and its owner; no TTL. In the data key's hash slot.
-- KEYS[2…] the body's keys; the body sees them as KEYS[1…]
-- ARGV[1]  the caller's fence, a decimal integer in 1..2^53; the body's FENCE
-- ARGV[2]  the caller's owner token; the body's OWNER
-- ARGV[3…] the body's arguments; the body sees them as ARGV[1…]
--
-- Accepts iff no fence was recorded yet, or fence > newest, or fence == newest
-- and owner == newest's owner (after a failover two holders can draw the same
-- fence; one holder may write several times). Refusing, it changes nothing
-- and returns {0, newest, newest's owner}. Accepting, it returns {1, reply}
-- with the body's reply (just {1} if that is nil), or the body's error reply
-- as it is. An error reply if the record holds a fence that is not a number.
local rec = redis.call('HMGET', KEYS[1], 'fence', 'owner')
local fence, newest = tonumber(ARGV[1]), tonumber(rec[1])
if rec[1] and not newest then
  return redis.error_reply('fence record ' .. KEYS[1] .. ' holds a non-number: ' .. tostring(rec[1]))
end
if newest and (fence < newest or (fence == newest and ARGV[2] ~= rec[2])) then
  return {0, rec[1], rec[2] or ''}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'owner', ARGV[2])
local reply = body({unpack(KEYS, 2)}, {unpack(ARGV, 3)}, fence, ARGV[2])
if type(reply) == 'table' and reply.err then
  return reply
end
return {1, reply}
