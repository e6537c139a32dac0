-- advance: move a fence counter forward to at least a given value.
-- Model: model/redlease.pml, inline advance_lua; a change here is a change there (docs/MODEL.md).
-- Go: Client.AdvanceFence in fence.go.
--
-- KEYS[1]  fence key  <prefix>{<t>}:fences  a hash slot's counter, never expires
-- ARGV[1]  the least value the counter may have afterwards, 1..2^53, in decimal
--
-- Returns the counter's value afterwards, in decimal (a string: exact above
-- 2^53, where a Lua number is not): ARGV[1] if the counter was below it or
-- absent (it is then set, without a TTL), else the counter unchanged. The
-- counter never moves back.
--
-- A counter that INCR cannot count from, or that counts to a fence a lease
-- cannot carry (anything but a decimal integer in 0..2^63-1 without sign or
-- leading zero: '0x10', '1.5', '-3', ' 7'), is set to ARGV[1] too, so the
-- next acquire works: no fence was drawn from it (every INCR on it failed,
-- or would give a fence of 0 or below), and ARGV[1] is the repair's bound
-- (the newest fence a guard accepted). It is never compared as a Lua number:
-- tonumber reads '0x10' as 16 and rounds above 2^53.
local cur = redis.call('GET', KEYS[1])

-- less compares two decimal integers without sign or leading zero, at most
-- 19 digits: by length, then 10 and 9 digits at a time (exact as doubles).
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

if cur and string.find(cur, '^[1-9]%d*$') and #cur <= 19 and not less('9223372036854775807', cur)
    and not less(cur, ARGV[1]) then
  return cur
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
