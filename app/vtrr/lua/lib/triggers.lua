-- lib/triggers.lua: the Celery triggers a queue keeps waiting (top_up_triggers), pushed onto
-- the broker's list in the same call where a trigger message is stored.
-- Relies on: keys.lua (K, pushed), pools.lua.

-- Send n triggers. Where a trigger message is stored, push them onto the broker's list here, in
-- the same call that made them due, exactly as Kombu would (LPUSH of the message, each with a
-- fresh id where the template says TRIGGER_ID); returns how many the caller must still publish.
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
-- queue uses no triggers. queued, what this call's consumer may take, may be given when known;
-- a consumer of a kind counts its own triggers (K.triggers is its kind's).
local function top_up_triggers(cap, queued)
  if cap < 0 then return 0 end
  local want = math.min(cap, queued or waiting_in(my_lines()))
  local have = tonumber(redis.call('GET', K.triggers) or '0')
  if want <= have then return 0 end
  redis.call('INCRBY', K.triggers, want - have)
  return push_triggers(want - have)
end
