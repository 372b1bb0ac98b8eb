-- position.lua: an item's 0-based place in dispatch order among every item queued, those of
-- limited partitions that are parked included (read only).
-- KEYS: queue item limits park
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV[1] task id
-- Reply: the rank, or nil when the item is not queued.
local member = queued_member(ARGV[1])
if not member then return nil end
return rank_of(member, redis.call('HKEYS', K.limits))
