-- positions.lua: the 0-based places in dispatch order of many items at once (read only), as
-- position.lua counts them.
-- KEYS: queue item limits park
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV: task ids
-- Reply: one rank per id, in order; -1 for an id that is not queued.
local limited = redis.call('HKEYS', K.limits)
local ranks = {}
for i, id in ipairs(ARGV) do
  local member = queued_member(id)
  ranks[i] = member and rank_of(member, limited) or -1
end
return ranks
