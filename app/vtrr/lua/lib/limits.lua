-- lib/limits.lua: a partition's limits: their text in the limits hash (limits_text, read by
-- limits_of alone), the weight its items in flight still hold, and whether it may start one
-- more item (may_start).
-- Relies on: keys.lua (K).

-- A partition's limits as the limits hash holds them: "<n> <held> <rate>" (app/vtrr/limits.py
-- writes the same three numbers as limit.lua's ARGV). limits_of is the one reader of this text.
local function limits_text(n, held, rate)
  return n .. ' ' .. held .. ' ' .. rate
end

-- A partition's limits, or nil when it has none: {n = most in flight, held = most weight its
-- items in flight may still hold, rate = weight an item in flight uses up a second}; -1: none.
local function limits_of(p)
  local raw = redis.call('HGET', K.limits, p)
  if not raw then return nil end
  local n, held, rate = string.match(raw, '^(%S+) (%S+) (%S+)$')
  return {n = tonumber(n), held = tonumber(held), rate = tonumber(rate)}
end

-- What each of p's items in flight still holds at now (us): its weight less what it has used
-- since its lease began, never below 0; and their sum. An item of several cards uses its
-- weight up on each at once: it counts as that many items, each of its weight over its size.
local function still_held(p, lim, now)
  local left, sum = {}, 0
  for _, v in ipairs(redis.call('HVALS', K.live .. p)) do
    local start, w, z = string.match(v, '^(%d+) (%S+) ?(%d*)$')
    local cards = tonumber(z) or 1
    local l = math.max(0, tonumber(w) / cards - (now - tonumber(start)) * lim.rate / 1e6)
    for _ = 1, cards do
      left[#left + 1] = l
      sum = sum + l
    end
  end
  return left, sum
end

-- The least microseconds after which what `left` holds, each running down at rate a second,
-- sums to at most target (>= 0): a bisection over whole microseconds, exact at its end.
local function run_down(left, rate, target)
  local lo, hi = 0, 0
  for _, l in ipairs(left) do hi = math.max(hi, math.ceil(l / rate * 1e6)) end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local sum = 0
    for _, l in ipairs(left) do sum = sum + math.max(0, l - mid * rate / 1e6) end
    if sum <= target then hi = mid else lo = mid + 1 end
  end
  return lo
end

local HELD_SLACK = 1e-9  -- what float sums may be off by
local WAKE_BATCH = 16  -- most partitions a dequeue that found nothing wakes
local RECHECKS = 8  -- most items one lease may find it must park again (their group's doing)

-- Whether limited partition p may start one more item, of weight w and size cards (nil: 1), at
-- now (us), its items in flight counted by the cards they hold; when only
-- the weight it holds stops it and that runs down, also when it may (us). An item starts
-- alone whatever its weight: nothing waits forever for a limit lowered below it.
local function may_start(p, lim, w, now, size)
  local running = redis.call('HLEN', K.live .. p)
  if lim.n >= 0 and running > 0 then
    -- what its items in flight hold counts in cards: an item of several holds its size
    running = 0
    for _, v in ipairs(redis.call('HVALS', K.live .. p)) do
      running = running + tonumber(string.match(v, '^%S+ %S+ (%S+)$') or '1')
    end
  end
  size = size or 1
  if lim.n >= 0 and (running >= lim.n or (running > 0 and running + size > lim.n)) then
    return false, nil
  end
  if lim.held < 0 or running == 0 then return true, nil end
  local left, sum = still_held(p, lim, now)
  local target = lim.held - w
  if sum <= target + HELD_SLACK then return true, nil end
  if target < 0 or lim.rate <= 0 then return false, nil end
  return false, now + run_down(left, lim.rate, target)
end
