-- dequeue_card.lua: dequeue_unlimited.lua for a slotted consumer (lib/cards.lua): the same fair
-- path, its card marked as dequeue.lua marks it, and nil (nothing done: call dequeue.lua)
-- where an item holds its card or a reservation keeps it. A call of its own, so that a
-- consumer without a card pays nothing for cards on its fair path.
-- KEYS: queue item inflight cvt pvt pqueued idle queued_weight items parked waits
-- KEYS: kinds kind
-- KEYS: card resv fleet
-- ARGV: dequeue_unlimited.lua's
-- Reply: dequeue.lua's, or nil
return lease_unlimited(tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), K.card) or false
