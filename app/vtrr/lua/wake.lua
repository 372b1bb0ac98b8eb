-- wake.lua: let the limited partitions whose wait is over start their next item: the weight
-- their items in flight hold has run down far enough. Whoever serves a queue with limits calls
-- it when `waits` says (the next time, in the reply); a reclaim, and a dequeue that finds
-- nothing to start, do it too.
-- KEYS: queue item seq triggers limits parked reps waits park live
-- KEYS: trigger_message broker
-- ARGV[1] most partitions to wake  ARGV[2] trigger cap
-- Reply: {partitions woken, triggers to publish, the next wait's end (us), or -1 for none}
local t = tonumber(clock())
local woken = wake_due(t, tonumber(ARGV[1]))
local next_wait = redis.call('ZRANGE', K.waits, 0, 0, 'WITHSCORES')
return {woken, top_up_triggers(tonumber(ARGV[2])), next_wait[2] or -1}
