-- lib/clock.lua: Redis's clock, the queue's virtual time, the members that order the queue,
-- and the counters (stats).
-- Relies on: keys.lua (K).

-- Redis's clock in whole microseconds, as a string. Lease expiries are kept in microseconds:
-- an integer parses and prints several times faster than a decimal fraction, which was the
-- costliest step of a dequeue.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6)
end

-- The clock plus us microseconds, as a score string (%d: an integer, printed exactly).
local function clock_plus(us)
  return string.format('%d', tonumber(clock()) + us)
end

local function task_id_of(member)
  return string.sub(member, TASK_ID_AT)
end

local function arrival_member(id)
  return FAIR_MARK .. string.format(COUNTER_FORMAT, redis.call('INCR', K.seq)) .. SEPARATOR .. id
end

local function front_member(id)
  local n = FRONT_BASE - redis.call('INCR', K.seq)
  return FRONT_MARK .. string.format(COUNTER_FORMAT, n) .. SEPARATOR .. id
end

local function current_vt()
  return tonumber(redis.call('GET', K.cvt) or '0')
end

local function count(stat, n)
  redis.call('HINCRBY', K.stats, stat, n)
end
