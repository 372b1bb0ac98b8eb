-- cancel.lua: remove a queued item (not a leased one).
-- KEYS: queue item cvt pvt pqueued idle stats queued_weight items limits parked reps waits park live freed
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] task id
-- Reply: 1 when removed, 0 when the item is not queued.
local id = ARGV[1]
local key = item_key(id)
local f = redis.call('HMGET', key, F_MEMBER, F_LEASE, F_PARTITION, F_COST, F_WEIGHT, F_ENTRY,
                    F_LIMITED, F_POOL)
local member, p = f[1], f[3]
if not member or f[2] then return 0 end
local lim = f[7] and limits_of(p)
local zset = holder(p, member, lim)
local score = tonumber(redis.call('ZSCORE', zset, member))
redis.call('ZREM', zset, member)
if zset ~= K.park .. p then
  if lim then redis.call('HDEL', K.reps, p) end
else
  count_parked(-1)
end
unindex_item(f[6])
redis.call('DEL', key)
-- Refund the partition's clock where that cannot reorder its other items: for its newest
-- item, and, when nothing of it stays queued, down to its pool's clock.
local raw = redis.call('HGET', K.pvt, p)
if raw then
  local pvt = tonumber(raw)
  if string.sub(member, 1, 1) == FAIR_MARK and pvt == score + tonumber(f[4]) then pvt = score end
  if tonumber(redis.call('HGET', K.pqueued, p)) == 1 then pvt = math.min(pvt, pool_clock(f[8])) end
  redis.call('HSET', K.pvt, p, pvt)
end
partition_queued(p, -1)
weigh(f[5], -1)
if lim then refresh(p, lim, tonumber(clock())) end
count(STAT_CANCELLED, 1)
reset_if_drained()
return 1
