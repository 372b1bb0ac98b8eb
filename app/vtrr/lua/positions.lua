-- positions.lua: the 0-based places in dispatch order of many items at once (read only).
-- KEYS: all (see _lib.lua); reads task, meta, queue.
-- ARGV: task ids
-- Reply: one rank per id, in order; -1 for an id that is not queued.
local ranks = {}
for i, id in ipairs(ARGV) do
  local meta = redis.call('HEXISTS', K.task, id) == 1 and redis.call('HGET', K.meta, id)
  ranks[i] = meta and redis.call('ZRANK', K.queue, cjson.decode(meta).m) or -1
end
return ranks
