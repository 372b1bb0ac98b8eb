-- cancel.lua: remove a queued item (not a leased one).
-- KEYS: all (see _lib.lua); touches queue, task, meta, timeouts, current_virtual_time,
--       partition_virtual_time, partition_queued, idle_partitions, stats, queued_weight,
--       partition_items.
-- ARGV[1] task id
-- Reply: 1 when removed, 0 when the item is not queued.
local id = ARGV[1]
if redis.call('HEXISTS', K.task, id) == 0 then return 0 end
local info = cjson.decode(redis.call('HGET', K.meta, id))
local score = tonumber(redis.call('ZSCORE', K.queue, info.m))
redis.call('ZREM', K.queue, info.m)
unindex_item(info.p, info.m)
redis.call('HDEL', K.task, id)
redis.call('HDEL', K.meta, id)
redis.call('HDEL', K.timeouts, id)
-- Refund the partition's clock where that cannot reorder its other items: for its newest
-- item, and, when nothing of it stays queued, down to the queue's virtual time.
local raw = redis.call('HGET', K.pvt, info.p)
if raw then
  local pvt = tonumber(raw)
  if string.sub(info.m, 1, 1) == '1' and pvt == score + tonumber(info.c) then pvt = score end
  if tonumber(redis.call('HGET', K.pqueued, info.p)) == 1 then pvt = math.min(pvt, current_vt()) end
  redis.call('HSET', K.pvt, info.p, pvt)
end
partition_queued(info.p, -1)
weigh(info, -1)
count('cancelled', 1)
reset_if_drained()
return 1
