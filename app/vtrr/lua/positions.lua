-- positions.lua: the 0-based places in dispatch order of many items at once (read only).
-- KEYS: queue item
-- ARGV: task ids
-- Reply: one rank per id, in order; -1 for an id that is not queued.
local ranks = {}
for i, id in ipairs(ARGV) do
  local member = queued_member(id)
  ranks[i] = member and redis.call('ZRANK', K.queue, member) or -1
end
return ranks
