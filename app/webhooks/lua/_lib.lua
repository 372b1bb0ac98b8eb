-- _lib.lua: what the sender's scripts share; prepended to each of them.
-- The schedule (a ZSET) holds ended jobs whose webhook is to be sent, scored in whole
-- milliseconds of Redis's clock: when the next delivery is due, or, while a sender holds one,
-- when its hold runs out. Every sender reads the one clock, so their own clocks need not agree.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A score as Redis should store it: whole, never in exponent form.
local function whole(ms)
  return string.format('%d', ms)
end
