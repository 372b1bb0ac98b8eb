-- drop.lua: delete every key of this queue.
-- KEYS: all (see _lib.lua).
-- ARGV: none
-- Reply: the number of keys deleted.
return redis.call('DEL', unpack(KEYS))
