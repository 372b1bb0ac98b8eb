-- position.lua: an item's 0-based place in dispatch order (read only).
-- KEYS: queue item
-- ARGV[1] task id
-- Reply: the rank, or nil when the item is not queued.
local member = queued_member(ARGV[1])
if not member then return nil end
return redis.call('ZRANK', K.queue, member)
