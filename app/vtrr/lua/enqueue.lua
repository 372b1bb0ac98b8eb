-- enqueue.lua: add a batch of items of one partition, all or none.
-- KEYS: queue item cvt pvt pqueued idle seq triggers stats wake queued_weight items
-- KEYS: trigger_message broker
-- ARGV[1] partition  ARGV[2] trigger cap (-1: no triggers)  ARGV[3] "front" or "fair"
-- ARGV[4] wake (1: push a wake token per item)
-- ARGV[5] most items the partition may have queued (-1: no limit)
-- ARGV[6..] per item, four each: task id, cost (weight / share), weight, payload
-- Reply: {triggers to publish, score of item 1, score of item 2, ...}
-- Errors, after which nothing is written: "DUPLICATE <task id>" when an id is queued or in
--        flight, or appears twice in the batch; "FULL <limit>" when the batch would take the
--        partition past its limit.
local partition, cap, front, wake = ARGV[1], tonumber(ARGV[2]), ARGV[3] == 'front', ARGV[4] == '1'
local limit, first = tonumber(ARGV[5]), 6
local n = (#ARGV - first + 1) / 4
if limit >= 0 and tonumber(redis.call('HGET', K.pqueued, partition) or '0') + n > limit then
  return redis.error_reply('FULL ' .. ARGV[5])
end
local seen = {}
for i = first, #ARGV, 4 do
  local id = ARGV[i]
  if seen[id] or redis.call('EXISTS', item_key(id)) == 1 then
    return redis.error_reply('DUPLICATE ' .. id)
  end
  seen[id] = true
end
local reply = {0}
for i = first, #ARGV, 4 do
  local id, cost, weight = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local score, member = placement(id, partition, cost, front)
  local entry = queue(partition, weight, score, member)
  redis.call('HSET', item_key(id), 'p', partition, 'c', cost, 'w', weight, 'd', ARGV[i + 3],
             'm', member, 'x', entry)
  reply[#reply + 1] = tostring(score)
end
count('enqueued', n)
if wake then
  for _ = 1, math.min(n, 64) do redis.call('RPUSH', K.wake, 1) end
  redis.call('LTRIM', K.wake, -64, -1)
end
reply[1] = top_up_triggers(cap)
return reply
