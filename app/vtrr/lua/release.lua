-- release.lua: give a leased item back, for the holder of its current lease. It goes to the
-- front: it already had its turn, so it is not charged again.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] trigger cap (-1: no triggers)
-- Reply: {1, triggers to publish} when released, {0, 0} when the token is stale or unknown.
local id, token, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not holds_lease(id, token) then return {0, 0} end
requeue(id, true, tonumber(clock()))
count(STAT_RELEASED, 1)
return {1, top_up_triggers(cap)}
