-- lib/parking.lua: a limited partition's park: its next item in queue exactly while it may
-- start (refresh), the parked count, waking the partitions whose wait is over, an item that
-- leaves flight (landed), and where a queued item is in line with the parks counted (rank_of).
-- Relies on: keys.lua (K), clock.lua (task_id_of), pools.lua, partitions.lua (item_key),
-- limits.lua.

-- Parked items counted up or down; the count's key goes once none is parked.
local function count_parked(delta)
  if redis.call('INCRBY', K.parked, delta) <= 0 then redis.call('DEL', K.parked) end
end

-- Move a member from p's park into its line (queue, or its pool's), or back, keeping reps and
-- the parked count.
local function unpark(p, member, score)
  redis.call('ZREM', K.park .. p, member)
  count_parked(-1)
  redis.call('ZADD', line_of(task_id_of(member)), score, member)
  redis.call('HSET', K.reps, p, member)
end

local function park(p, member, score)
  redis.call('ZREM', line_of(task_id_of(member)), member)
  redis.call('HDEL', K.reps, p)
  redis.call('ZADD', K.park .. p, score, member)
  count_parked(1)
end

-- Whether score a, member ma come before score b, member mb (a ZSET's order).
local function before(a, ma, b, mb)
  return a < b or (a == b and ma < mb)
end

-- Limited partition p's next queued item: member, score, and whether it is in queue; nil when
-- none is queued. A parked item that now goes first (put at the front) takes the place of the
-- one in queue.
local function next_of(p)
  local rep = redis.call('HGET', K.reps, p)
  local head = redis.call('ZRANGE', K.park .. p, 0, 0, 'WITHSCORES')
  if rep then
    local score = redis.call('ZSCORE', line_of(task_id_of(rep)), rep)
    if not head[1] or before(tonumber(score), rep, tonumber(head[2]), head[1]) then
      return rep, score, true
    end
    park(p, rep, score)
  end
  if head[1] then return head[1], head[2], false end
  return nil
end

-- Make queue hold p's next item exactly while p may start it (and waits say when it may,
-- where time will let it); every operation that changes p's items or limits ends here.
local function refresh(p, lim, now)
  if not lim then return end
  local member, score, in_queue = next_of(p)
  if not member then
    redis.call('ZREM', K.waits, p)
    return
  end
  local w = tonumber(redis.call('HGET', item_key(task_id_of(member)), F_WEIGHT))
  local ok, at = may_start(p, lim, w, now)
  if ok then
    redis.call('ZREM', K.waits, p)
    if not in_queue then unpark(p, member, score) end
    return
  end
  if at then
    redis.call('ZADD', K.waits, at, p)
  else
    redis.call('ZREM', K.waits, p)
  end
  if in_queue then park(p, member, score) end
end

-- Refresh the partitions whose wait is over at now (us), at most `most`; returns how many.
local function wake_due(now, most)
  local due = redis.call('ZRANGEBYSCORE', K.waits, '-inf', now, 'LIMIT', 0, most)
  for _, p in ipairs(due) do
    local lim = limits_of(p)
    if lim then refresh(p, lim, now) else redis.call('ZREM', K.waits, p) end
  end
  return #due
end

-- The item of a limited partition p left flight (acked, released, reclaimed): the other
-- queues of its group learn it at their next wake.
local function landed(p, id)
  redis.call('HDEL', K.live .. p, id)
  redis.call('SADD', K.freed, p)
end

-- How many items of zset come before member, whose score is raw (as Redis prints it).
local function count_before(zset, raw, member)
  local n = redis.call('ZCOUNT', zset, '-inf', '(' .. raw)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', zset, raw, raw)) do
    if m < member then n = n + 1 end
  end
  return n
end

-- A queued member's place in dispatch order among the items of its line (queue, or its pool's)
-- and those parked by each of the limited partitions named in `limited` (HKEYS of limits).
-- O(log N) per limited partition; without any, its rank in its line.
local function rank_of(member, limited)
  local own = line_of(task_id_of(member))
  if #limited == 0 then return redis.call('ZRANK', own, member) end
  local raw = redis.call('ZSCORE', own, member)
  if not raw then
    local p = redis.call('HGET', item_key(task_id_of(member)), F_PARTITION)
    raw = redis.call('ZSCORE', K.park .. p, member)
  end
  local n = count_before(own, raw, member)
  for _, p in ipairs(limited) do n = n + count_before(K.park .. p, raw, member) end
  return n
end

-- The zset that holds member of partition p (its park, or its line), for code that moves it.
local function holder(p, member, lim)
  if lim and redis.call('HGET', K.reps, p) ~= member then return K.park .. p end
  return line_of(task_id_of(member))
end
