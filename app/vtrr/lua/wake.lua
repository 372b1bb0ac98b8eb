-- wake.lua: let limited partitions start their next item where they now may, over the queues
-- of one limits group (or one queue): those whose wait for time is over (their items in flight
-- have run down far enough), and those whose items in flight went down in any queue of the
-- group since the last wake (freed). Whoever serves queues with limits calls it when the reply
-- says, and often enough for the group's frees; a reclaim, and a dequeue that finds nothing to
-- start, wake the first kind in their own queue too.
-- KEYS: *queues
-- (each queue's keys in turn, QUEUE_KEYS then TRIGGER_KEYS)
-- ARGV[1] number of queues n  ARGV[2] most partitions to wake per queue and kind
-- ARGV[3 .. 2+n] each queue's trigger cap (-1: no triggers)
-- Reply: {partitions woken, 1 when more are due (call again), the next wait's end (us) or -1,
--         Redis's time now (us), then for each queue: triggers to publish}
local n, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local queues = bind_queues(KEYS, n, QUEUE_KEY_NAMES)
local t = tonumber(clock())

local freed, seen = {}, {}
for i = 1, n do
  use(queues[i])
  for _, p in ipairs(redis.call('SPOP', K.freed, most)) do
    if not seen[p] then
      seen[p] = true
      freed[#freed + 1] = p
    end
  end
end
table.sort(freed)  -- the same order on a replica

local woken, more = 0, 0
for i = 1, n do
  use(queues[i])
  woken = woken + wake_due(t, most)
  for _, p in ipairs(freed) do
    local lim = limits_of(p)
    if lim then
      refresh(p, lim, t)
      woken = woken + 1
    end
  end
end

local reply, next_at = {woken, 0, -1, string.format('%d', t)}, nil
for i = 1, n do
  use(queues[i])
  local due = redis.call('ZRANGEBYSCORE', K.waits, '-inf', t, 'LIMIT', 0, 1)
  if #due > 0 or redis.call('SCARD', K.freed) > 0 then more = 1 end
  local first = redis.call('ZRANGE', K.waits, 0, 0, 'WITHSCORES')
  if first[2] and (not next_at or tonumber(first[2]) < next_at) then next_at = tonumber(first[2]) end
  reply[#reply + 1] = top_up_triggers(tonumber(ARGV[2 + i]))
end
reply[2] = more
if next_at then reply[3] = string.format('%d', next_at) end
return reply
