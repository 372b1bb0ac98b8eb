-- lend.lua: a consumer whose card is lent to an item of several cards says that its card is
-- ready (it has let go of what it held there): its card's state gets ready 1, only while the
-- card is still lent to that item.
-- KEYS: card item
-- ARGV[1] task id
-- Reply: 1 when said, 0 when the card is not lent to that item (any more).
local s = card_state(redis.call('GET', K.card))
if not s or s.id ~= ARGV[1] or s.role ~= CARD_LENT then return 0 end
redis.call('SET', K.card, card_text(s.role, s.id, s.ends, true))
return 1
