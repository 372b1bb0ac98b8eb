-- limit.lua: set or clear a partition's limits: the most of its items in flight at once, and
-- the most weight its items in flight may still hold (each item's weight less what it has
-- used since its lease began, at a weight a second) with the next one's added. Its queued
-- items are parked or put back at once, and its items in flight counted (those already in
-- flight as if their lease began now: their start is not kept). O(n log N) for its n items
-- queued, plus one read per item in flight of the whole queue.
-- KEYS: queue item inflight seq triggers items limits parked reps waits park live
-- KEYS: trigger_message broker
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV[1] partition  ARGV[2] most in flight (-1: no limit)  ARGV[3] most weight held (-1: no
-- limit)  ARGV[4] weight an item in flight uses up a second  ARGV[5] trigger cap
-- Reply: {triggers to publish}
local p, n, held, rate = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local cap = tonumber(ARGV[5])
local was = limits_of(p)
local now = clock()
if n < 0 and held < 0 then
  if was then
    -- no limits any more: its items all go back into queue
    local parked = redis.call('ZRANGE', K.park .. p, 0, -1, 'WITHSCORES')
    for i = 1, #parked, 2 do
      redis.call('ZADD', line_of(task_id_of(parked[i])), parked[i + 1], parked[i])
    end
    if #parked > 0 then count_parked(-#parked / 2) end
    -- (its items in flight leave live as they land: other queues of its group may count them)
    redis.call('DEL', K.park .. p)
    redis.call('HDEL', K.reps, p)
    redis.call('HDEL', K.limits, p)
    redis.call('ZREM', K.waits, p)
  end
  return {top_up_triggers(cap)}
end
redis.call('HSET', K.limits, p, limits_text(ARGV[2], ARGV[3], rate))
if not was then
  local prefix = items_prefix(p)
  local entries = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix, '(' .. prefix .. AFTER_FAIR_MARK)
  for _, entry in ipairs(entries) do
    local member = string.sub(entry, #prefix + 1)
    local own = line_of(task_id_of(member))
    local score = redis.call('ZSCORE', own, member)
    if score then
      redis.call('ZREM', own, member)
      redis.call('ZADD', K.park .. p, score, member)
      count_parked(1)
      redis.call('HSET', item_key(task_id_of(member)), F_LIMITED, '1')
    end
  end
  for _, id in ipairs(redis.call('ZRANGE', K.inflight, 0, -1)) do
    local f = redis.call('HMGET', item_key(id), F_PARTITION, F_WEIGHT)
    if f[1] == p then
      redis.call('HSET', item_key(id), F_LIMITED, '1')
      redis.call('HSET', K.live .. p, id, now .. ' ' .. f[2])
    end
  end
end
refresh(p, limits_of(p), tonumber(now))
return {top_up_triggers(cap)}
