-- step.lua: a worker's step from one item to the next, in one call, over the queues it serves:
-- end the item it ran (credit what it did not use, the hooks' `done`, the ack), then lease the
-- fairest item of the first of its queues with one queued (the hooks' `lease` on it).
-- KEYS: *queues
-- (each queue's keys in turn, QUEUE_KEYS then TRIGGER_KEYS)
-- ARGV[1] number of queues n
-- ARGV[2] the queue (1..n) of the item to end, 0 for none  ARGV[3] its id  ARGV[4] its token
-- ARGV[5] the weight it used, to credit the rest (0: no credit)  ARGV[6] most items a credit moves
-- ARGV[7] the queue (1..n) whose trigger this call consumes, 0 for none
-- ARGV[8] how many queues, from the first, to lease from (0: lease nothing)
-- ARGV[9] lease microseconds  ARGV[10] the new lease token
-- ARGV[11] most expired leases to reclaim per queue  ARGV[12] where they go (lib/reclaim.lua)
-- ARGV[13 .. 12+n] each queue's trigger cap (-1: no triggers)
-- ARGV[13+n] m, the number of arguments for `done`; the m after it are those; the rest are
-- the arguments for `lease`.
-- The hooks (Hooks.lua; none by default) are called as done(id, token, args, {held = whether
-- the token still held the lease, credited = the virtual time credited}) before the ack, and
-- lease(id, token, args) once an item is leased; each one's return value is in the reply.
-- Reply: {acked (1, 0 stale, -1 nothing to end), credited, done's reply,
--         the queue leased from (0: none), task id, payload, timeouts, lease expiry (us),
--         lease's reply, then for each queue: triggers to publish, items queued}
local n = tonumber(ARGV[1])
local queues = bind_queues(KEYS, n, QUEUE_KEY_NAMES)
local ended, id, token = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local m = tonumber(ARGV[13 + n])
local done_args, lease_args = {}, {}
for i = 14 + n, 13 + n + m do done_args[#done_args + 1] = ARGV[i] end
for i = 14 + n + m, #ARGV do lease_args[#lease_args + 1] = ARGV[i] end

local acked, credited, done_reply = -1, '0', false
if ended > 0 then
  use(queues[ended])
  local held = holds_lease(id, token)
  local used = tonumber(ARGV[5])
  if held and used > 0 then credited = credit_item(id, token, used, tonumber(ARGV[6])) end
  if HOOKS.done then
    local reply = HOOKS.done(id, token, done_args, {held = held, credited = tonumber(credited)})
    if reply ~= nil then done_reply = reply end
  end
  acked = ack_item(id, token)
end

local publish = {}
for i = 1, n do publish[i] = 0 end
local consumed = tonumber(ARGV[7])
if consumed > 0 then
  use(queues[consumed])
  if redis.call('DECR', K.triggers) < 0 then redis.call('SET', K.triggers, 0) end
end

local lease = {0, false, false, false, false, false}
local tried = 0
for i = 1, tonumber(ARGV[8]) do
  use(queues[i])
  tried = i
  local reply = lease_next(tonumber(ARGV[9]), ARGV[10], false, false, tonumber(ARGV[11]),
                           tonumber(ARGV[12 + i]), ARGV[12])
  publish[i] = reply[1]
  if reply[2] then
    lease = {i, reply[2], reply[3], reply[4], reply[5], false}
    if HOOKS.lease then
      local started = HOOKS.lease(reply[2], ARGV[10], lease_args)
      if started ~= nil then lease[6] = started end
    end
    break
  end
end
-- the consumed trigger's queue tops its triggers up, as a dequeue that consumes one does
if consumed > tried then
  use(queues[consumed])
  publish[consumed] = top_up_triggers(tonumber(ARGV[12 + consumed]))
end

local reply = {acked, credited, done_reply}
for _, v in ipairs(lease) do reply[#reply + 1] = v end
for i = 1, n do
  reply[#reply + 1] = publish[i]
  reply[#reply + 1] = redis.call('ZCARD', queues[i].queue)
end
return reply
