-- enqueue.lua: add a batch of items of one partition, all or none; with hook arguments, the
-- hooks' `admit` and `enqueued` run in the same call, around the queue's own checks.
-- KEYS: queue item cvt pvt pqueued idle seq triggers stats wake queued_weight items
-- KEYS: limits parked reps waits park live usage usage_at
-- KEYS: trigger_message broker
-- KEYS: pool pools kinds kind kpools kclock
-- ARGV[1] partition  ARGV[2] trigger cap (-1: no triggers)  ARGV[3] "front" or "fair"
-- ARGV[4] wake (1: push a wake token per item)
-- ARGV[5] most items the partition may have queued (-1: no limit)
-- ARGV[6] half-life of the partitions' remembered usage, seconds (0: no memory)
-- ARGV[7] m, the number of arguments for the hooks (0: no hook runs)  ARGV[8 .. 7+m] those
-- ARGV[8+m ..] per item, ITEM_ARGS each: task id, cost (weight x price / share), weight,
-- payload, pool ("": any consumer; else the kinds that may take it, lib/pools.lua), price
-- ("": 1), size (cards it takes at once, "": 1; lib/cards.lua), span (us, "": unknown)
-- The hooks (Hooks.lua; none by default) are called, when m > 0, as admit(partition, args)
-- before anything else: a value other than nil stops the call, nothing of the queue written;
-- then, once the queue's checks have passed and before its writes, enqueued(partition, args).
-- Either may return redis.error_reply(...) to fail the call (nothing more of the queue's
-- written; what the hook wrote itself stays).
-- Reply: {triggers to publish, the hooks' reply (false: none), score of item 1, ...}, or
--        {0, admit's reply} when admit stopped the call.
-- Errors, after which nothing of the queue is written: "DUPLICATE <task id>" when an id is
--        queued or in flight, or appears twice in the batch; "FULL <limit>" when the batch
--        would take the partition past its limit; "OVERLIMIT <most weight held>" when an item
--        of a limited partition weighs more than its items in flight may hold.
local partition, cap, front, wake = ARGV[1], tonumber(ARGV[2]), ARGV[3] == FRONT, ARGV[4] == '1'
local limit, half_life, m = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local first = 8 + m
local n = (#ARGV - first + 1) / ITEM_ARGS
local hook_args = {}
for i = 8, 7 + m do hook_args[#hook_args + 1] = ARGV[i] end
local hooked = m > 0

local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

if hooked and HOOKS.admit then
  local stop = HOOKS.admit(partition, hook_args)
  if failed(stop) then return stop end
  if stop ~= nil then return {0, stop} end
end
if limit >= 0 and tonumber(redis.call('HGET', K.pqueued, partition) or '0') + n > limit then
  return redis.error_reply(FULL .. ' ' .. ARGV[5])
end
local lim = limits_of(partition)
if lim and lim.held >= 0 then
  for i = first + 2, #ARGV, ITEM_ARGS do
    if tonumber(ARGV[i]) > lim.held then
      return redis.error_reply(OVERLIMIT .. ' ' .. string.format('%.17g', lim.held))
    end
  end
end
local seen = {}
for i = first, #ARGV, ITEM_ARGS do
  local id = ARGV[i]
  if seen[id] or redis.call('EXISTS', item_key(id)) == 1 then
    return redis.error_reply(DUPLICATE .. ' ' .. id)
  end
  seen[id] = true
end
local reply = {0, false}
if hooked and HOOKS.enqueued then
  local said = HOOKS.enqueued(partition, hook_args)
  if failed(said) then return said end
  if said ~= nil then reply[2] = said end
end
if half_life > 0 and not front then
  -- weight x price / cost
  local share = tonumber(ARGV[first + 2]) * (tonumber(ARGV[first + 5]) or 1)
                / tonumber(ARGV[first + 1])
  local pool = ARGV[first + 4] ~= '' and ARGV[first + 4]  -- (the first item's: its clock)
  come_back(partition, half_life, share, tonumber(clock()), pool)
end
for i = first, #ARGV, ITEM_ARGS do
  local id, cost, weight = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local pool = ARGV[i + 4] ~= '' and ARGV[i + 4]
  local score, member = placement(id, partition, cost, front, pool)
  local entry = queue(partition, weight, score, member, lim, pool)
  redis.call('HSET', item_key(id), F_PARTITION, partition, F_COST, cost, F_WEIGHT, weight,
             F_PAYLOAD, ARGV[i + 3], F_MEMBER, member, F_ENTRY, entry)
  if pool then redis.call('HSET', item_key(id), F_POOL, pool) end
  if ARGV[i + 5] ~= '' then redis.call('HSET', item_key(id), F_PRICE, ARGV[i + 5]) end
  if lim then redis.call('HSET', item_key(id), F_LIMITED, '1') end
  if ARGV[i + 6] ~= '' then redis.call('HSET', item_key(id), F_SIZE, ARGV[i + 6]) end
  if ARGV[i + 7] ~= '' then redis.call('HSET', item_key(id), F_SPAN, ARGV[i + 7]) end
  if half_life > 0 then redis.call('HSET', item_key(id), F_HALF_LIFE, ARGV[6]) end
  reply[#reply + 1] = tostring(score)
end
if lim then refresh(partition, lim, tonumber(clock())) end
count(STAT_ENQUEUED, n)
if wake then
  for _ = 1, math.min(n, 64) do redis.call('RPUSH', K.wake, 1) end
  redis.call('LTRIM', K.wake, -64, -1)
end
reply[1] = top_up_triggers(cap)
return reply
