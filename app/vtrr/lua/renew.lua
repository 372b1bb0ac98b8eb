-- renew.lua: push a live lease's expiry to now + ARGV[3] seconds (a heartbeat), and optionally
-- hand back the item (a Celery retry resuming the delivery it started).
-- KEYS: all (see _lib.lua); touches inflight, inflight_task, lease, timeouts.
-- ARGV[1] task id  ARGV[2] lease token  ARGV[3] seconds  ARGV[4] 1 to return the item
-- Reply: nil when the token is not the item's current lease; else {expiry} or
--        {expiry, payload, timeouts}.
local id, token, seconds = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not holds_lease(id, token) then return nil end
local expiry = now() + seconds
redis.call('ZADD', K.inflight, expiry, id)
if ARGV[4] ~= '1' then return {tostring(expiry)} end
return {tostring(expiry), redis.call('HGET', K.inflight_task, id),
        redis.call('HGET', K.timeouts, id) or '0'}
