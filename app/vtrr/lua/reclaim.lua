-- reclaim.lua: put items whose lease has expired back into the queue.
-- KEYS: all (see _lib.lua); touches what dequeue's reclaim touches, and triggers.
-- ARGV[1] limit  ARGV[2] "front" or "fair"  ARGV[3] trigger cap (-1: no triggers)
-- Reply: {items reclaimed, triggers to publish, items queued}
local n = reclaim(now(), tonumber(ARGV[1]), ARGV[2] == 'front')
return {n, top_up_triggers(tonumber(ARGV[3])), redis.call('ZCARD', K.queue)}
