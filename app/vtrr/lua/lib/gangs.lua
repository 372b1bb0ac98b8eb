-- lib/gangs.lua: the claim of an item of several cards: all of a host's cards it takes, in one
-- step (tick.lua; docs/vtrr.md, "Items of several cards").
-- Relies on: every file before it (cards.lua, reserve.lua, next_item.lua).

-- The cards of host that g may take now with this consumer's card leading: {cards}, mine
-- first, or nil. A card kept for another item lends itself only where g ends before that
-- one's start, by its span; one kept for g is taken first.
local function claimable(g, host, card, kind, now, ttl)
  if g.pool and not has(kinds_of(g.pool), kind) then return nil end
  local r = resv_state(redis.call('GET', resv_key(host)))
  local names, states = cards_of(host, kind, now, ttl)
  local ours, others = {}, {}
  for i, c in ipairs(names) do
    local kept = r and has(r.cards, c)
    local usable = not states[i]
    if usable and kept and r.id ~= g.id then usable = fits(r.start, now, g.span) end
    if usable and c ~= card then
      if kept and r.id == g.id then ours[#ours + 1] = c else others[#others + 1] = c end
    end
  end
  local cards = {card}
  for _, list in ipairs({ours, others}) do
    for _, c in ipairs(list) do
      if #cards < g.size then cards[#cards + 1] = c end
    end
  end
  if #cards < g.size then return nil end
  return cards
end

-- Lease g to this consumer, taking cards on host (the first leads): all in this one call.
-- Returns {expiry, payload, timeouts}.
local function claim(g, host, cards, token, t, lease_us)
  local key = item_key(g.id)
  local f = redis.call('HMGET', key, F_ENTRY, F_PAYLOAD, F_TIMEOUTS)
  redis.call('ZREM', g.line, g.member)
  clocks_reach(g.score, g.pool)
  local keys = {}
  for i, c in ipairs(cards) do keys[i] = card_key(host, c) end
  local expiry = lease_queued(g.id, g.p, g.w, f[1], g.lim, token, t, lease_us,
                              table.concat(keys, ' '))
  if g.lim then
    -- it holds its size in cards: its partition's next item may start only within what is left
    redis.call('HSET', K.live .. g.p, g.id, t .. ' ' .. g.w .. ' ' .. g.size)
    refresh(g.p, g.lim, tonumber(t))
  end
  local ends = ends_at(t, g.span)
  for i, k in ipairs(keys) do
    local role = CARD_LENT
    if i == 1 then role = CARD_LEAD end
    redis.call('SET', k, card_text(role, g.id, ends, i == 1))
  end
  if g.resv then
    local r = resv_state(redis.call('GET', resv_key(g.resv)))
    if r and r.id == g.id then redis.call('DEL', resv_key(g.resv)) end
    redis.call('HDEL', key, F_RESV)
  end
  return {expiry, f[2], f[3] or '0'}
end

