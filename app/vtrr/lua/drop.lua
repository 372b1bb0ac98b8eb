-- drop.lua: delete every key of this queue but its counters (`stats`): what the queue has done
-- stays counted, as a monitoring counter must (it only goes up).
-- KEYS: all (see _lib.lua).
-- ARGV: none
-- Reply: {ids that were queued, ids that were in flight}, so that the caller can tell their
--        owners; nothing is lost without a word.
local queued = redis.call('HKEYS', K.task)
local in_flight = redis.call('HKEYS', K.inflight_task)
local doomed = {}
for _, key in ipairs(KEYS) do
  if key ~= K.stats then doomed[#doomed + 1] = key end
end
redis.call('DEL', unpack(doomed))
return {queued, in_flight}
