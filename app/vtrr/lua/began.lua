-- began.lua: a leased item's run has begun later than its lease (its worker waited for a fresh
-- process to run it in, or for a set-up step): what the item holds against its partition's
-- most weight held runs down from now, not from its lease, since the time between used none of
-- it. An item of a partition without that limit has nothing to move.
-- KEYS: item live
-- ARGV[1] task id  ARGV[2] lease token
-- Reply: 1 when its start moved, 0 when the token is not the item's current lease or the item
--        holds nothing against a limit.
local id, token = ARGV[1], ARGV[2]
if not holds_lease(id, token) then return 0 end
local p = redis.call('HGET', item_key(id), F_PARTITION)
local entry = p and redis.call('HGET', K.live .. p, id)
if not entry then return 0 end
local w = string.match(entry, '^%d+ (%S+)$')
redis.call('HSET', K.live .. p, id, clock() .. ' ' .. w)
return 1
