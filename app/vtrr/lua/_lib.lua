-- _lib.lua: helpers shared by every script; fairgpu prepends this file to each of them.
--
-- Every script receives the same KEYS, in this order (all in one Cluster slot, since they share
-- the hash tag {name}); each script's header names the ones it touches.
--   KEYS[1]  queue                   ZSET  member -> virtual start time
--   KEYS[2]  task                    HASH  task id -> payload, while queued
--   KEYS[3]  meta                    HASH  task id -> cjson {p, w, c, m, k}, until ack (w: weight;
--                                           k: the lease credited since the item was last charged)
--   KEYS[4]  inflight                ZSET  task id -> lease expiry (Redis TIME, seconds)
--   KEYS[5]  inflight_task           HASH  task id -> payload, while leased
--   KEYS[6]  lease                   HASH  task id -> lease token
--   KEYS[7]  timeouts                HASH  task id -> times its lease expired and was reclaimed
--   KEYS[8]  current_virtual_time    STRING
--   KEYS[9]  partition_virtual_time  HASH  partition -> virtual finish time of its last item
--   KEYS[10] partition_queued        HASH  partition -> number of its items queued
--   KEYS[11] idle_partitions         ZSET  partition (none queued) -> its virtual finish time
--   KEYS[12] seq                     STRING arrival counter
--   KEYS[13] triggers                STRING Celery triggers published and not yet consumed
--   KEYS[14] stats                   HASH  counter -> value
--   KEYS[15] wake                    LIST  tokens that wake blocked RedisQueue.get calls
--   KEYS[16] queued_weight           STRING sum of the weights of the items queued
--   KEYS[17] partition_items         ZSET  "<#p>:<p>:<queue member>" -> 0, one per queued item,
--                                           so that ZRANGEBYLEX lists a partition's items in order
--   KEYS[18] trigger message         STRING a Celery trigger as Kombu's Redis transport stores it
--                                           (set by a VTRRQueue whose broker is this Redis)
--   KEYS[19] broker queue            LIST  the Celery queue those triggers go to
--
-- A queue member is "<1|0><15-digit counter>:<task id>". Equal scores sort by member, so items
-- of equal virtual time leave in arrival order ("1" + arrival counter); "0" marks items put at
-- the front, whose counter runs downwards so the latest one put there leaves first.

local K = {
  queue = KEYS[1], task = KEYS[2], meta = KEYS[3], inflight = KEYS[4], inflight_task = KEYS[5],
  lease = KEYS[6], timeouts = KEYS[7], cvt = KEYS[8], pvt = KEYS[9], pqueued = KEYS[10],
  idle = KEYS[11], seq = KEYS[12], triggers = KEYS[13], stats = KEYS[14], wake = KEYS[15],
  queued_weight = KEYS[16], items = KEYS[17], trigger_message = KEYS[18], broker = KEYS[19],
}

local FRONT_BASE = 999999999999999

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function task_id_of(member)
  return string.sub(member, 18)
end

local function arrival_member(id)
  return '1' .. string.format('%015d', redis.call('INCR', K.seq)) .. ':' .. id
end

local function front_member(id)
  return '0' .. string.format('%015d', FRONT_BASE - redis.call('INCR', K.seq)) .. ':' .. id
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

-- The running sum of the queued items' weights, moved by one item's weight (sign 1 or -1), so
-- that readers (start estimates) learn the work queued in O(1). Items queued before weights
-- were kept in meta count 0.
local function weigh(info, sign)
  if info.w then redis.call('INCRBY', K.queued_weight, sign * tonumber(info.w)) end
end

-- Once nothing is queued, the virtual clock starts again from zero. Returns how many are queued.
local function reset_if_drained()
  local queued = redis.call('ZCARD', K.queue)
  if queued == 0 then
    redis.call('DEL', K.cvt, K.pvt, K.idle, K.pqueued, K.queued_weight, K.items)
  end
  return queued
end

-- The index of queued items by partition (partition_items): every queue member, prefixed with
-- its partition and that partition's length so that one partition's prefix is never another's.
-- All scores are 0, so ZRANGEBYLEX lists a partition's front-placed items ("0...") and then its
-- fair ones ("1...") in arrival order, in O(log N) plus what it returns. Items queued before
-- the index existed have no entry: removing them removes nothing, and credit skips them.
local function items_prefix(p)
  return #p .. ':' .. p .. ':'
end

local function index_item(p, member)
  redis.call('ZADD', K.items, 0, items_prefix(p) .. member)
end

local function unindex_item(p, member)
  redis.call('ZREM', K.items, items_prefix(p) .. member)
end

-- Put an item into the queue. Fair placement starts it at max(queue vt, its partition's vt) and
-- moves the partition's vt on by the item's cost; front placement puts it ahead of everything
-- and charges nothing more (it is an item that already had its turn, or an operator's choice).
local function place(id, info, front)
  local score
  if front then
    score = front_score()
    info.m = front_member(id)
  else
    score = math.max(current_vt(), tonumber(redis.call('HGET', K.pvt, info.p) or '0'))
    redis.call('HSET', K.pvt, info.p, score + tonumber(info.c))
    info.m = arrival_member(id)
    info.k = nil  -- charged again, so it may be credited again
  end
  index_item(info.p, info.m)
  partition_queued(info.p, 1)
  weigh(info, 1)
  redis.call('ZADD', K.queue, score, info.m)
  redis.call('HSET', K.meta, id, cjson.encode(info))
  return score
end

-- Take a leased item out of flight (ack, release and reclaim all start here); returns its
-- payload when asked for it.
local function unlease(id, want_payload)
  redis.call('ZREM', K.inflight, id)
  redis.call('HDEL', K.lease, id)
  local payload = want_payload and redis.call('HGET', K.inflight_task, id)
  redis.call('HDEL', K.inflight_task, id)
  return payload
end

-- Put leased items whose lease has expired back into the queue, at most limit of them.
local function reclaim(t, limit, front)
  local expired = redis.call('ZRANGEBYSCORE', K.inflight, '-inf', t, 'LIMIT', '0', limit)
  for _, id in ipairs(expired) do
    local payload = unlease(id, true)
    local info = cjson.decode(redis.call('HGET', K.meta, id))
    redis.call('HSET', K.task, id, payload)
    place(id, info, front)
    redis.call('HINCRBY', K.timeouts, id, 1)
  end
  if #expired > 0 then count('reclaimed', #expired) end
  return #expired
end

-- Send n triggers. Where a trigger message is stored, push them onto the broker's list here, in
-- the same call that made them due, exactly as Kombu would (LPUSH of the message, each with a
-- fresh id where the template says TRIGGER_ID); returns how many the caller must still publish.
local TRIGGER_ID = 'VTRRTRIGGERID'  -- letters only: it is a gsub pattern
local pushed = 0  -- triggers this call pushed, for replies that count every trigger sent
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

-- The lease token of an item if it matches, else nil: every fenced operation starts here.
local function holds_lease(id, token)
  return redis.call('HGET', K.lease, id) == token
end
