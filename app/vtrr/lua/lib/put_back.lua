-- lib/put_back.lua: out of turn: a partition's first queued item, and a leased item put back
-- at the front of its own partition (put_back, and reclaim's PARTITION_FRONT).
-- Relies on: keys.lua (K), clock.lua, partitions.lua, limits.lua, parking.lua, placing.lua,
-- leases.lua (holds_lease).

-- The most of a partition's front-placed items that first_queued reads: there are few, and
-- the first of them in the index is nearly always the first in line (see first_queued).
local FRONT_LOOK = 64

-- The first of partition p's queued items in dispatch order (lowest score, then member): its
-- member and score (a number), or nil when none is queued. A limited partition's is its next
-- item. An unlimited one's is among its front-placed items and its first fairly placed one
-- (fair starts never decrease with arrival); the front-placed ones are each looked at, since
-- those placed while the partition had limits may sit in the index out of dispatch order.
local function first_queued(p, lim)
  if lim then
    local member, score = next_of(p)
    return member, member and tonumber(score)
  end
  local prefix = items_prefix(p)
  local entries = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FRONT_MARK,
                             '(' .. prefix .. FAIR_MARK, 'LIMIT', 0, FRONT_LOOK)
  local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                          '(' .. prefix .. AFTER_FAIR_MARK, 'LIMIT', 0, 1)
  entries[#entries + 1] = fair[1]
  local first, low
  for _, entry in ipairs(entries) do
    local member = string.sub(entry, #prefix + 1)
    local raw = redis.call('ZSCORE', line_of(task_id_of(member)), member)
    local score = raw and tonumber(raw)
    if score and (not first or before(score, member, low, first)) then first, low = member, score end
  end
  return first, low
end

-- Put a leased item back ahead of every other queued item of its own partition, for the
-- holder of its current lease (put_back.lua): at the score of its partition's first queued
-- item, or, with none queued, where the partition's next item would start; its front member
-- sorts before that item. No placement charges it and nothing is credited: what it was charged
-- stays charged, and F_CREDITED as it was, so one credit at the end returns the unused part.
-- put_back_item is it for the holder of the current lease: whether token held it.
local function to_partition_front(id)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_LIMITED, F_POOL, F_HELD)
  local p = f[1]
  local lim = f[3] and limits_of(p)
  redis.call('ZREM', K.inflight, id)
  free_cards(f[5])
  if f[3] then landed(p, id) end  -- (marked while its partition had limits: counted then)
  local _, score = first_queued(p, lim)
  if not score then
    score = math.max(pool_clock(f[4]), tonumber(redis.call('HGET', K.pvt, p) or '0'))
  end
  local member = front_member(id)
  local entry = queue(p, f[2], score, member, lim, f[4])
  redis.call('HDEL', key, F_LEASE, F_HELD)
  redis.call('HSET', key, F_MEMBER, member, F_ENTRY, entry)
  if lim then refresh(p, lim, tonumber(clock())) end
end

local function put_back_item(id, token)
  if not holds_lease(id, token) then return false end
  to_partition_front(id)
  return true
end
