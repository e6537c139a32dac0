-- migrate: fold a per-resource fence counter of an earlier version into the
-- counter of the resource's hash slot, so that no fence goes back.
-- Go: Client.MigrateFences in fence.go.
--
-- KEYS[1]  the old counter  <prefix>{<resource>}:fence
-- KEYS[2]  the slot's counter  <prefix>{<t>}:fences  (the same slot)
--
-- Sets the slot's counter to the old one's value if that is larger, deletes
-- the old counter, and returns the slot's counter afterwards, in decimal (a
-- string: exact above 2^53), '0' if neither exists. An error reply, and
-- nothing changed, if either holds something INCR does not count from (not
-- a decimal integer in 0..2^63-1 without sign or leading zero); the values
-- are never compared as Lua numbers (tonumber reads '0x10' as 16 and rounds
-- above 2^53).

-- less compares two such integers: by length, then 10 and 9 digits at a
-- time (exact as doubles); count reports whether v is one.
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  local ha, hb = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ha ~= hb then
    return ha < hb
  end
  return (tonumber(string.sub(a, 11)) or 0) < (tonumber(string.sub(b, 11)) or 0)
end
local function count(v)
  return v == '0' or string.find(v, '^[1-9]%d*$') ~= nil and #v <= 19 and not less('9223372036854775807', v)
end

local old = redis.call('GET', KEYS[1])
local cur = redis.call('GET', KEYS[2]) or '0'
if not count(cur) then
  return redis.error_reply('fence counter ' .. KEYS[2] .. ' holds a non-integer: ' .. cur)
end
if old then
  if not count(old) then
    return redis.error_reply('fence counter ' .. KEYS[1] .. ' holds a non-integer: ' .. old)
  end
  if less(cur, old) then
    redis.call('SET', KEYS[2], old)
    cur = old
  end
  redis.call('DEL', KEYS[1])
end
return cur
