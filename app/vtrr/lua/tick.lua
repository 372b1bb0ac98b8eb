-- tick.lua: a slotted consumer's look at the items of several cards (lib/gangs.lua), made every
-- fraction of a second by its worker: its card is seen live; the items whose turn has come keep
-- a reservation each, on the host whose cards free first; and where this consumer's host can
-- start one now, its cards are all taken in this call, this consumer's leading, and the item
-- leased to it. The reservations of items this consumer sees whose turn has gone are let go.
-- KEYS: queue item inflight cvt pvt pqueued idle seq triggers stats queued_weight items
-- KEYS: limits parked reps waits park live freed
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- KEYS: card resv fleet
-- ARGV[1] how long a card stays live unseen (us)  ARGV[2] lease microseconds
-- ARGV[3] the new lease token  ARGV[4] this consumer's kind ("": none)  ARGV[5] its worker's name
-- ARGV[6] how long past its start a reservation waits before it is placed again (us)
-- ARGV[7] trigger cap (-1: no triggers)  ARGV[8] 1: keep reservations, 0: none (a comparison's)
-- Reply: {role, task id, ready} of the item that holds this consumer's card when one other
--        than its own run of one card does (CARD_LEAD or CARD_LENT); else {"", triggers to publish} when
--        nothing was claimed, or {CARD_LEAD, task id, 1, triggers to publish, payload,
--        timeouts, lease expiry (us)} for the item this call leased to it.
local ttl, lease_us, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local kind, worker, grace, cap = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local reserve = ARGV[8] == '1'
if kind == '' then kind = '-' end
local t = clock()
local now = tonumber(t)
local host, card = my_slot()
-- what a lease that meets an item of several cards at its head needs to keep its reservation
redis.call('SET', K.fleet .. 'config', ARGV[1] .. ' ' .. ARGV[6] .. ' ' .. ARGV[8])
redis.call('SADD', K.fleet .. 'hosts', host)
redis.call('HSET', slots_key(host), card, kind .. ' ' .. t .. ' ' .. worker)
local mine = own_card(redis.call('GET', K.card))
if mine and mine.role ~= CARD_RUN then
  return {mine.role, mine.id, mine.ready and 1 or 0}
end

local lines = my_lines()
local taken = {}
local turn = at_turn(lines, now)
if reserve then drop_stale(turn, lines) end
for _, g in ipairs(turn) do
  local cards = not mine and claimable(g, host, card, kind, now, ttl)
  if cards then
    local leased = claim(g, host, cards, token, t, lease_us)
    local triggers = top_up_triggers(cap, reset_if_drained(lines))
    return {CARD_LEAD, g.id, 1, triggers, leased[2], leased[3], leased[1]}
  end
  if reserve then keep_reservation(g, now, ttl, grace, taken) end
end
return {'', 0}
