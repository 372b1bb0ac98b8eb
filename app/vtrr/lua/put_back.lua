-- put_back.lua: give a leased item back to the front of its own partition, for the holder of
-- its current lease: it leaves before every other queued item of its partition, and where
-- that partition's next item would among the others' (release.lua puts it before everything).
-- It is charged nothing more and credited nothing; its partition's limits apply to it as to
-- any queued item. Counted as released; its timeouts are not touched.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] trigger cap (-1: no triggers)
-- Reply: {1, triggers to publish} when put back, {0, 0} when the token is stale or unknown.
if not put_back_item(ARGV[1], ARGV[2]) then return {0, 0} end
count(STAT_RELEASED, 1)
return {1, top_up_triggers(tonumber(ARGV[3]))}
