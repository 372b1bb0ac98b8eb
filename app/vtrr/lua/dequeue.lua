-- dequeue.lua: lease the next item: the lowest virtual time, ties in arrival order. It counts
-- nothing: `dequeued` follows from the other counters (FairQueue.stats).
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: trigger_message broker
-- Before taking, reclaims up to ARGV[5] expired leases.
-- ARGV[1] lease microseconds  ARGV[2] lease token  ARGV[3] 1 if this call consumes a trigger
-- ARGV[4] "first" (fair order) or "last" (the rear, for RedisQueue.get_last)
-- ARGV[5] most expired leases to reclaim (0: none)  ARGV[6] trigger cap (-1: no triggers)
-- ARGV[7] "front" or "fair": where reclaimed items go
-- Reply: {triggers to publish} when nothing is queued, else
--        {triggers to publish, task id, payload, timeouts, lease expiry (microseconds)}
local lease_us, token, consumes = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1'
local from_rear, limit, cap = ARGV[4] == 'last', tonumber(ARGV[5]), tonumber(ARGV[6])
local t = clock()
if limit > 0 then reclaim(t, limit, ARGV[7] == 'front') end
if consumes and redis.call('DECR', K.triggers) < 0 then
  redis.call('SET', K.triggers, 0)
end

local head
if from_rear then
  head = redis.call('ZPOPMAX', K.queue)
else
  head = redis.call('ZPOPMIN', K.queue)
end
if not head[1] then
  return {top_up_triggers(cap, 0)}
end
local id = task_id_of(head[1])
if not from_rear then
  redis.call('SET', K.cvt, head[2])
end
local key = item_key(id)
local f = redis.call('HMGET', key, 'p', 'w', 'd', 't', 'x')
unindex_item(f[5])
partition_queued(f[1], -1)
weigh(f[2], -1)
redis.call('HSET', key, 'l', token)
local expiry = string.format('%d', tonumber(t) + lease_us)
redis.call('ZADD', K.inflight, expiry, id)
local queued = reset_if_drained()
return {top_up_triggers(cap, queued), id, f[3], f[4] or '0', expiry}
