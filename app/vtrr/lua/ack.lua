-- ack.lua: finish a leased item, only for the holder of its current lease. It counts nothing:
-- `acked` follows from the other counters (FairQueue.stats). It names none of the limits'
-- keys, so that the fair path's ack costs what it did before limits: an item of a partition
-- with limits is left as it is, for ack_limited.lua (a call of its own; the first changed
-- nothing, so the two are one ack).
-- KEYS: item inflight usage usage_at
-- ARGV[1] task id  ARGV[2] lease token
-- Reply: 1 when acked, 0 when the token is not the item's current lease (stale or unknown),
--        nil when its partition has limits (nothing done: call ack_limited.lua)
return ack_unlimited(ARGV[1], ARGV[2]) or false
