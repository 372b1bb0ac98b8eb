-- lib/placing.lua: where an item goes in line (fair or front placement), putting it there
-- (queue, or its partition's park), and putting a leased item back (requeue: release, reclaim).
-- Relies on: keys.lua (K), clock.lua, pools.lua, partitions.lua, limits.lua, parking.lua.

-- Where an item of pool goes: fair placement starts it at max(its pool's clock, its
-- partition's vt) and moves the partition's vt on by the item's cost c; front placement puts it
-- ahead of everything and charges nothing more (it is an item that already had its turn, or an
-- operator's choice). Returns its score and its queue member; queue() then puts it there.
local function placement(id, p, c, front, pool)
  if front then return front_score(pool), front_member(id) end
  local score = math.max(pool_clock(pool), tonumber(redis.call('HGET', K.pvt, p) or '0'))
  redis.call('HSET', K.pvt, p, score + tonumber(c))
  return score, arrival_member(id)
end

-- Put an item of partition p, weight w and pool into the queue at score, as member. Returns its
-- entry in the index, which the item's hash keeps (x) so that taking it out costs no arithmetic.
local function queue(p, w, score, member, limited, pool)
  local entry = items_prefix(p) .. member
  redis.call('ZADD', K.items, 0, entry)
  partition_queued(p, 1)
  weigh(w, 1)
  if limited then
    redis.call('ZADD', K.park .. p, score, member)
    redis.call('INCR', K.parked)
  else
    redis.call('ZADD', line(pool), score, member)
  end
  if pool then open_pool(pool) end
  return entry
end

-- Put a leased item back into the queue (release, reclaim): out of flight, then placed again.
-- A fair placement charges it again, so it may be credited again. Returns its payload's key.
local function requeue(id, front, now)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_PARTITION, F_COST, F_WEIGHT, F_LIMITED, F_POOL, F_HELD)
  local lim = f[4] and limits_of(f[1])
  redis.call('ZREM', K.inflight, id)
  free_cards(f[6])
  if f[4] then landed(f[1], id) end  -- (marked while its partition had limits: counted then)
  -- its partition may start its next item now: the front is where that one is too
  if lim then refresh(f[1], lim, now) end
  local score, member = placement(id, f[1], f[2], front, f[5])
  local entry = queue(f[1], f[3], score, member, lim, f[5])
  if front then
    redis.call('HDEL', key, F_LEASE, F_HELD)
  else
    redis.call('HDEL', key, F_LEASE, F_CREDITED, F_HELD)
  end
  redis.call('HSET', key, F_MEMBER, member, F_ENTRY, entry)
  if lim then refresh(f[1], lim, now) end
  return key
end
