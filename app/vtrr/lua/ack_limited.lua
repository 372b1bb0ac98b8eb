-- ack_limited.lua: ack.lua for an item of a partition with limits (ack.lua answered nil): the
-- same end, and then its partition's next item may start (lib/parking.lua refresh), whose
-- triggers it tops up. It counts nothing: `acked` follows from the other counters.
-- KEYS: queue item inflight seq stats triggers limits parked reps waits park live freed
-- KEYS: usage usage_at
-- KEYS: trigger_message broker
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] trigger cap (-1: no triggers)
-- Reply: {1 when acked, 0 when the token is not the item's current lease (stale or unknown);
--        triggers to publish (its limited partition may start its next item now)}
local acked, limited = ack_item(ARGV[1], ARGV[2])
return {acked, limited and top_up_triggers(tonumber(ARGV[3])) or 0}
