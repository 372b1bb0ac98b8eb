-- dequeue.lua: lease the next item: the lowest virtual time, ties in arrival order.
-- KEYS: all (see _lib.lua). Before taking, reclaims up to ARGV[5] expired leases.
-- ARGV[1] lease seconds  ARGV[2] lease token  ARGV[3] 1 if this call consumes a trigger
-- ARGV[4] "first" (fair order) or "last" (the rear, for RedisQueue.get_last)
-- ARGV[5] most expired leases to reclaim (0: none)  ARGV[6] trigger cap (-1: no triggers)
-- ARGV[7] "front" or "fair": where reclaimed items go
-- Reply: {triggers to publish} when nothing is queued, else
--        {triggers to publish, task id, payload, timeouts, lease expiry}
local lease_s, token, consumes = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1'
local from_rear, limit, cap = ARGV[4] == 'last', tonumber(ARGV[5]), tonumber(ARGV[6])
local t = now()
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
local info = cjson.decode(redis.call('HGET', K.meta, id))
unindex_item(info.p, head[1])
partition_queued(info.p, -1)
weigh(info, -1)

local payload = redis.call('HGET', K.task, id)
redis.call('HDEL', K.task, id)
redis.call('HSET', K.inflight_task, id, payload)
redis.call('HSET', K.lease, id, token)
local expiry = string.format('%.6f', t + lease_s)
redis.call('ZADD', K.inflight, expiry, id)
count('dequeued', '1')
local queued = reset_if_drained()
local timeouts = redis.call('HGET', K.timeouts, id) or '0'
return {top_up_triggers(cap, queued), id, payload, timeouts, expiry}
