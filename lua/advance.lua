-- advance: move a fence counter forward to at least a given value.
-- Model: model/redlease.pml, inline advance_lua; a change here is a change there (docs/MODEL.md).
-- Go: Client.AdvanceFence in fence.go.
--
-- KEYS[1]  fence key  <prefix>{<t>}:fences  a hash slot's counter, never expires
-- ARGV[1]  the least value the counter may have afterwards, 1..2^53
--
-- Returns the counter's value afterwards, an integer: ARGV[1] if the counter
-- was below it or absent (it is then set, without a TTL), else the counter
-- unchanged. The counter never moves back. An error reply if the key holds
-- something that is not an integer.
local cur = redis.call('GET', KEYS[1])
if cur then
  local n = tonumber(cur)
  if not n or n ~= math.floor(n) then
    return redis.error_reply('fence counter ' .. KEYS[1] .. ' holds a non-integer: ' .. cur)
  end
  if n >= tonumber(ARGV[1]) then
    return n
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
