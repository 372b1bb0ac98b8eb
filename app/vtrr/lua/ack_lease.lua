-- ack_lease.lua: ack a leased item and lease the next, in one call (a drain's step from one item
-- to the next): what ack.lua then dequeue.lua do, in that order.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed usage usage_at
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- KEYS: card resv fleet
-- ARGV[1] task id  ARGV[2] its lease token  ARGV[3..9] as dequeue.lua's ARGV[1..7]
-- Reply: {1 when acked, 0 when the token was stale; then dequeue.lua's reply}
local acked = ack_item(ARGV[1], ARGV[2])
local leased = lease_next(tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1', ARGV[6] == LAST,
                          tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9])
table.insert(leased, 1, acked)
return leased
