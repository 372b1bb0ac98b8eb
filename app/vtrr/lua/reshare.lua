-- reshare.lua: a partition's share changed; its queued items are charged again at once, so
-- that the new share holds from now on. Its first fairly placed item keeps its start time (its
-- turn was earned under the old share); each next one starts where the previous one, charged
-- weight / new share, ends, and the partition's virtual time follows its last one. Items put at
-- the front and items in flight keep theirs (those were charged already, and a credit gives
-- back what they were charged); no other partition's item moves, and the members (so the
-- arrival order that breaks ties) stay as they were. O(n log N) for the partition's n items.
-- KEYS: queue item pvt pqueued items limits parked reps waits park live
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV[1] partition  ARGV[2] its new share (a positive, finite number; checked by the caller)
-- Reply: how many queued items were charged again (0: none of the partition fairly placed).
local p, share = ARGV[1], tonumber(ARGV[2])
local prefix = items_prefix(p)
-- its fairly placed items ("1..."), in arrival order, which is also their order in the queue
local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                        '(' .. prefix .. AFTER_FAIR_MARK)
if #fair == 0 then return 0 end
local lim = limits_of(p)
local first, before = nil, 0  -- the first one's start; the weight queued ahead of this one
for _, entry in ipairs(fair) do
  local member = string.sub(entry, #prefix + 1)
  local key = item_key(task_id_of(member))
  local zset = holder(p, member, lim)
  first = first or tonumber(redis.call('ZSCORE', zset, member))
  local wp = redis.call('HMGET', key, F_WEIGHT, F_PRICE)
  local w = tonumber(wp[1]) * (tonumber(wp[2]) or 1)  -- its weight at its price
  -- From the first start and the whole weight ahead (an exact integer), not a running sum of
  -- costs: the rounding of w / share does not pile up, so ties the arithmetic makes stay ties.
  redis.call('ZADD', zset, first + before / share, member)
  redis.call('HSET', key, F_COST, string.format('%.17g', w / share))
  before = before + w
end
-- Items queued before the index of a partition's items (an older release) are not in `fair`:
-- the partition's clock then stays, so that its next items still follow them.
local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. AFTER_FAIR_MARK)
if indexed == tonumber(redis.call('HGET', K.pqueued, p) or '0') then
  redis.call('HSET', K.pvt, p, first + before / share)
end
if lim then refresh(p, lim, tonumber(clock())) end
return #fair
