-- counter: read a fence counter. Reads only.
-- Go: Client.LastFence and Client.ScanFences in fence.go (counterValue).
--
-- KEYS[1]  a fence counter
--
-- Returns {value}: the counter's value as Redis holds it, a string, '0' if
-- it does not exist. Go checks it (a decimal integer that INCR counts
-- from), not Lua: tonumber would read '0x10' as 16 and '1.5' as 1, and
-- round above 2^53.
return {redis.call('GET', KEYS[1]) or '0'}
