-- drop.lua: delete every key of this queue.
-- KEYS: all (see _lib.lua).
-- ARGV: none
-- Reply: {ids that were queued, ids that were in flight}, so that the caller can tell their
--        owners; nothing is lost without a word.
local queued = redis.call('HKEYS', K.task)
local in_flight = redis.call('HKEYS', K.inflight_task)
redis.call('DEL', unpack(KEYS))
return {queued, in_flight}
