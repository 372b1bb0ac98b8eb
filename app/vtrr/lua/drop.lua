-- drop.lua: delete every key of this queue but its counters (`stats`): what the queue has done
-- stays counted, as a monitoring counter must (it only goes up).
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers wake queued_weight items
-- KEYS: trigger_message broker stats
-- ARGV: none
-- Reply: {ids that were queued, ids that were in flight}, so that the caller can tell their
--        owners; nothing is lost without a word.
local queued = {}
for i, member in ipairs(redis.call('ZRANGE', K.queue, 0, -1)) do
  queued[i] = task_id_of(member)
end
local in_flight = redis.call('ZRANGE', K.inflight, 0, -1)
for _, ids in ipairs({queued, in_flight}) do
  for i = 1, #ids, 500 do
    local batch = {}
    for j = i, math.min(i + 499, #ids) do batch[#batch + 1] = item_key(ids[j]) end
    redis.call('DEL', unpack(batch))
  end
end
local doomed = {}
for _, key in ipairs(KEYS) do
  if key ~= K.item and key ~= K.stats then doomed[#doomed + 1] = key end  -- item: a prefix
end
redis.call('DEL', unpack(doomed))
-- What it deleted is counted, so that dequeued and acked still follow from the counters.
count(STAT_DROPPED_QUEUED, #queued)
count(STAT_DROPPED_IN_FLIGHT, #in_flight)
return {queued, in_flight}
