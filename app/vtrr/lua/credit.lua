-- credit.lua: an item in flight used less than its weight; give its partition back the unused
-- part of what it was charged, so that its queued items move forward as if the item had been
-- charged for what it used. Only the holder of the item's current lease may credit it, and an
-- item is credited once per charge (a retry of a lost reply credits nothing more).
-- KEYS: queue item cvt pvt pqueued idle stats items limits parked reps waits park live
-- KEYS: usage usage_at
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] weight used (a positive integer)
-- ARGV[4] most queued items to move (CREDIT_MOVES)
-- Reply: the virtual time credited, as a string ("0" when nothing was).
return credit_item(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
