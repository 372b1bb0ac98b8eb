-- drop.lua: delete every key of this queue but its counters (`stats`): what the queue has done
-- stays counted, as a monitoring counter must (it only goes up); and its partitions' limits,
-- which are settings, not state.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers wake queued_weight items
-- KEYS: trigger_message broker stats limits parked reps waits park live freed
-- KEYS: pool pools kinds kind kpools kclock
-- KEYS: card resv fleet
-- ARGV: none
-- Reply: {ids that were queued, ids that were in flight}, so that the caller can tell their
--        owners; nothing is lost without a word.
local queued = {}
local lines = all_lines()
for _, l in ipairs(lines) do
  for _, member in ipairs(redis.call('ZRANGE', l, 0, -1)) do
    queued[#queued + 1] = task_id_of(member)
  end
end
for i = 2, #lines do redis.call('DEL', lines[i]) end  -- the pools' lines (queue goes below)
for _, k in ipairs(redis.call('SMEMBERS', K.kinds)) do
  redis.call('DEL', K.kind .. k .. KIND_TRIGGERS)
end
close_pools()
for _, p in ipairs(redis.call('HKEYS', K.limits)) do
  for _, member in ipairs(redis.call('ZRANGE', K.park .. p, 0, -1)) do
    queued[#queued + 1] = task_id_of(member)
  end
  redis.call('DEL', K.park .. p)
end
local in_flight = redis.call('ZRANGE', K.inflight, 0, -1)
for _, id in ipairs(in_flight) do
  -- live is shared with the queue's group: take out this queue's items only
  local f = redis.call('HMGET', item_key(id), F_LIMITED, F_PARTITION, F_HELD)
  if f[1] then redis.call('HDEL', K.live .. f[2], id) end
  free_cards(f[3])
end
for _, ids in ipairs({queued, in_flight}) do
  for i = 1, #ids, 500 do
    local batch = {}
    for j = i, math.min(i + 499, #ids) do batch[#batch + 1] = item_key(ids[j]) end
    redis.call('DEL', unpack(batch))
  end
end
local doomed = {}
for _, key in ipairs(KEYS) do
  -- item, park and live are prefixes, not keys
  local kept = key == K.item or key == K.stats or key == K.limits or key == K.park
  -- the fleet's cards are shared with the group's other queues
  kept = kept or key == K.card or key == K.resv or key == K.fleet
  if not (kept or key == K.live or key == K.freed) then doomed[#doomed + 1] = key end
end
redis.call('DEL', unpack(doomed))
-- What it deleted is counted, so that dequeued and acked still follow from the counters.
count(STAT_DROPPED_QUEUED, #queued)
count(STAT_DROPPED_IN_FLIGHT, #in_flight)
return {queued, in_flight}
