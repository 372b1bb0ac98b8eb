-- claim.lua: hold due deliveries for one sender, for ARGV[2] ms, shared fairly between
-- accounts. Each free slot goes to the account with a delivery due that holds the fewest of
-- this sender's slots (ties: the one whose delivery has waited longest), and no account goes
-- past its share, max(1, floor(slots / (n + 1))), n being the accounts with deliveries due or
-- held here: an account alone holds half the slots, and one that comes finds a slot free. A
-- claimed delivery's score becomes the end of the hold, which no other sender's claim reaches
-- before then; a sender that dies holding one leaves it to come due again when the hold runs out.
-- KEYS[1] the accounts (ZSET)  KEYS[2] an account's schedule, without the account
-- ARGV[1] free slots  ARGV[2] the hold, ms  ARGV[3] the sender's slots
-- ARGV[4], ARGV[5], ...: pairs of account, slots this sender holds for it now
-- Reply: {the hold's end (ms), ms until a delivery that this sender may claim is due (-1: none),
--         account, job id, account, job id, ...}
local t = now_ms()
local held = t + tonumber(ARGV[2])
local free, slots = tonumber(ARGV[1]), tonumber(ARGV[3])
local holding, wanting = {}, 0
for i = 4, #ARGV, 2 do
  holding[ARGV[i]] = tonumber(ARGV[i + 1])
  wanting = wanting + 1
end
-- earliest first; past slots + wanting of them, every share is one slot anyway
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, slots + wanting)
local left = {}  -- due accounts that may still have a delivery due
for _, account in ipairs(due) do
  left[account] = true
  if not holding[account] then
    holding[account] = 0
    wanting = wanting + 1
  end
end
local share = math.max(1, math.floor(slots / (wanting + 1)))

local reply = {held, -1}
local claimed = {}
while free > 0 do
  local pick = nil
  for _, account in ipairs(due) do
    if left[account] and holding[account] < share
        and (pick == nil or holding[account] < holding[pick]) then
      pick = account
    end
  end
  if pick == nil then break end
  local job_id = redis.call('ZRANGEBYSCORE', KEYS[2] .. pick, '-inf', t, 'LIMIT', 0, 1)[1]
  if job_id then
    redis.call('ZADD', KEYS[2] .. pick, whole(held), job_id)
    holding[pick] = holding[pick] + 1
    free = free - 1
    claimed[pick] = true
    reply[#reply + 1] = pick
    reply[#reply + 1] = job_id
  else
    left[pick] = nil
  end
end
for _, account in ipairs(due) do
  if claimed[account] then reindex(KEYS[1], account, KEYS[2] .. account) end
end

-- The wait: until the earliest delivery of an account below its share. The first capped + 1
-- accounts hold one, if any account does.
local capped = 0
for _, count in pairs(holding) do
  if count >= share then capped = capped + 1 end
end
local first = redis.call('ZRANGE', KEYS[1], 0, capped, 'WITHSCORES')
for i = 1, #first, 2 do
  if (holding[first[i]] or 0) < share then
    reply[2] = math.max(0, tonumber(first[i + 1]) - t)
    break
  end
end
return reply
