-- lib/partitions.lua: the fair order's bookkeeping of partitions: how many of each are queued,
-- idle partitions and their pruning, the queued weight, the reset once the queue drains, the
-- index of queued items by partition (items), and an item's key.
-- Relies on: keys.lua (K), clock.lua (current_vt), pools.lua.

-- Forget idle partitions that the virtual time (every kind's clock) has passed: max(clock,
-- their vt) is the clock anyway.
-- The virtual time stands still while every item served is a newcomer's, so idle partitions are
-- also capped at IDLE_SLACK more than the partitions queued: those nearest the clock go first,
-- each forgiven less than the cost of its last item.
local IDLE_SLACK = 64
local function prune_idle(limit)
  local gone = redis.call('ZRANGEBYSCORE', K.idle, '-inf', low_clock(), 'LIMIT', '0', limit)
  if #gone > 0 then
    redis.call('HDEL', K.pvt, unpack(gone))
    redis.call('ZREM', K.idle, unpack(gone))
  end
  local excess = redis.call('ZCARD', K.idle) - redis.call('HLEN', K.pqueued) - IDLE_SLACK
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', K.idle, math.min(excess, limit))
    for i = 1, #popped, 2 do redis.call('HDEL', K.pvt, popped[i]) end
  end
end

-- One more (delta 1) or one fewer (delta -1) item of a partition queued. A partition with none
-- queued keeps its virtual time in idle_partitions until the queue's virtual time passes it;
-- idle partitions are pruned here, the only place where their number grows.
local function partition_queued(p, delta)
  local n = redis.call('HINCRBY', K.pqueued, p, delta > 0 and '1' or '-1')
  if n <= 0 then
    redis.call('HDEL', K.pqueued, p)
    local vt = redis.call('HGET', K.pvt, p)
    if vt then redis.call('ZADD', K.idle, vt, p) end
    prune_idle(16)
  elseif n == 1 and delta > 0 then
    redis.call('ZREM', K.idle, p)
  end
end

-- The running sum of the queued items' weights, moved by one item's weight w (a string; sign 1
-- or -1), so that readers (start estimates) learn the work queued in O(1).
local function weigh(w, sign)
  if w then redis.call(sign > 0 and 'INCRBY' or 'DECRBY', K.queued_weight, w) end
end

-- Once nothing is queued, the virtual clocks start again from zero. Returns how many wait
-- that this call's consumer may take (in `lines`, its lines, where the caller has them).
local function reset_if_drained(lines)
  local queued = waiting_in(lines or my_lines())
  if queued == 0 and not redis.call('GET', K.parked) and waiting_in(all_lines()) == 0 then
    redis.call('DEL', K.cvt, K.pvt, K.idle, K.pqueued, K.queued_weight, K.items)
    close_pools()
  end
  return queued
end

-- The index of queued items by partition (items): every queue member, prefixed with its
-- partition and that partition's length so that one partition's prefix is never another's.
-- All scores are 0, so ZRANGEBYLEX lists a partition's front-placed items (FRONT_MARK) and then
-- its fair ones (FAIR_MARK) in arrival order, in O(log N) plus what it returns.
local function items_prefix(p)
  return #p .. SEPARATOR .. p .. SEPARATOR
end

local function unindex_item(entry)
  redis.call('ZREM', K.items, entry)
end

-- The key of an item's hash.
local function item_key(id)
  return K.item .. id
end
