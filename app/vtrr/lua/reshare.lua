-- reshare.lua: a partition's share changed; its queued items are charged again at once, so
-- that the new share holds from now on. Its first fairly placed item keeps its start time (its
-- turn was earned under the old share); each next one starts where the previous one, charged
-- weight / new share, ends, and the partition's virtual time follows its last one. Items put at
-- the front and items in flight keep theirs (those were charged already, and a credit gives
-- back what they were charged); no other partition's item moves. O(items of the partition).
-- KEYS: queue item pvt pqueued items
-- ARGV[1] partition  ARGV[2] its new share (a positive number)
-- Reply: how many queued items were charged again.
local p, share = ARGV[1], tonumber(ARGV[2])
local prefix = items_prefix(p)
local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. '1', '(' .. prefix .. '2')
if #fair == 0 then return 0 end
local start
for i, entry in ipairs(fair) do
  local member = string.sub(entry, #prefix + 1)
  local key = item_key(task_id_of(member))
  if i == 1 then start = tonumber(redis.call('ZSCORE', K.queue, member)) end
  local c = tonumber(redis.call('HGET', key, 'w')) / share
  redis.call('ZADD', K.queue, start, member)
  redis.call('HSET', key, 'c', string.format('%.17g', c))
  start = start + c
end
-- Items queued before the index of a partition's items (an older release) are not in `fair`:
-- the partition's clock then stays, so that its next items still follow them.
local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. '2')
if indexed == tonumber(redis.call('HGET', K.pqueued, p) or '0') then
  redis.call('HSET', K.pvt, p, start)
end
return #fair
