-- lib/leases.lua: a lease's life: whether a token holds it, its start (lease_queued), the ack
-- (ack_item; ack_unlimited, the fair path's) and the credit of what an item did not use
-- (credit_item).
-- Relies on: keys.lua (K), clock.lua, partitions.lua, limits.lua, parking.lua, usage.lua.

-- Whether token is the item's current lease: every fenced operation starts here.
local function holds_lease(id, token)
  return redis.call('HGET', item_key(id), F_LEASE) == token
end

-- The queue member of an item that is queued (not leased), else nil.
local function queued_member(id)
  local f = redis.call('HMGET', item_key(id), F_MEMBER, F_LEASE)
  if f[1] and not f[2] then return f[1] end
  return nil
end

-- Lease a queued item that has just left queue (or is about to: take): item id of partition
-- p, weight w, index entry `entry`, p's limits lim (nil: none), at t (Redis time, us, a string),
-- for lease_us; held, the card keys it takes (F_HELD: lib/cards.lua), if any. Returns its lease
-- expiry, as a score string.
local function lease_queued(id, p, w, entry, lim, token, t, lease_us, held)
  unindex_item(entry)
  partition_queued(p, -1)
  weigh(w, -1)
  if held then
    redis.call('HSET', item_key(id), F_LEASE, token, F_HELD, held)
  else
    redis.call('HSET', item_key(id), F_LEASE, token)
  end
  local expiry = string.format('%d', tonumber(t) + lease_us)
  redis.call('ZADD', K.inflight, expiry, id)
  if lim then
    redis.call('HDEL', K.reps, p)
    redis.call('HSET', K.live .. p, id, t .. ' ' .. w)
    refresh(p, lim, tonumber(t))
  end
  return expiry
end

-- A leased item's end, its lease checked: out of flight, its hash (key) gone, and what it used
-- remembered where its queue keeps usage (F_HALF_LIFE: half_life), and the cards it held free
-- (held: its F_HELD). A credit since its last
-- charge remembered that already, under this lease or one before a put_back or release, which
-- charge nothing (credited); else it used its weight w.
local function finish(id, key, p, w, half_life, credited, price, held)
  redis.call('ZREM', K.inflight, id)
  free_cards(held)
  redis.call('DEL', key)
  if half_life and not credited then
    remember_use(p, tonumber(w) * (tonumber(price) or 1), tonumber(half_life), tonumber(clock()))
  end
end

-- Finish a leased item for the holder of its current lease (ack_limited.lua, ack_lease.lua,
-- step.lua): 1, or 0 when the token is stale; and whether its partition has limits.
local function ack_item(id, token)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_LEASE, F_LIMITED, F_PARTITION, F_HALF_LIFE, F_CREDITED,
                       F_WEIGHT, F_PRICE, F_HELD)
  if f[1] ~= token then return 0 end
  finish(id, key, f[3], f[6], f[4], f[5], f[7], f[8])
  if f[2] then
    landed(f[3], id)
    refresh(f[3], limits_of(f[3]), tonumber(clock()))
  end
  return 1, f[2] ~= false
end

-- ack_item for the item of a partition without limits, by an operation that names none of
-- their keys (ack.lua: the fair path's ack, which then costs what it did before limits): 1, 0
-- when the token is stale, or nil, nothing done, when the item's partition has limits. The
-- fields that only usage needs are read only where the item keeps usage.
local function ack_unlimited(id, token)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_LEASE, F_LIMITED, F_HALF_LIFE, F_HELD)
  if f[1] ~= token then return 0 end
  if f[2] then return nil end
  local used = {}
  if f[3] then used = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_CREDITED, F_PRICE) end
  finish(id, key, used[1], used[2], f[3], used[3], used[4], f[4])
  return 1
end

-- Charge partition p for the extra virtual time an item used beyond its weight (it ran on a
-- dearer consumer than it was charged for: credit.lua), credit's mirror: its fairly placed
-- queued items move back by extra, one shift for all so their order stays, and its virtual
-- time moves on by it, so that its backlog and its next items pay it. Where it has more than
-- `most` of them queued (or items queued before the index), none moves, since the first ones
-- would pass the rest: only its next items pay. Returns -extra, as a string; '0' in a queue
-- with nothing queued, whose clocks start again anyway (reset_if_drained).
local function charge_more(key, token, p, extra, used, half_life, lim, most)
  redis.call('HSET', key, F_CREDITED, token)
  if half_life then remember_use(p, used, tonumber(half_life), tonumber(clock())) end
  if redis.call('HLEN', K.pqueued) == 0 then return '0' end
  local queued = tonumber(redis.call('HGET', K.pqueued, p) or '0')
  local prefix = items_prefix(p)
  local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                          '(' .. prefix .. AFTER_FAIR_MARK, 'LIMIT', 0, most + 1)
  local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. AFTER_FAIR_MARK)
  if #fair <= most and indexed == queued then
    for _, entry in ipairs(fair) do
      local member = string.sub(entry, #prefix + 1)
      local zset = holder(p, member, lim)
      local score = redis.call('ZSCORE', zset, member)
      if score then redis.call('ZADD', zset, tonumber(score) + extra, member) end
    end
  end
  local vt = math.max(tonumber(redis.call('HGET', K.pvt, p) or '0'), low_clock()) + extra
  redis.call('HSET', K.pvt, p, string.format('%.17g', vt))
  if queued == 0 then redis.call('ZADD', K.idle, vt, p) end
  if lim then refresh(p, lim, tonumber(clock())) end
  return string.format('%.17g', -extra)
end

-- Credit a leased item with the part of its weight it did not use (credit.lua says how), or
-- charge its partition for what it used beyond it; returns the virtual time credited, as a
-- string ('0' when nothing was; negative when charged).
local function credit_item(id, token, used, most)
  if not holds_lease(id, token) then return '0' end
  local key = item_key(id)
  local info = redis.call('HMGET', key, F_PARTITION, F_COST, F_WEIGHT, F_CREDITED, F_LIMITED,
                          F_HALF_LIFE, F_PRICE)
  -- what it was charged, in the units of `used`: its weight at its price (enqueue's Item.price)
  local p, w = info[1], info[3] and tonumber(info[3]) * (tonumber(info[7]) or 1)
  if info[4] or not w or used == w then return '0' end
  if used > w then
    local extra = tonumber(info[2]) * (used - w) / w
    return charge_more(key, token, p, extra, used, info[6], info[5] and limits_of(p), most)
  end
  local credit = tonumber(info[2]) * (w - used) / w
  redis.call('HSET', key, F_CREDITED, token)
  if info[6] then remember_use(p, used, tonumber(info[6]), tonumber(clock())) end
  count(STAT_CREDITED, 1)

  -- Fairly placed items of the partition, in arrival order, which is also their order in the
  -- queue (a partition's fair start times never decrease with arrival). Front-placed ones keep
  -- their place at the front. One more than the limit is read to learn whether it was reached.
  local lim = info[5] and limits_of(p)
  local prefix = items_prefix(p)
  local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                          '(' .. prefix .. AFTER_FAIR_MARK, 'LIMIT', 0, most + 1)
  for i = 1, math.min(#fair, most) do
    local member = string.sub(fair[i], #prefix + 1)
    local zset = holder(p, member, lim)
    local score = redis.call('ZSCORE', zset, member)
    -- Each moves by the same amount, clamped at its pool's clock, so their order stays as it
    -- was. (A parked item may wait below the clock: it is never moved up.)
    if score then
      score = tonumber(score)
      local at = pool_clock(pool_of(task_id_of(member)))
      redis.call('ZADD', zset, math.max(math.min(at, score), score - credit), member)
    end
  end

  -- The partition's clock moves back too, unless some of its items stay where they were (beyond
  -- the limit, or queued before the index): its next items must still follow those.
  local queued = tonumber(redis.call('HGET', K.pqueued, p) or '0')
  local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. AFTER_FAIR_MARK)
  local raw = redis.call('HGET', K.pvt, p)
  if raw and #fair <= most and indexed == queued then
    local vt = math.max(low_clock(), tonumber(raw) - credit)
    redis.call('HSET', K.pvt, p, vt)
    if queued == 0 then redis.call('ZADD', K.idle, 'XX', vt, p) end
  end
  if lim then refresh(p, lim, tonumber(clock())) end
  return string.format('%.17g', credit)
end
