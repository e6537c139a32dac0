-- counter: read a fence counter. Reads only.
-- Go: Client.ScanFences in fence.go.
--
-- KEYS[1]  a fence counter
--
-- Returns its value, 0 if it does not exist; an error reply if it holds
-- something that is not an integer.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local n = tonumber(v)
if not n then
  return redis.error_reply('fence counter ' .. KEYS[1] .. ' holds a non-integer: ' .. v)
end
return n
