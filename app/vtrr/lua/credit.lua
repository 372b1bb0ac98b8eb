-- credit.lua: an item in flight used less than its weight; give its partition back the unused
-- part of what it was charged, so that its queued items move forward as if the item had been
-- charged for what it used. Only the holder of the item's current lease may credit it, and an
-- item is credited once per charge (a retry of a lost reply credits nothing more).
-- KEYS: queue item cvt pvt pqueued idle stats items
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] weight used (a positive integer)
-- ARGV[4] most queued items to move (CREDIT_MOVES)
-- Reply: the virtual time credited, as a string ("0" when nothing was).
local id, token, used, most = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not holds_lease(id, token) then return '0' end
local key = item_key(id)
local info = redis.call('HMGET', key, 'p', 'c', 'w', 'k')
local p, w = info[1], tonumber(info[3])
if info[4] or not w or used >= w then return '0' end
local credit = tonumber(info[2]) * (w - used) / w
redis.call('HSET', key, 'k', token)
count('credited', 1)

-- Fairly placed items of the partition, in arrival order, which is also their order in the
-- queue (a partition's fair start times never decrease with arrival). Front-placed ones keep
-- their place at the front. One more than the limit is read to learn whether it was reached.
local cvt = current_vt()
local prefix = items_prefix(p)
local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. '1', '(' .. prefix .. '2',
                        'LIMIT', 0, most + 1)
for i = 1, math.min(#fair, most) do
  local member = string.sub(fair[i], #prefix + 1)
  local score = redis.call('ZSCORE', K.queue, member)
  -- Each moves by the same amount, clamped at the clock, so their order stays as it was.
  if score then redis.call('ZADD', K.queue, math.max(cvt, tonumber(score) - credit), member) end
end

-- The partition's clock moves back too, unless some of its items stay where they were (beyond
-- the limit, or queued before the index): its next items must still follow those.
local queued = tonumber(redis.call('HGET', K.pqueued, p) or '0')
local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. '2')
local raw = redis.call('HGET', K.pvt, p)
if raw and #fair <= most and indexed == queued then
  local vt = math.max(cvt, tonumber(raw) - credit)
  redis.call('HSET', K.pvt, p, vt)
  if queued == 0 then redis.call('ZADD', K.idle, 'XX', vt, p) end
end
return string.format('%.17g', credit)
