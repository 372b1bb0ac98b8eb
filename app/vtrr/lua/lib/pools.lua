-- lib/pools.lua: consumers of kinds (a mixed fleet's classes of card). An item that only some
-- kinds of consumer may take waits in the line of its pool, the set of those kinds, instead of
-- queue; a consumer of a kind leases the first item among queue and the lines of the pools
-- that name its kind, so it never meets an item it cannot take and never passes one it can.
-- Relies on: keys.lua (K), clock.lua (current_vt).
--
-- A pool's name is its kinds, sorted and joined by POOL_JOIN (the Python builds it: pool.py).
-- Each kind keeps a clock, the start of the last pooled item a consumer of it leased, and an
-- item of a pool starts from the lowest clock of its kinds: a newcomer's item leaves at the next
-- release of any consumer that may take it, however far the other kinds' clocks have run.
-- A consumer with no kind (K.kclock is then K.cvt itself) leases from queue alone, as before
-- pools: a queue whose items name no kinds costs what it did.

-- The line an item of pool (false or nil: none) waits in while it may start.
local function line(pool)
  if pool then return K.pool .. pool end
  return K.queue
end

-- The pool of item id, false when it has none.
local function pool_of(id)
  return redis.call('HGET', K.item .. id, F_POOL)
end

local function line_of(id)
  return line(pool_of(id))
end

local function kinds_of(pool)
  local kinds = {}
  for k in string.gmatch(pool, POOL_KIND) do kinds[#kinds + 1] = k end
  return kinds
end

-- Kind k's clock; one that has leased nothing since the queue drained follows the queue's.
local function kind_clock(k)
  return tonumber(redis.call('GET', K.kind .. k .. KIND_CLOCK) or current_vt())
end

-- The virtual time an item of pool starts from at the earliest: the lowest clock of its kinds.
local function pool_clock(pool)
  if not pool then return current_vt() end
  local low
  for _, k in ipairs(kinds_of(pool)) do
    local c = kind_clock(k)
    if not low or c < low then low = c end
  end
  return low
end

-- This call's consumer leased an item that started at score: the queue's clock, and where the
-- item has a pool (so the consumer a kind among the pool's: kinds), its kind's clock, never go
-- back.
local function clocks_reach(score, pooled)
  local s = tonumber(score)
  if s > current_vt() then redis.call('SET', K.cvt, score) end
  if pooled and K.kclock ~= K.cvt then
    local c = redis.call('GET', K.kclock)
    if not c or s > tonumber(c) then redis.call('SET', K.kclock, score) end
  end
end

-- The first use of a pool since the queue drained: its kinds learn that they may take from it.
local function open_pool(pool)
  if redis.call('SADD', K.pools, pool) == 1 then
    for _, k in ipairs(kinds_of(pool)) do
      redis.call('SADD', K.kinds, k)
      redis.call('SADD', K.kind .. k .. KIND_POOLS, pool)
    end
  end
end

-- The lines this call's consumer leases from: queue, and for a consumer of a kind its pools'.
local function my_lines()
  local lines = {K.queue}
  if K.kclock ~= K.cvt then
    for _, pool in ipairs(redis.call('SMEMBERS', K.kpools)) do
      lines[#lines + 1] = K.pool .. pool
    end
  end
  return lines
end

-- The first item among lines (lowest score, then member): {member, score} and its line, or nil.
local function first_of(lines)
  local best, from, low
  for _, l in ipairs(lines) do
    local head = redis.call('ZRANGE', l, 0, 0, 'WITHSCORES')
    if head[1] then
      local s = tonumber(head[2])
      if not best or s < low or (s == low and head[1] < best[1]) then
        best, from, low = head, l, s
      end
    end
  end
  return best, from
end

-- How many items wait in lines.
local function waiting_in(lines)
  local n = 0
  for _, l in ipairs(lines) do n = n + redis.call('ZCARD', l) end
  return n
end

-- Every line: queue and each pool's.
local function all_lines()
  local lines = {K.queue}
  for _, pool in ipairs(redis.call('SMEMBERS', K.pools)) do lines[#lines + 1] = K.pool .. pool end
  return lines
end

-- The lowest clock: an idle partition is forgotten only once every clock has passed it.
local function low_clock()
  local low = current_vt()
  for _, k in ipairs(redis.call('SMEMBERS', K.kinds)) do
    local c = redis.call('GET', K.kind .. k .. KIND_CLOCK)
    if c and tonumber(c) < low then low = tonumber(c) end
  end
  return low
end

-- The queue drained: the pools and the kinds' clocks start again (their triggers stay counted).
local function close_pools()
  for _, k in ipairs(redis.call('SMEMBERS', K.kinds)) do
    redis.call('DEL', K.kind .. k .. KIND_CLOCK, K.kind .. k .. KIND_POOLS)
  end
  redis.call('DEL', K.pools, K.kinds)
end

-- The lowest score queued in any line, or where an item of pool would start when none is:
-- front placement puts an item there, ahead of everything any consumer may take.
local function front_score(pool)
  local head = first_of(all_lines())
  if head then return tonumber(head[2]) end
  return pool_clock(pool)
end
