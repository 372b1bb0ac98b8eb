-- claim.lua: hold up to ARGV[1] due deliveries for one sender, for ARGV[2] ms: each one's score
-- becomes the end of the hold, which no other sender's claim reaches before then. A sender that
-- dies holding one leaves it to come due again when the hold runs out.
-- KEYS[1] the schedule (ZSET)
-- ARGV[1] most to claim  ARGV[2] the hold, ms
-- Reply: {the hold's end (ms), ms until the next delivery not claimed here is due (-1: none),
--         job id, ...}
local t = now_ms()
local held = t + tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
for _, job_id in ipairs(due) do
  redis.call('ZADD', KEYS[1], whole(held), job_id)
end
local wait = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then wait = math.max(0, tonumber(first[2]) - t) end
local reply = {held, wait}
for _, job_id in ipairs(due) do reply[#reply + 1] = job_id end
return reply
