-- ack.lua: finish a leased item, only for the holder of its current lease. It counts nothing:
-- `acked` follows from the other counters (FairQueue.stats).
-- KEYS: item inflight
-- ARGV[1] task id  ARGV[2] lease token
-- Reply: 1 when acked, 0 when the token is not the item's current lease (stale or unknown).
return ack_item(ARGV[1], ARGV[2])
