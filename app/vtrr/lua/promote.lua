-- promote.lua: move a queued item to the very front, ahead of every other queued item.
-- Its partition's virtual time is unchanged: the item keeps what it was charged.
-- KEYS: queue item cvt seq stats items limits parked reps waits park live freed
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] task id
-- Reply: 1 when moved, 0 when the item is not queued.
local id = ARGV[1]
local member = queued_member(id)
if not member then return 0 end
local f = redis.call('HMGET', item_key(id), F_PARTITION, F_ENTRY, F_LIMITED, F_POOL)
local lim = f[3] and limits_of(f[1])
local score = front_score(f[4])
local zset = holder(f[1], member, lim)
redis.call('ZREM', zset, member)
unindex_item(f[2])
member = front_member(id)
if lim then
  -- the front of its own items; whether it may start is its partition's limits' to say
  if zset ~= K.park .. f[1] then redis.call('HDEL', K.reps, f[1]) else count_parked(-1) end
  redis.call('ZADD', K.park .. f[1], score, member)
  count_parked(1)
else
  redis.call('ZADD', line(f[4]), score, member)
end
local entry = items_prefix(f[1]) .. member
redis.call('ZADD', K.items, 0, entry)
redis.call('HSET', item_key(id), F_MEMBER, member, F_ENTRY, entry)
if lim then refresh(f[1], lim, tonumber(clock())) end
count(STAT_PROMOTED, 1)
return 1
