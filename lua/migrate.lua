-- migrate: fold a per-resource fence counter of an earlier version into the
-- counter of the resource's hash slot, so that no fence goes back.
-- Go: Client.MigrateFences in fence.go.
--
-- KEYS[1]  the old counter  <prefix>{<resource>}:fence
-- KEYS[2]  the slot's counter  <prefix>{<t>}:fences  (the same slot)
--
-- Sets the slot's counter to the old one's value if that is larger, deletes
-- the old counter, and returns the slot's counter afterwards (0 if neither
-- exists). An error reply if either holds something that is not an integer.
local old = redis.call('GET', KEYS[1])
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if not cur then
  return redis.error_reply('fence counter ' .. KEYS[2] .. ' holds a non-integer')
end
if old then
  local n = tonumber(old)
  if not n then
    return redis.error_reply('fence counter ' .. KEYS[1] .. ' holds a non-integer: ' .. old)
  end
  if n > cur then
    redis.call('SET', KEYS[2], old)
    cur = n
  end
  redis.call('DEL', KEYS[1])
end
return cur
