-- lib/reserve.lua: items of several cards (a size above 1): which of them have their turn, and
-- the reservation each keeps on one host (tick.lua, and a lease that meets one at the head of
-- its line: next_item.lua; docs/vtrr.md, "Items of several cards").
-- Relies on: every file before it (cards.lua for the fleet's keys).

local WALK = 16  -- most items of each line a slotted consumer's lease or tick looks at

-- The first entries of lines in fair order, at most `most` of each: {member, score, line}.
local function walk(lines, most)
  local all = {}
  for _, l in ipairs(lines) do
    local got = redis.call('ZRANGE', l, 0, most - 1, 'WITHSCORES')
    for i = 1, #got, 2 do all[#all + 1] = {got[i], tonumber(got[i + 1]), l} end
  end
  table.sort(all, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  return all
end

-- The live cards of kind on host, sorted by name: {names}, and their states (cards.lua).
local function cards_of(host, kind, now, ttl)
  local raw = redis.call('HGETALL', slots_key(host))
  local names = {}
  for i = 1, #raw, 2 do
    local k, seen = string.match(raw[i + 1], '^(%S+) (%S+)')
    if k == kind and now - tonumber(seen) <= ttl then names[#names + 1] = raw[i] end
  end
  table.sort(names)
  local states = {}
  if #names > 0 then
    local keys = {}
    for i, c in ipairs(names) do keys[i] = card_key(host, c) end
    local got = redis.call('MGET', unpack(keys))
    for i = 1, #names do states[i] = card_state(got[i]) end
  end
  return names, states
end

-- The kinds of card an item of pool may use: its kinds, or (no pool) every kind on host.
local function kinds_for(pool, host)
  if pool then return kinds_of(pool) end
  local seen, kinds = {}, {}
  local raw = redis.call('HVALS', slots_key(host))
  for _, v in ipairs(raw) do
    local k = string.match(v, '^(%S+)')
    if not seen[k] then seen[k], kinds[#kinds + 1] = true, k end
  end
  return kinds
end

-- When the size cards of one kind on host that free first are all free, and which they are:
-- start (us), {cards}; nil where host has too few. A card frees at the declared end of what
-- holds it (never before now).
local function soonest(host, g, now, ttl)
  local best, chosen
  for _, kind in ipairs(kinds_for(g.pool, host)) do
    local names, states = cards_of(host, kind, now, ttl)
    if #names >= g.size then
      local frees = {}
      for i, c in ipairs(names) do
        local at = now
        if states[i] then at = math.max(now, states[i].ends) end
        frees[i] = {at, c}
      end
      table.sort(frees, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
      local start = frees[g.size][1]
      if not best or start < best then
        best, chosen = start, {}
        for i = 1, g.size do chosen[i] = frees[i][2] end
      end
    end
  end
  return best, chosen
end

-- Keep g's reservation: where it has none, or it is past its start by grace, on the host whose
-- cards free first (its own host among them, so never onto a later one); else on its host,
-- its start recomputed (never later than it was: ends are limits) and its cards the soonest
-- there. taken: the hosts kept for gangs before g this call (one reservation per host).
local function keep_reservation(g, now, ttl, grace, taken)
  local current = g.resv and resv_state(redis.call('GET', resv_key(g.resv)))
  if current and current.id ~= g.id then current = nil end
  local due = not current or now > current.start + grace
  local best
  if current and not due then
    local start, cards = soonest(g.resv, g, now, ttl)
    if start then best = {host = g.resv, start = math.min(start, current.start), cards = cards} end
  end
  if not best then
    for _, h in ipairs(redis.call('SMEMBERS', K.fleet .. 'hosts')) do
      local r = resv_state(redis.call('GET', resv_key(h)))
      local other = r and r.id ~= g.id
      if not taken[h] and not other then
        local start, cards = soonest(h, g, now, ttl)
        if start and (not best or start < best.start or (start == best.start and h == g.resv)) then
          best = {host = h, start = start, cards = cards}
        end
      end
    end
  end
  if not best then return end  -- no host has enough cards of one kind: it waits
  taken[best.host] = true
  local placed = now
  if current and best.host == g.resv and not due then placed = current.placed end
  if g.resv and g.resv ~= best.host and current then redis.call('DEL', resv_key(g.resv)) end
  redis.call('SET', resv_key(best.host), resv_text(g.id, best.start, placed, best.cards))
  redis.call('HSET', item_key(g.id), F_RESV, best.host)
end

-- The items of several cards whose turn has come among lines: those ahead of the first item of
-- one card, in fair order, at most WALK of each line looked at; an item whose partition's
-- limits hold it back now (its cards counted) is passed over.
local function at_turn(lines, now)
  local turn = {}
  for _, e in ipairs(walk(lines, WALK)) do
    local id = task_id_of(e[1])
    local f = redis.call('HMGET', item_key(id), F_SIZE, F_SPAN, F_POOL, F_RESV, F_PARTITION,
                         F_LIMITED, F_WEIGHT)
    if not f[1] then break end
    local g = {id = id, member = e[1], score = e[2], line = e[3], size = tonumber(f[1]),
               span = f[2] and tonumber(f[2]), pool = f[3], resv = f[4], p = f[5],
               w = f[7], lim = f[6] and limits_of(f[5])}
    if not g.lim or may_start(g.p, g.lim, tonumber(g.w), now, g.size) then turn[#turn + 1] = g end
  end
  return turn
end

-- Let go of the reservations of this queue's items that this consumer sees but whose turn has
-- gone (an item of one card is ahead of them again: put back, released, promoted, or a new
-- partition's), so that no card is kept for an item that is not next: turn, the items whose
-- turn has come (at_turn); lines, this consumer's.
local function drop_stale(turn, lines)
  local next_up, seen = {}, {}
  for _, g in ipairs(turn) do next_up[g.id] = true end
  for _, l in ipairs(lines) do seen[l] = true end
  for _, h in ipairs(redis.call('SMEMBERS', K.fleet .. 'hosts')) do
    local r = resv_state(redis.call('GET', resv_key(h)))
    if r and not next_up[r.id] and r.item == item_key(r.id) and seen[line_of(r.id)] then
      redis.call('DEL', resv_key(h))
      redis.call('HDEL', r.item, F_RESV)
    end
  end
end

-- What the fleet's ticks last said of reservations (tick.lua keeps it): {ttl, grace} in us, or
-- nil where they keep none.
local function fleet_config()
  local raw = redis.call('GET', K.fleet .. 'config')
  if not raw then return nil end
  local ttl, grace, on = string.match(raw, '^(%S+) (%S+) (%S+)$')
  if on ~= '1' then return nil end
  return {ttl = tonumber(ttl), grace = tonumber(grace)}
end

-- A lease met an item of several cards at the head of lines: each one whose turn has come and
-- that keeps no reservation yet gets one now, before the lease may pass it (so that no item
-- of one card starts on the cards that free first between its turn and the next tick).
local function reserve_turn(lines, t)
  local cfg = fleet_config()
  if not cfg then return end
  local now, taken = tonumber(t), {}
  for _, g in ipairs(at_turn(lines, now)) do
    local r = g.resv and resv_state(redis.call('GET', resv_key(g.resv)))
    if not (r and r.id == g.id) then keep_reservation(g, now, cfg.ttl, cfg.grace, taken) end
  end
end
