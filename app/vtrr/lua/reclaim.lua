-- reclaim.lua: put items whose lease has expired back into the queue.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: trigger_message broker
-- ARGV[1] limit  ARGV[2] "front" or "fair"  ARGV[3] trigger cap (-1: no triggers)
-- Reply: {items reclaimed, triggers to publish, items queued}
local n = reclaim(clock(), tonumber(ARGV[1]), ARGV[2] == FRONT)
return {n, top_up_triggers(tonumber(ARGV[3])), redis.call('ZCARD', K.queue)}
