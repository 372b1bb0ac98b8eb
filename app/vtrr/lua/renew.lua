-- renew.lua: push a live lease's expiry to now + ARGV[3] microseconds (a heartbeat); optionally
-- hand back the item (a Celery retry resuming the delivery it started).
-- KEYS: item inflight
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] microseconds  ARGV[4] 1 to return the item
-- Reply: nil when the token is not the item's current lease; else {expiry (microseconds)} or
--        {expiry, payload, timeouts}.
local id, token, us = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not holds_lease(id, token) then return nil end
local expiry = clock_plus(us)
redis.call('ZADD', K.inflight, expiry, id)
if ARGV[4] ~= '1' then return {expiry} end
local f = redis.call('HMGET', item_key(id), F_PAYLOAD, F_TIMEOUTS)
return {expiry, f[1], f[2] or '0'}
