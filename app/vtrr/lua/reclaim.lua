-- reclaim.lua: put items whose lease has expired back into the queue, and let limited
-- partitions whose wait is over (at most ARGV[1] of them) start their next item.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] limit  ARGV[2] "fair", "front" or "partition_front" (where they go: lib/reclaim.lua)
-- ARGV[3] trigger cap (-1: no triggers)
-- The application's hook `reclaimed` (app/vtrr/hooks.py) hears of each item reclaimed.
-- Reply: {items reclaimed, triggers to publish, items queued}
local t = clock()
local n = reclaim(t, tonumber(ARGV[1]), ARGV[2])
wake_due(tonumber(t), tonumber(ARGV[1]))
return {n, top_up_triggers(tonumber(ARGV[3])), waiting_in(my_lines())}
