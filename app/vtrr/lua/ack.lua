-- ack.lua: finish a leased item, only for the holder of its current lease. It counts nothing:
-- `acked` follows from the other counters (FairQueue.stats).
-- KEYS: item inflight
-- ARGV[1] task id  ARGV[2] lease token
-- Reply: 1 when acked, 0 when the token is not the item's current lease (stale or unknown).
local id, token = ARGV[1], ARGV[2]
if not holds_lease(id, token) then return 0 end
redis.call('ZREM', K.inflight, id)
redis.call('DEL', item_key(id))
return 1
