-- _lib.lua: the helpers every operation shares. On Redis 7 they are one function library's
-- locals, built once when it loads; on Redis 6.2 this file is prepended to each script.
-- What the Python spells too (an item's fields F_*, the counters STAT_*, the member's layout,
-- the words of ARGV and of error replies) is not spelled here: app/vtrr/layout.py puts its
-- constants before this file, as locals of their own.
--
-- Each operation declares the keys it touches in its header (`-- KEYS: queue meta ...`), and
-- `bind` gives them their names in `K` at the start of each call; a name that the operation
-- did not declare is an error. All keys share the hash tag {name}. The names:
--   queue            ZSET  member -> virtual start time
--   item             the prefix of the items' own keys: item .. <task id> is a HASH from
--                          enqueue until ack: F_PARTITION, F_COST (weight / share), F_WEIGHT,
--                          F_PAYLOAD, F_MEMBER its queue member, F_ENTRY its entry in items,
--                          F_LEASE its lease token while leased,
--                          F_TIMEOUTS times its lease expired and was reclaimed (absent: 0),
--                          F_CREDITED the lease credited since the item was last charged
--   inflight         ZSET  task id -> lease expiry (Redis TIME, whole microseconds)
--   cvt              STRING the queue's virtual time
--   pvt              HASH  partition -> virtual finish time of its last item
--   pqueued          HASH  partition -> number of its items queued
--   idle             ZSET  partition (none queued) -> its virtual finish time
--   seq              STRING arrival counter
--   triggers         STRING Celery triggers published and not yet consumed
--   stats            HASH  counter -> value
--   wake             LIST  tokens that wake blocked RedisQueue.get calls
--   queued_weight    STRING sum of the weights of the items queued
--   items            ZSET  "<#p>:<p>:<queue member>" -> 0, one per queued item,
--                          so that ZRANGEBYLEX lists a partition's items in order
--   trigger_message  STRING a Celery trigger as Kombu's Redis transport stores it
--                          (set by a VTRRQueue whose broker is this Redis)
--   broker           LIST  the Celery queue those triggers go to
--   limits           HASH  partition -> "<most in flight> <most weight held> <weight a second>"
--                          (-1: no such limit); a partition named here is a limited one
--   parked           STRING number of queued items that are parked (in a park, not in queue)
--   reps             HASH  limited partition -> its one member in queue, if any
--   waits            ZSET  limited partition -> when (Redis TIME, us) the weight its items in
--                          flight hold will have run down far enough for its next item
--   park             the prefix of each limited partition's parked items: park .. p is a ZSET
--                          member -> score, like queue
--   live             the prefix of each limited partition's items in flight: live .. p is a
--                          HASH task id -> "<lease start, us> <weight>"
--   freed            SET   limited partitions whose items in flight went down since the last
--                          wake (wake.lua), for the other queues of their group
--   usage            HASH  partition -> "<weight used, decayed> <when, us>": what its items
--                          used, remembered with a half-life (items that carry F_HALF_LIFE)
--   usage_at         ZSET  partition -> when its usage last changed, to forget the oldest
-- Queues that count their partitions' items in flight together (a limits group: an account's
-- jobs over a service's queues) share live, freed, usage and usage_at; the rest of these keys
-- are each queue's.
--
-- A limited partition's queued items are parked, all but at most one: its next item (the
-- lowest score, then member), which is in queue, and named in reps, exactly while the
-- partition's limits let it start one more. So a dequeue's ZPOPMIN only ever meets items that
-- may start, and never walks past a held-back partition's items; a partition without limits
-- pays nothing for any of this. Its items carry F_LIMITED, so that the hot path learns it
-- from a read it makes anyway.
--
-- An item is queued while its hash has no lease token (F_LEASE), and in flight while it has
-- one. A queue member is FAIR_MARK or FRONT_MARK, a counter (COUNTER_FORMAT), SEPARATOR, then
-- the task id (from TASK_ID_AT). Equal scores sort by member, so items of equal virtual time
-- leave in arrival order (FAIR_MARK and the arrival counter); FRONT_MARK sorts first and marks
-- items put at the front, whose counter runs down from FRONT_BASE so the latest one put there
-- leaves first.

local K  -- this call's keys, by name (see bind)

-- Redis's clock in whole microseconds, as a string. Lease expiries are kept in microseconds:
-- an integer parses and prints several times faster than a decimal fraction, which was the
-- costliest step of a dequeue.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6)
end

-- The clock plus us microseconds, as a score string (%d: an integer, printed exactly).
local function clock_plus(us)
  return string.format('%d', tonumber(clock()) + us)
end

local function task_id_of(member)
  return string.sub(member, TASK_ID_AT)
end

local function arrival_member(id)
  return FAIR_MARK .. string.format(COUNTER_FORMAT, redis.call('INCR', K.seq)) .. SEPARATOR .. id
end

local function front_member(id)
  local n = FRONT_BASE - redis.call('INCR', K.seq)
  return FRONT_MARK .. string.format(COUNTER_FORMAT, n) .. SEPARATOR .. id
end

local function current_vt()
  return tonumber(redis.call('GET', K.cvt) or '0')
end

-- The lowest score queued, or the current virtual time when nothing is queued.
local function front_score()
  local head = redis.call('ZRANGE', K.queue, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return current_vt()
end

local function count(stat, n)
  redis.call('HINCRBY', K.stats, stat, n)
end

-- Forget idle partitions that the virtual time has passed: max(cvt, their vt) is cvt anyway.
-- The virtual time stands still while every item served is a newcomer's, so idle partitions are
-- also capped at IDLE_SLACK more than the partitions queued: those nearest the clock go first,
-- each forgiven less than the cost of its last item.
local IDLE_SLACK = 64
local function prune_idle(limit)
  local gone = redis.call('ZRANGEBYSCORE', K.idle, '-inf', current_vt(), 'LIMIT', '0', limit)
  if #gone > 0 then
    redis.call('HDEL', K.pvt, unpack(gone))
    redis.call('ZREM', K.idle, unpack(gone))
  end
  local excess = redis.call('ZCARD', K.idle) - redis.call('HLEN', K.pqueued) - IDLE_SLACK
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', K.idle, math.min(excess, limit))
    for i = 1, #popped, 2 do redis.call('HDEL', K.pvt, popped[i]) end
  end
end

-- One more (delta 1) or one fewer (delta -1) item of a partition queued. A partition with none
-- queued keeps its virtual time in idle_partitions until the queue's virtual time passes it;
-- idle partitions are pruned here, the only place where their number grows.
local function partition_queued(p, delta)
  local n = redis.call('HINCRBY', K.pqueued, p, delta > 0 and '1' or '-1')
  if n <= 0 then
    redis.call('HDEL', K.pqueued, p)
    local vt = redis.call('HGET', K.pvt, p)
    if vt then redis.call('ZADD', K.idle, vt, p) end
    prune_idle(16)
  elseif n == 1 and delta > 0 then
    redis.call('ZREM', K.idle, p)
  end
end

-- The running sum of the queued items' weights, moved by one item's weight w (a string; sign 1
-- or -1), so that readers (start estimates) learn the work queued in O(1).
local function weigh(w, sign)
  if w then redis.call(sign > 0 and 'INCRBY' or 'DECRBY', K.queued_weight, w) end
end

-- Once nothing is queued, the virtual clock starts again from zero. Returns how many are queued.
local function reset_if_drained()
  local queued = redis.call('ZCARD', K.queue)
  if queued == 0 and not redis.call('GET', K.parked) then
    redis.call('DEL', K.cvt, K.pvt, K.idle, K.pqueued, K.queued_weight, K.items)
  end
  return queued
end

-- The index of queued items by partition (items): every queue member, prefixed with its
-- partition and that partition's length so that one partition's prefix is never another's.
-- All scores are 0, so ZRANGEBYLEX lists a partition's front-placed items (FRONT_MARK) and then
-- its fair ones (FAIR_MARK) in arrival order, in O(log N) plus what it returns.
local function items_prefix(p)
  return #p .. SEPARATOR .. p .. SEPARATOR
end

local function unindex_item(entry)
  redis.call('ZREM', K.items, entry)
end

-- The key of an item's hash.
local function item_key(id)
  return K.item .. id
end

-- Per-partition limits (see the keys above). -----------------------------------------------

-- A partition's limits, or nil when it has none: {n = most in flight, held = most weight its
-- items in flight may still hold, rate = weight an item in flight uses up a second}; -1: none.
local function limits_of(p)
  local raw = redis.call('HGET', K.limits, p)
  if not raw then return nil end
  local n, held, rate = string.match(raw, '^(%S+) (%S+) (%S+)$')
  return {n = tonumber(n), held = tonumber(held), rate = tonumber(rate)}
end

-- Parked items counted up or down; the count's key goes once none is parked.
local function count_parked(delta)
  if redis.call('INCRBY', K.parked, delta) <= 0 then redis.call('DEL', K.parked) end
end

-- What each of p's items in flight still holds at now (us): its weight less what it has used
-- since its lease began, never below 0; and their sum.
local function still_held(p, lim, now)
  local left, sum = {}, 0
  for i, v in ipairs(redis.call('HVALS', K.live .. p)) do
    local start, w = string.match(v, '^(%d+) (%S+)$')
    local l = math.max(0, tonumber(w) - (now - tonumber(start)) * lim.rate / 1e6)
    left[i] = l
    sum = sum + l
  end
  return left, sum
end

-- The least microseconds after which what `left` holds, each running down at rate a second,
-- sums to at most target (>= 0): a bisection over whole microseconds, exact at its end.
local function run_down(left, rate, target)
  local lo, hi = 0, 0
  for _, l in ipairs(left) do hi = math.max(hi, math.ceil(l / rate * 1e6)) end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local sum = 0
    for _, l in ipairs(left) do sum = sum + math.max(0, l - mid * rate / 1e6) end
    if sum <= target then hi = mid else lo = mid + 1 end
  end
  return lo
end

local HELD_SLACK = 1e-9  -- what float sums may be off by
local WAKE_BATCH = 16  -- most partitions a dequeue that found nothing wakes
local RECHECKS = 8  -- most items one lease may find it must park again (their group's doing)

-- Whether limited partition p may start one more item, of weight w, at now (us); when only
-- the weight it holds stops it and that runs down, also when it may (us). An item starts
-- alone whatever its weight: nothing waits forever for a limit lowered below it.
local function may_start(p, lim, w, now)
  local running = redis.call('HLEN', K.live .. p)
  if lim.n >= 0 and running >= lim.n then return false, nil end
  if lim.held < 0 or running == 0 then return true, nil end
  local left, sum = still_held(p, lim, now)
  local target = lim.held - w
  if sum <= target + HELD_SLACK then return true, nil end
  if target < 0 or lim.rate <= 0 then return false, nil end
  return false, now + run_down(left, lim.rate, target)
end

-- Move a member from p's park into queue, or back, keeping reps and the parked count.
local function unpark(p, member, score)
  redis.call('ZREM', K.park .. p, member)
  count_parked(-1)
  redis.call('ZADD', K.queue, score, member)
  redis.call('HSET', K.reps, p, member)
end

local function park(p, member, score)
  redis.call('ZREM', K.queue, member)
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
    local score = redis.call('ZSCORE', K.queue, rep)
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

-- A queued member's place in dispatch order among every item queued: those in queue and
-- those parked by each of the limited partitions named in `limited` (HKEYS of limits). O(log N)
-- per limited partition; without any, its rank in queue.
local function rank_of(member, limited)
  if #limited == 0 then return redis.call('ZRANK', K.queue, member) end
  local raw = redis.call('ZSCORE', K.queue, member)
  if not raw then
    local p = redis.call('HGET', item_key(task_id_of(member)), F_PARTITION)
    raw = redis.call('ZSCORE', K.park .. p, member)
  end
  local n = count_before(K.queue, raw, member)
  for _, p in ipairs(limited) do n = n + count_before(K.park .. p, raw, member) end
  return n
end

-- The zset that holds member of partition p (its park, or queue), for code that moves it.
local function holder(p, member, lim)
  if lim and redis.call('HGET', K.reps, p) ~= member then return K.park .. p end
  return K.queue
end

-- Usage with memory (a half-life). ----------------------------------------------------------
-- A partition's used weight decays by half every h seconds; once it has not changed for
-- FORGET_AFTER half-lives (a thousandth of a millionth of it left) it is forgotten, so that
-- what is kept is bounded by the partitions of that window, not by history.
local FORGET_AFTER = 30

local function used_by(p, h, now)
  local raw = redis.call('HGET', K.usage, p)
  if not raw then return 0 end
  local v, at = string.match(raw, '^(%S+) (%d+)$')
  return tonumber(v) * 2 ^ (-(now - tonumber(at)) / 1e6 / h)
end

-- p's items used w more (weight units), at now (us).
local function remember_use(p, w, h, now)
  local u = used_by(p, h, now) + w
  local at = string.format('%d', now)
  redis.call('HSET', K.usage, p, string.format('%.17g', u) .. ' ' .. at)
  redis.call('ZADD', K.usage_at, at, p)
  local stale = string.format('%d', now - FORGET_AFTER * h * 1e6)
  local gone = redis.call('ZRANGEBYSCORE', K.usage_at, '-inf', stale, 'LIMIT', 0, 16)
  if #gone > 0 then
    redis.call('HDEL', K.usage, unpack(gone))
    redis.call('ZREM', K.usage_at, unpack(gone))
  end
end

-- A partition that comes back (nothing of it queued) starts after the queue's clock by its
-- remembered usage over its share: one that used X more than another lets the other have
-- about X of service first. Its clock only moves forward.
local function come_back(p, h, share, now)
  if redis.call('HEXISTS', K.pqueued, p) == 1 then return end
  local u = used_by(p, h, now)
  if u <= 0 then return end
  local vt = current_vt() + u / share
  if vt > tonumber(redis.call('HGET', K.pvt, p) or '0') then
    redis.call('HSET', K.pvt, p, string.format('%.17g', vt))
  end
end

-- Where an item goes: fair placement starts it at max(queue vt, its partition's vt) and moves
-- the partition's vt on by the item's cost c; front placement puts it ahead of everything and
-- charges nothing more (it is an item that already had its turn, or an operator's choice).
-- Returns its score and its queue member; queue() then puts it there.
local function placement(id, p, c, front)
  if front then return front_score(), front_member(id) end
  local score = math.max(current_vt(), tonumber(redis.call('HGET', K.pvt, p) or '0'))
  redis.call('HSET', K.pvt, p, score + tonumber(c))
  return score, arrival_member(id)
end

-- Put an item of partition p and weight w into the queue at score, as member. Returns its entry
-- in the index, which the item's hash keeps (x) so that taking it out costs no arithmetic.
local function queue(p, w, score, member, limited)
  local entry = items_prefix(p) .. member
  redis.call('ZADD', K.items, 0, entry)
  partition_queued(p, 1)
  weigh(w, 1)
  if limited then
    redis.call('ZADD', K.park .. p, score, member)
    redis.call('INCR', K.parked)
  else
    redis.call('ZADD', K.queue, score, member)
  end
  return entry
end

-- Put a leased item back into the queue (release, reclaim): out of flight, then placed again.
-- A fair placement charges it again, so it may be credited again. Returns its payload's key.
local function requeue(id, front, now)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_PARTITION, F_COST, F_WEIGHT, F_LIMITED)
  local lim = f[4] and limits_of(f[1])
  redis.call('ZREM', K.inflight, id)
  if f[4] then landed(f[1], id) end  -- (marked while its partition had limits: counted then)
  -- its partition may start its next item now: the front is where that one is too
  if lim then refresh(f[1], lim, now) end
  local score, member = placement(id, f[1], f[2], front)
  local entry = queue(f[1], f[3], score, member, lim)
  if front then
    redis.call('HDEL', key, F_LEASE)
  else
    redis.call('HDEL', key, F_LEASE, F_CREDITED)
  end
  redis.call('HSET', key, F_MEMBER, member, F_ENTRY, entry)
  if lim then refresh(f[1], lim, now) end
  return key
end


-- Send n triggers. Where a trigger message is stored, push them onto the broker's list here, in
-- the same call that made them due, exactly as Kombu would (LPUSH of the message, each with a
-- fresh id where the template says TRIGGER_ID); returns how many the caller must still publish.
local pushed = 0  -- triggers this call pushed, for replies that count every trigger sent (bind
                  -- zeroes it: in a function library it outlives the call)
local function push_triggers(n)
  local template = redis.call('GET', K.trigger_message)
  if not template then return n end
  pushed = pushed + n
  local t = redis.call('TIME')
  for _ = 1, n do
    local id = string.format('vtrr-%s-%s-%d', t[1], t[2], redis.call('INCR', K.seq))
    redis.call('LPUSH', K.broker, (string.gsub(template, TRIGGER_ID, id)))
  end
  return 0
end

-- Send as many more triggers as make min(cap, queued) wait, counting them as sent; returns how
-- many of them the caller must publish (0 when they were pushed here). A negative cap means this
-- queue uses no triggers. queued may be given when already known.
local function top_up_triggers(cap, queued)
  if cap < 0 then return 0 end
  local want = math.min(cap, queued or redis.call('ZCARD', K.queue))
  local have = tonumber(redis.call('GET', K.triggers) or '0')
  if want <= have then return 0 end
  redis.call('INCRBY', K.triggers, want - have)
  return push_triggers(want - have)
end

-- Whether token is the item's current lease: every fenced operation starts here.
local function holds_lease(id, token)
  return redis.call('HGET', item_key(id), F_LEASE) == token
end

-- The queue member of an item that is queued (not leased), else nil.
local function queued_member(id)
  local f = redis.call('HMGET', item_key(id), F_MEMBER, F_LEASE)
  if f[1] and not f[2] then return f[1] end
  return nil
end

-- Lease a queued item that has just left queue (or is about to: take): item id of partition
-- p, weight w, index entry `entry`, p's limits lim (nil: none), at t (Redis time, us, a string),
-- for lease_us. Returns its lease expiry, as a score string.
local function lease_queued(id, p, w, entry, lim, token, t, lease_us)
  unindex_item(entry)
  partition_queued(p, -1)
  weigh(w, -1)
  redis.call('HSET', item_key(id), F_LEASE, token)
  local expiry = string.format('%d', tonumber(t) + lease_us)
  redis.call('ZADD', K.inflight, expiry, id)
  if lim then
    redis.call('HDEL', K.reps, p)
    redis.call('HSET', K.live .. p, id, t .. ' ' .. w)
    refresh(p, lim, tonumber(t))
  end
  return expiry
end

-- Finish a leased item for the holder of its current lease: 1, or 0 when the token is stale.
local function ack_item(id, token)
  local f = redis.call('HMGET', item_key(id), F_LEASE, F_LIMITED, F_PARTITION, F_HALF_LIFE,
                       F_CREDITED, F_WEIGHT)
  if f[1] ~= token then return 0 end
  redis.call('ZREM', K.inflight, id)
  redis.call('DEL', item_key(id))
  -- (a credit since its last charge remembered what it used, under this lease or one before
  -- a put_back or release, which charge nothing; else it used its weight)
  if f[4] and not f[5] then remember_use(f[3], tonumber(f[6]), tonumber(f[4]), tonumber(clock())) end
  if f[2] then
    landed(f[3], id)
    refresh(f[3], limits_of(f[3]), tonumber(clock()))
  end
  return 1, f[2] ~= false
end

-- Credit a leased item with the part of its weight it did not use (credit.lua says how);
-- returns the virtual time credited, as a string ('0' when nothing was).
local function credit_item(id, token, used, most)
  if not holds_lease(id, token) then return '0' end
  local key = item_key(id)
  local info = redis.call('HMGET', key, F_PARTITION, F_COST, F_WEIGHT, F_CREDITED, F_LIMITED,
                          F_HALF_LIFE)
  local p, w = info[1], tonumber(info[3])
  if info[4] or not w or used >= w then return '0' end
  local credit = tonumber(info[2]) * (w - used) / w
  redis.call('HSET', key, F_CREDITED, token)
  if info[6] then remember_use(p, used, tonumber(info[6]), tonumber(clock())) end
  count(STAT_CREDITED, 1)

  -- Fairly placed items of the partition, in arrival order, which is also their order in the
  -- queue (a partition's fair start times never decrease with arrival). Front-placed ones keep
  -- their place at the front. One more than the limit is read to learn whether it was reached.
  local cvt = current_vt()
  local lim = info[5] and limits_of(p)
  local prefix = items_prefix(p)
  local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                          '(' .. prefix .. AFTER_FAIR_MARK, 'LIMIT', 0, most + 1)
  for i = 1, math.min(#fair, most) do
    local member = string.sub(fair[i], #prefix + 1)
    local zset = holder(p, member, lim)
    local score = redis.call('ZSCORE', zset, member)
    -- Each moves by the same amount, clamped at the clock, so their order stays as it was.
    -- (A parked item may wait below the clock: it is never moved up.)
    if score then
      score = tonumber(score)
      redis.call('ZADD', zset, math.max(math.min(cvt, score), score - credit), member)
    end
  end

  -- The partition's clock moves back too, unless some of its items stay where they were (beyond
  -- the limit, or queued before the index): its next items must still follow those.
  local queued = tonumber(redis.call('HGET', K.pqueued, p) or '0')
  local indexed = redis.call('ZLEXCOUNT', K.items, '[' .. prefix, '(' .. prefix .. AFTER_FAIR_MARK)
  local raw = redis.call('HGET', K.pvt, p)
  if raw and #fair <= most and indexed == queued then
    local vt = math.max(cvt, tonumber(raw) - credit)
    redis.call('HSET', K.pvt, p, vt)
    if queued == 0 then redis.call('ZADD', K.idle, 'XX', vt, p) end
  end
  if lim then refresh(p, lim, tonumber(clock())) end
  return string.format('%.17g', credit)
end

-- Out of turn: put_back and take. ------------------------------------------------------------

-- The most of a partition's front-placed items that first_queued reads: there are few, and
-- the first of them in the index is nearly always the first in line (see first_queued).
local FRONT_LOOK = 64

-- The first of partition p's queued items in dispatch order (lowest score, then member): its
-- member and score (a number), or nil when none is queued. A limited partition's is its next
-- item. An unlimited one's is among its front-placed items and its first fairly placed one
-- (fair starts never decrease with arrival); the front-placed ones are each looked at, since
-- those placed while the partition had limits may sit in the index out of dispatch order.
local function first_queued(p, lim)
  if lim then
    local member, score = next_of(p)
    return member, member and tonumber(score)
  end
  local prefix = items_prefix(p)
  local entries = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FRONT_MARK,
                             '(' .. prefix .. FAIR_MARK, 'LIMIT', 0, FRONT_LOOK)
  local fair = redis.call('ZRANGEBYLEX', K.items, '[' .. prefix .. FAIR_MARK,
                          '(' .. prefix .. AFTER_FAIR_MARK, 'LIMIT', 0, 1)
  entries[#entries + 1] = fair[1]
  local first, low
  for _, entry in ipairs(entries) do
    local member = string.sub(entry, #prefix + 1)
    local raw = redis.call('ZSCORE', K.queue, member)
    local score = raw and tonumber(raw)
    if score and (not first or before(score, member, low, first)) then first, low = member, score end
  end
  return first, low
end

-- Put a leased item back ahead of every other queued item of its own partition, for the
-- holder of its current lease (put_back.lua): at the score of its partition's first queued
-- item, or, with none queued, where the partition's next item would start; its front member
-- sorts before that item. No placement charges it and nothing is credited: what it was charged
-- stays charged, and F_CREDITED as it was, so one credit at the end returns the unused part.
-- put_back_item is it for the holder of the current lease: whether token held it.
local function to_partition_front(id)
  local key = item_key(id)
  local f = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_LIMITED)
  local p = f[1]
  local lim = f[3] and limits_of(p)
  redis.call('ZREM', K.inflight, id)
  if f[3] then landed(p, id) end  -- (marked while its partition had limits: counted then)
  local _, score = first_queued(p, lim)
  if not score then
    score = math.max(current_vt(), tonumber(redis.call('HGET', K.pvt, p) or '0'))
  end
  local member = front_member(id)
  local entry = queue(p, f[2], score, member, lim)
  redis.call('HDEL', key, F_LEASE)
  redis.call('HSET', key, F_MEMBER, member, F_ENTRY, entry)
  if lim then refresh(p, lim, tonumber(clock())) end
end

local function put_back_item(id, token)
  if not holds_lease(id, token) then return false end
  to_partition_front(id)
  return true
end

-- The application's hook on each reclaimed item (app/vtrr/hooks.py `reclaimed`), or nil: set
-- by use_hooks where the operation runs with the application's hooks (scripts.HOOKED).
local on_reclaimed = nil
local function use_hooks(hooks)
  on_reclaimed = hooks.reclaimed
end

-- Put leased items whose lease has expired back into the queue, at most limit of them, where
-- `placement` says: FAIR (charged again, as if freshly enqueued), FRONT (of the whole queue, as
-- release) or PARTITION_FRONT (of its own partition, as put_back). The hook hears of each one
-- with the lease token that lapsed, in the same call.
local function reclaim(t, limit, placement)
  local expired = redis.call('ZRANGEBYSCORE', K.inflight, '-inf', t, 'LIMIT', '0', limit)
  for _, id in ipairs(expired) do
    local key = item_key(id)
    local token = redis.call('HGET', key, F_LEASE)
    if placement == PARTITION_FRONT then
      to_partition_front(id)
    else
      requeue(id, placement == FRONT, tonumber(t))
    end
    redis.call('HINCRBY', key, F_TIMEOUTS, 1)
    if on_reclaimed then on_reclaimed(id, token) end
  end
  if #expired > 0 then count(STAT_RECLAIMED, #expired) end
  return #expired
end

-- Lease the next item (dequeue.lua says what each argument is); returns dequeue's reply.
local function lease_next(lease_us, token, consumes, from_rear, limit, cap, placement)
  local t = clock()
  if limit > 0 then reclaim(t, limit, placement) end
  if consumes and redis.call('DECR', K.triggers) < 0 then
    redis.call('SET', K.triggers, 0)
  end

  local head
  if from_rear then
    head = redis.call('ZPOPMAX', K.queue)
  else
    head = redis.call('ZPOPMIN', K.queue)
  end
  if not head[1] then
    -- nothing that may start: a limited partition whose wait is over may have one now
    if wake_due(tonumber(t), WAKE_BATCH) == 0 then return {top_up_triggers(cap, 0)} end
    head = redis.call(from_rear and 'ZPOPMAX' or 'ZPOPMIN', K.queue)
    if not head[1] then return {top_up_triggers(cap, 0)} end
  end
  local id, key, f, lim
  local parked_again = 0
  while true do
    id = task_id_of(head[1])
    key = item_key(id)
    f = redis.call('HMGET', key, F_PARTITION, F_WEIGHT, F_PAYLOAD, F_TIMEOUTS, F_ENTRY, F_LIMITED)
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
    head = redis.call(from_rear and 'ZPOPMAX' or 'ZPOPMIN', K.queue)
    if not head[1] then return {top_up_triggers(cap, 0)} end
  end
  if not from_rear then
    -- a limited partition's item may have waited below the clock: the clock never goes back
    if not lim or tonumber(head[2]) > current_vt() then redis.call('SET', K.cvt, head[2]) end
  end
  local expiry = lease_queued(id, f[1], f[2], f[5], lim, token, t, lease_us)
  local queued = reset_if_drained()
  return {top_up_triggers(cap, queued), id, f[3], f[4] or '0', expiry}
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
                       F_ENTRY, F_LIMITED)
  local lim = f[6] and limits_of(f[1])
  local t = clock()
  -- a limited partition's item is in queue exactly while it is its next one and may start
  if lim then refresh(f[1], lim, tonumber(t)) end
  if not redis.call('ZSCORE', K.queue, member) then return {top_up_triggers(cap)} end
  local head = redis.call('ZRANGE', K.queue, 0, 0, 'WITHSCORES')
  if tonumber(head[2]) > current_vt() then redis.call('SET', K.cvt, head[2]) end
  redis.call('ZREM', K.queue, member)
  local expiry = lease_queued(id, f[1], f[2], f[5], lim, token, t, lease_us)
  local queued = reset_if_drained()
  return {top_up_triggers(cap, queued), id, f[3], f[4] or '0', expiry}
end

-- A name the operation did not declare: say so, rather than hand redis.call a nil.
local UNDECLARED = {__index = function(_, name)
  error('vtrr: this operation does not declare key ' .. tostring(name))
end}

-- Start a call: its keys by name (a table built by the call's first line from KEYS, in the
-- order its header declares them), and zero what counts within one call.
local function bind(keys)
  K = setmetatable(keys, UNDECLARED)
  pushed = 0
end

-- Start a call over several queues (step.lua): KEYS holds each queue's keys in turn, in the
-- order of `names`; returns a table of keys per queue (K is bound to the first, `use` rebinds).
local function bind_queues(keys, n, names)
  local queues = {}
  for i = 1, n do
    local own, offset = {}, (i - 1) * #names
    for j, name in ipairs(names) do own[name] = keys[offset + j] end
    queues[i] = setmetatable(own, UNDECLARED)
  end
  bind(queues[1])
  return queues
end

local function use(keys)
  K = keys
end
