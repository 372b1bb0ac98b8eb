-- promote.lua: move a queued item to the very front, ahead of every other queued item.
-- Its partition's virtual time is unchanged: the item keeps what it was charged.
-- KEYS: queue item cvt seq stats items
-- ARGV[1] task id
-- Reply: 1 when moved, 0 when the item is not queued.
local id = ARGV[1]
local member = queued_member(id)
if not member then return 0 end
local f = redis.call('HMGET', item_key(id), F_PARTITION, F_ENTRY)
local score = front_score()
redis.call('ZREM', K.queue, member)
unindex_item(f[2])
member = front_member(id)
redis.call('ZADD', K.queue, score, member)
local entry = items_prefix(f[1]) .. member
redis.call('ZADD', K.items, 0, entry)
redis.call('HSET', item_key(id), F_MEMBER, member, F_ENTRY, entry)
count(STAT_PROMOTED, 1)
return 1
