-- position.lua: an item's 0-based place in dispatch order (read only).
-- KEYS: all (see _lib.lua); reads task, meta, queue.
-- ARGV[1] task id
-- Reply: the rank, or nil when the item is not queued.
local id = ARGV[1]
if redis.call('HEXISTS', K.task, id) == 0 then return nil end
return redis.call('ZRANK', K.queue, cjson.decode(redis.call('HGET', K.meta, id)).m)
