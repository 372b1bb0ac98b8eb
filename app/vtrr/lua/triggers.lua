-- triggers.lua: correct the count of triggers waiting in the broker, then top it up.
-- KEYS: queue seq triggers trigger_message broker
-- KEYS: cvt pool pools kinds kind kpools kclock
-- ARGV[1] "sync": the broker says ARGV[2] triggers wait; take that as the count, then top up.
--         "topup": top up from the current count (ARGV[2] unused).
--         "unsend": ARGV[2] counted triggers were never published; uncount them.
-- ARGV[3] trigger cap
-- Reply: {triggers to publish, triggers this call pushed onto the broker's list itself}.
local op, n, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if op == TRIGGERS_UNSEND then
  if redis.call('DECRBY', K.triggers, n) < 0 then redis.call('SET', K.triggers, 0) end
  return {0, 0}
end
if op == TRIGGERS_SYNC then redis.call('SET', K.triggers, n) end
return {top_up_triggers(cap), pushed}
