-- lib/reclaim.lua: expired leases put back in line, and the application's hook that hears
-- of each (use_hooks).
-- Relies on: keys.lua (K), clock.lua (count), partitions.lua (item_key), placing.lua
-- (requeue), put_back.lua (to_partition_front).

-- The application's hook on each reclaimed item (app/vtrr/hooks.py `reclaimed`), or nil: set
-- by use_hooks where the operation runs with the application's hooks (scripts.HOOKED).
local on_reclaimed = nil
local function use_hooks(hooks)
  on_reclaimed = hooks.reclaimed
end

-- Put leased items whose lease has expired back into the queue, at most limit of them, where
-- `placement` says: FAIR (charged again, as if freshly enqueued), FRONT (of the whole queue, as
-- release) or PARTITION_FRONT (of its own partition, as put_back). The hook hears of each one
-- with the lease token that lapsed, in the same call.
local function reclaim(t, limit, placement)
  local expired = redis.call('ZRANGEBYSCORE', K.inflight, '-inf', t, 'LIMIT', '0', limit)
  for _, id in ipairs(expired) do
    local key = item_key(id)
    local token = redis.call('HGET', key, F_LEASE)
    if placement == PARTITION_FRONT then
      to_partition_front(id)
    else
      requeue(id, placement == FRONT, tonumber(t))
    end
    redis.call('HINCRBY', key, F_TIMEOUTS, 1)
    if on_reclaimed then on_reclaimed(id, token) end
  end
  if #expired > 0 then count(STAT_RECLAIMED, #expired) end
  return #expired
end
