-- lib/cards.lua: a fleet's cards (slots), shared by the queues of one limits group: which item
-- each card is held by, the reservation each host keeps for an item of several cards, and what
-- a consumer's own card lets it lease (docs/vtrr.md, "Items of several cards").
-- Relies on: keys.lua (K), clock.lua, partitions.lua (item_key).
--
-- A slotted consumer's K.card is `fleet .. 'card:' .. host .. ':' .. card` and its K.resv
-- `fleet .. 'resv:' .. host`; a consumer without a slot gets `fleet .. 'card:'`, never written.
--   card:<host>:<card>  STRING "<role> <task id> <ends, us> <ready> <its hash's key>" while an
--                       item holds it:
--                       role CARD_RUN (its own consumer runs it), CARD_LEAD (its consumer runs
--                       an item of several cards), CARD_LENT (lent to one); ready 1 once the
--                       lending consumer said its card is clean. Absent: free.
--   resv:<host>         STRING "<task id> <start, us> <placed, us> <card>,<card>,... <its
--                       hash's key>": the cards of host kept for an item of several cards,
--                       from start on; it counts only while that item is queued.
--   slots:<host>        HASH card -> "<kind or -> <seen, us> <worker>": the host's live cards.
--   hosts               SET the hosts that have had a live card.
-- An item that holds cards keeps their keys in F_HELD, space-separated, its leader's first.

local UNBOUNDED = 1e18  -- the end of an item whose span is unknown: never before a reservation

local function slotted()
  return K.card ~= K.fleet .. 'card:'
end

local function card_key(host, card)
  return K.fleet .. 'card:' .. host .. ':' .. card
end

local function resv_key(host)
  return K.fleet .. 'resv:' .. host
end

local function slots_key(host)
  return K.fleet .. 'slots:' .. host
end

-- This consumer's host and card, read from its card's key.
local function my_slot()
  return string.match(K.card, 'card:([^:]+):([^:]+)$')
end

local function card_text(role, id, ends, ready)
  return role .. ' ' .. id .. ' ' .. string.format('%d', ends) .. ' ' .. (ready and '1' or '0')
         .. ' ' .. item_key(id)
end

-- A card's state, or nil when it is free: {role, id, ends (us), ready, item (its hash's key)}.
local function card_state(raw)
  if not raw then return nil end
  local role, id, ends, ready, item = string.match(raw, '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
  return {role = role, id = id, ends = tonumber(ends), ready = ready == '1', item = item}
end

-- The state of this consumer's card (raw: its value), nil when free. A card whose item no
-- longer holds it (its end was lost with a queue that was dropped, say) is freed here: so
-- a card is never kept from work by what nothing holds.
local function own_card(raw)
  local s = card_state(raw)
  if not s then return nil end
  local held = redis.call('HGET', s.item, F_HELD)
  if held and string.find(' ' .. held .. ' ', ' ' .. K.card .. ' ', 1, true) then return s end
  redis.call('DEL', K.card)
  return nil
end

-- A host's reservation, or nil: {id, start (us), placed (us), cards (list), item (its hash's
-- key)}. One whose item is no longer queued (it was claimed elsewhere, cancelled, dropped) is
-- nil too: a reservation of another queue of the group is read the same way.
local function resv_state(raw)
  if not raw then return nil end
  local id, start, placed, cards, item = string.match(raw, '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
  local f = redis.call('HMGET', item, F_MEMBER, F_LEASE)
  if not f[1] or f[2] then return nil end
  local list = {}
  for c in string.gmatch(cards, CARD_IN_LIST) do list[#list + 1] = c end
  return {id = id, start = tonumber(start), placed = tonumber(placed), cards = list, item = item}
end

local function resv_text(id, start, placed, cards)
  return id .. ' ' .. string.format('%d', start) .. ' ' .. string.format('%d', placed) .. ' ' ..
         table.concat(cards, CARDS_JOIN) .. ' ' .. item_key(id)
end

local function has(list, value)
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end

-- When an item of span us (false: unknown) started at t (us) ends at the latest.
local function ends_at(t, span)
  if span then return tonumber(t) + tonumber(span) end
  return UNBOUNDED
end

-- What this consumer's card lets it lease now: nil, anything; false, nothing (an item holds it:
-- it is lent, or leads an item of several cards, or the item of a run of its own that has not
-- ended, its worker restarted meanwhile); else the start (us) of its host's reservation that
-- holds it, before which an item must end.
local function card_allows()
  if not slotted() then return nil end
  local v = redis.call('MGET', K.card, K.resv)
  if v[1] and own_card(v[1]) then return false end
  local r = resv_state(v[2])
  if not r then return nil end
  local _, card = my_slot()
  if has(r.cards, card) then return r.start end
  return nil
end

-- Whether an item of span (us, false: unknown) leased at t fits what card_allows said.
local function fits(allows, t, span)
  if allows == nil then return true end
  if allows == false or not span then return false end
  return tonumber(t) + tonumber(span) <= allows
end

-- This consumer's card now runs item id, leased at t (lease_head, take_item, lease_unlimited);
-- the item's F_HELD names it (lease_queued's held).
local function hold_card(id, t, span)
  redis.call('SET', K.card, card_text(CARD_RUN, id, ends_at(t, span), false))
end

-- The F_HELD of an item this consumer leases: its card's key, nil without a slot.
local function my_held()
  if slotted() then return K.card end
  return nil
end

-- Free the cards that item id held (held: its F_HELD). While an item's lease stands, each card
-- it names is held by it and no other (a card held takes nothing else, and a claim takes only
-- free cards), and F_HELD goes when they are freed: so they are deleted without a look.
local function free_cards(held)
  if not held then return end
  local keys = {}
  for key in string.gmatch(held, '%S+') do keys[#keys + 1] = key end
  redis.call('DEL', unpack(keys))
end
