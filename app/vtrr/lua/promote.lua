-- promote.lua: move a queued item to the very front, ahead of every other queued item.
-- Its partition's virtual time is unchanged: the item keeps what it was charged.
-- KEYS: all (see _lib.lua); touches queue, meta, seq, partition_items.
-- ARGV[1] task id
-- Reply: 1 when moved, 0 when the item is not queued.
local id = ARGV[1]
if redis.call('HEXISTS', K.task, id) == 0 then return 0 end
local info = cjson.decode(redis.call('HGET', K.meta, id))
local score = front_score()
redis.call('ZREM', K.queue, info.m)
unindex_item(info.p, info.m)
info.m = front_member(id)
redis.call('ZADD', K.queue, score, info.m)
index_item(info.p, info.m)
redis.call('HSET', K.meta, id, cjson.encode(info))
count('promoted', 1)
return 1
