-- _lib.lua: what the sender's scripts share; prepended to each of them, after the constants
-- that the job store's scripts get too (app/store/scripts.py: METRIC_WEBHOOKS_* here).
-- Each account's deliveries are a ZSET of their own (its schedule), scored in whole milliseconds
-- of Redis's clock: when a delivery's next attempt is due, or, while a sender holds it, when its
-- hold runs out. Every sender reads the one clock, so their own clocks need not agree. The
-- accounts ZSET holds each account that has deliveries, scored with its earliest one: the
-- accounts with a delivery due are those scored up to now.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A score as Redis should store it: whole, never in exponent form.
local function whole(ms)
  return string.format('%d', ms)
end

-- The account a job's deliveries belong to: its owner ('' once the job has expired).
local function owner_of(job_hash)
  return redis.call('HGET', job_hash, 'owner') or ''
end

-- Score the account, in the accounts ZSET, with the earliest of its deliveries (none: remove it).
local function reindex(accounts, account, schedule)
  local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  if first[2] then
    redis.call('ZADD', accounts, first[2], account)
  else
    redis.call('ZREM', accounts, account)
  end
end
