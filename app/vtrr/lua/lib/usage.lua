-- lib/usage.lua: usage with memory (a half-life): what a partition's items used, decayed,
-- remembered at an item's end and read when the partition comes back.
-- Relies on: keys.lua (K), clock.lua (current_vt).

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

-- A partition that comes back (nothing of it queued) starts after its pool's clock by its
-- remembered usage over its share: one that used X more than another lets the other have
-- about X of service first. Its clock only moves forward.
local function come_back(p, h, share, now, pool)
  if redis.call('HEXISTS', K.pqueued, p) == 1 then return end
  local u = used_by(p, h, now)
  if u <= 0 then return end
  local vt = pool_clock(pool) + u / share
  if vt > tonumber(redis.call('HGET', K.pvt, p) or '0') then
    redis.call('HSET', K.pvt, p, string.format('%.17g', vt))
  end
end
