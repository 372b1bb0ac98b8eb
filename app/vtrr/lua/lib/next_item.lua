-- lib/next_item.lua: the item that leaves next: lease_next (dequeue, ack_lease, step), its fair
-- path lease_unlimited (dequeue_unlimited), and take_item (take, a named item out of turn).
-- Relies on: every file before it.

-- Lease head, the item just popped from the front of queue (or its rear: from_rear): item id,
-- its fields f (as lease_next reads them), its partition's limits lim (nil: none), at t for
-- lease_us, topping up triggers to cap; lines, those it was taken from. Returns dequeue's reply.
local function lease_head(head, id, f, lim, from_rear, token, t, lease_us, cap, lines)
  -- (a limited partition's item may have waited below the clock: the clocks never go back)
  if not from_rear then clocks_reach(head[2], f[7]) end
  local held = my_held()
  local expiry = lease_queued(id, f[1], f[2], f[5], lim, token, t, lease_us, held)
  if held then hold_card(id, t, f[9]) end
  local queued = reset_if_drained(lines)
  return {top_up_triggers(cap, queued), id, f[3], f[4] or '0', expiry}
end

-- Take the first item out of lines (lib/pools.lua: queue alone for a consumer without a kind),
-- or queue's last one (from_rear: RedisQueue.get_last, whose items name no kinds): {member,
-- score}, or {} when they are empty.
local function pop_first(lines, from_rear)
  if from_rear then return redis.call('ZPOPMAX', K.queue) end
  if #lines == 1 then return redis.call('ZPOPMIN', K.queue) end
  local head, from = first_of(lines)
  if not head then return {} end
  redis.call('ZREM', from, head[1])
  return head
end

-- A slotted consumer's head (lib/cards.lua): the first item of lines, among their first WALK,
-- that takes one card and fits what its card allows (an item of several cards is claimed by
-- tick.lua, and a card kept for one runs only what ends before its reservation starts), taken
-- out of its line: {member, score}, or {} and whether an item was passed over.
local function pick(lines, allows, t)
  for _, e in ipairs(walk(lines, WALK)) do
    local f = redis.call('HMGET', item_key(task_id_of(e[1])), F_SIZE, F_SPAN)
    if not f[1] and fits(allows, t, f[2]) then
      redis.call('ZREM', e[3], e[1])
      return {e[1], e[2]}, true
    end
  end
  return {}, true
end

-- Lease the next item (dequeue.lua says what each argument is); returns dequeue's reply.
local function lease_next(lease_us, token, consumes, from_rear, limit, cap, placement)
  local t = clock()
  if limit > 0 then reclaim(t, limit, placement) end
  if consumes and redis.call('DECR', K.triggers) < 0 then
    redis.call('SET', K.triggers, 0)
  end

  local lines = my_lines()
  local allows = nil
  if not from_rear then allows = card_allows() end
  -- a lent card leases nothing; its trigger goes to another consumer
  if allows == false then return {top_up_triggers(cap)} end
  local passed = false
  local function first()
    if allows ~= nil or passed then
      local head
      head, passed = pick(lines, allows, t)
      return head
    end
    return pop_first(lines, from_rear)
  end
  local head = first()
  if not head[1] then
    -- nothing that may start: a limited partition whose wait is over may have one now
    if wake_due(tonumber(t), WAKE_BATCH) == 0 then return {top_up_triggers(cap, 0)} end
    head = first()
    if not head[1] then return {top_up_triggers(cap, 0)} end
  end
  local id, key, f, lim
  local parked_again = 0
  while true do
    id = task_id_of(head[1])
    key = item_key(id)
    f = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_PAYLOAD, F_TIMEOUTS, F_ENTRY, F_LIMITED,
                   F_POOL, F_SIZE, F_SPAN)
    if (f[8] or (allows ~= nil and not fits(allows, t, f[9]))) and not passed then
      -- an item this card may not take now was first: back in its line, and the walk instead
      redis.call('ZADD', line(f[7]), head[2], head[1])
      passed = true
      if f[8] then  -- one of several cards: it keeps its reservation before anything passes it
        reserve_turn(lines, t)
        allows = card_allows()
      end
      head = first()
      if not head[1] then return {top_up_triggers(cap, 0)} end
      id = task_id_of(head[1])
      key = item_key(id)
      f = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_PAYLOAD, F_TIMEOUTS, F_ENTRY,
                     F_LIMITED, F_POOL, F_SIZE, F_SPAN)
    end
    lim = f[6] and limits_of(f[1])
    -- Another queue of its group may have started one of its partition's items since it was
    -- put here: it starts only if it still may, else it waits in its park.
    local ok, at = true, nil
    if lim then ok, at = may_start(f[1], lim, tonumber(f[2]), tonumber(t)) end
    if ok then break end
    redis.call('HDEL', K.reps, f[1])
    redis.call('ZADD', K.park .. f[1], head[2], head[1])
    count_parked(1)
    if at then redis.call('ZADD', K.waits, at, f[1]) end
    parked_again = parked_again + 1
    if parked_again >= RECHECKS then return {top_up_triggers(cap)} end
    head = first()
    if not head[1] then return {top_up_triggers(cap, 0)} end
  end
  return lease_head(head, id, f, lim, from_rear, token, t, lease_us, cap, lines)
end

-- lease_next on the fair path (dequeue_unlimited.lua): from the front, consuming no trigger and
-- keeping none (cap < 0), by an operation that names none of the limits' keys but waits, so
-- that it costs what a dequeue did before limits. Returns dequeue's reply; or nil, having
-- changed nothing, where lease_next would need what it does not name: to reclaim an expired
-- lease, to wake a partition whose wait is over, to lease a limited partition's item, or to
-- lease queue's last item (the queue may drain: its pools' lines are then looked at). Only a
-- consumer without a kind calls it (FairQueue): one of a kind leases from its pools too. A
-- slotted one (dequeue_card.lua: held, its card's key) marks its card as a lease_head does.
local function lease_unlimited(lease_us, token, limit, held)
  local t = clock()
  if limit > 0 and redis.call('ZRANGEBYSCORE', K.inflight, '-inf', t, 'LIMIT', 0, 1)[1] then
    return nil
  end
  -- a slotted consumer's card that an item holds, or that a reservation keeps: the full path
  if held and card_allows() ~= nil then return nil end
  local head = redis.call('ZPOPMIN', K.queue)
  if not head[1] then
    if redis.call('ZRANGEBYSCORE', K.waits, '-inf', tonumber(t), 'LIMIT', 0, 1)[1] then
      return nil
    end
    return {0}
  end
  local id = task_id_of(head[1])
  local f = redis.call('HMGET', item_key(id), F_PARTITION, F_WEIGHT, F_PAYLOAD, F_TIMEOUTS,
                       F_ENTRY, F_LIMITED, F_SIZE, F_SPAN)
  if f[6] or f[7] or redis.call('ZCARD', K.queue) == 0 then
    redis.call('ZADD', K.queue, head[2], head[1])  -- back as it was (its score as Redis wrote it)
    return nil
  end
  -- lease_head's steps for an item without limits, from the front, and no triggers kept; queue
  -- still holds an item, so it has not drained
  redis.call('SET', K.cvt, head[2])
  local expiry = lease_queued(id, f[1], f[2], f[5], nil, token, t, lease_us, held)
  if held then hold_card(id, t, f[8]) end
  return {0, id, f[3], f[4] or '0', expiry}
end

-- Lease queued item id now, wherever it is in line, as a dequeue leases (take.lua), when it may
-- start: not when it is not queued or its partition's limits hold it back. The queue's clock
-- moves to where a dequeue now would move it, the score of the first item in line (perhaps
-- this one), and never back: so no item left ahead of it is passed by the clock, and no one
-- who arrives later gets ahead of them. Returns dequeue's reply.
local function take_item(id, token, lease_us, cap)
  local member = queued_member(id)
  if not member then return {0} end
  local f = redis.call('HMGET', item_key(id), F_PARTITION, F_WEIGHT, F_PAYLOAD, F_TIMEOUTS,
                       F_ENTRY, F_LIMITED, F_POOL, F_SIZE, F_SPAN)
  local lim = f[6] and limits_of(f[1])
  local t = clock()
  -- an item of several cards is claimed by tick.lua; a lent card, or one kept for such an item
  -- that this one would not end before, takes nothing
  if f[8] or not fits(card_allows(), t, f[9]) then return {top_up_triggers(cap)} end
  -- a limited partition's item is in its line exactly while it is its next one and may start
  if lim then refresh(f[1], lim, tonumber(t)) end
  local own = line(f[7])
  if not redis.call('ZSCORE', own, member) then return {top_up_triggers(cap)} end
  local head = redis.call('ZRANGE', own, 0, 0, 'WITHSCORES')
  if tonumber(head[2]) > current_vt() then redis.call('SET', K.cvt, head[2]) end
  redis.call('ZREM', own, member)
  local held = my_held()
  local expiry = lease_queued(id, f[1], f[2], f[5], lim, token, t, lease_us, held)
  if held then hold_card(id, t, f[9]) end
  local queued = reset_if_drained()
  return {top_up_triggers(cap, queued), id, f[3], f[4] or '0', expiry}
end
