-- dequeue.lua: lease the next item: the lowest virtual time, ties in arrival order. It counts
-- nothing: `dequeued` follows from the other counters (FairQueue.stats).
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- KEYS: card resv fleet
-- Before taking, reclaims up to ARGV[5] expired leases. Only items that may start are in
-- queue (limited partitions: lib/keys.lua); when none is, the partitions whose wait is over are
-- woken first.
-- ARGV[1] lease microseconds  ARGV[2] lease token  ARGV[3] 1 if this call consumes a trigger
-- ARGV[4] "first" (fair order) or "last" (the rear, for RedisQueue.get_last)
-- ARGV[5] most expired leases to reclaim (0: none)  ARGV[6] trigger cap (-1: no triggers)
-- ARGV[7] "fair", "front" or "partition_front": where reclaimed items go (lib/reclaim.lua)
-- Reply: {triggers to publish} when nothing is queued, else
--        {triggers to publish, task id, payload, timeouts, lease expiry (microseconds)}
return lease_next(tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1', ARGV[4] == LAST,
                  tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
