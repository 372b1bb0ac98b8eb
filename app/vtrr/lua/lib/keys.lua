-- lib/keys.lua: the head of the fair queue's function library: the keys each operation names,
-- what each holds, and how an operation binds them (`K`, bind, rebind, bind_queues, use).
-- Relies on: nothing but layout.py's constants, which lua_text.py puts before this file.
--
-- The library is these files of lib/, put together in the order lua_text.py's LIBRARY states
-- (each may use what the files before it define): on Redis 7 one function library whose
-- helpers are locals, built once when it loads; on Redis 6.2 the same text before each
-- operation's script. What the Python spells too (an item's fields F_*, the counters STAT_*,
-- the member's layout, the words of ARGV and of error replies) is not spelled here:
-- app/vtrr/layout.py puts its constants before this file, as locals of their own.
--

-- Each operation declares the keys it touches in its header (`-- KEYS: queue meta ...`), and
-- `bind` gives them their names in `K` at the start of each call; a name that the operation
-- did not declare is an error. All keys share the hash tag {name}. The names:
--   queue            ZSET  member -> virtual start time
--   item             the prefix of the items' own keys: item .. <task id> is a HASH from
--                          enqueue until ack: F_PARTITION, F_COST (weight / share), F_WEIGHT,
--                          F_PAYLOAD, F_MEMBER its queue member, F_ENTRY its entry in items,
--                          F_LEASE its lease token while leased,
--                          F_TIMEOUTS times its lease expired and was reclaimed (absent: 0),
--                          F_CREDITED the lease credited since the item was last charged,
--                          F_SIZE, F_SPAN, F_HELD, F_RESV (lib/cards.lua)
--   inflight         ZSET  task id -> lease expiry (Redis TIME, whole microseconds)
--   cvt              STRING the queue's virtual time
--   pvt              HASH  partition -> virtual finish time of its last item
--   pqueued          HASH  partition -> number of its items queued
--   idle             ZSET  partition (none queued) -> its virtual finish time
--   seq              STRING arrival counter
--   triggers         STRING Celery triggers published and not yet consumed
--   stats            HASH  counter -> value
--   wake             LIST  tokens that wake blocked RedisQueue.get calls
--   queued_weight    STRING sum of the weights of the items queued
--   items            ZSET  "<#p>:<p>:<queue member>" -> 0, one per queued item,
--                          so that ZRANGEBYLEX lists a partition's items in order
--   trigger_message  STRING a Celery trigger as Kombu's Redis transport stores it
--                          (set by a VTRRQueue whose broker is this Redis)
--   broker           LIST  the Celery queue those triggers go to
--   limits           HASH  partition -> "<most in flight> <most weight held> <weight a second>"
--                          (-1: no such limit); a partition named here is a limited one
--   parked           STRING number of queued items that are parked (in a park, not in queue)
--   reps             HASH  limited partition -> its one member in queue, if any
--   waits            ZSET  limited partition -> when (Redis TIME, us) the weight its items in
--                          flight hold will have run down far enough for its next item
--   park             the prefix of each limited partition's parked items: park .. p is a ZSET
--                          member -> score, like queue
--   live             the prefix of each limited partition's items in flight: live .. p is a
--                          HASH task id -> "<lease start, us> <weight>"
--   freed            SET   limited partitions whose items in flight went down since the last
--                          wake (wake.lua), for the other queues of their group
--   usage            HASH  partition -> "<weight used, decayed> <when, us>": what its items
--                          used, remembered with a half-life (items that carry F_HALF_LIFE)
--   usage_at         ZSET  partition -> when its usage last changed, to forget the oldest
--   pool             the prefix of each pool's line (lib/pools.lua): pool .. <pool> is a ZSET
--                          member -> score, like queue, of the items of that pool that may start
--   pools            SET   the pools used since the queue last drained
--   kinds            SET   the kinds those pools name
--   kind             the prefix of each kind's keys: kind .. k .. KIND_CLOCK its clock (STRING),
--                          .. KIND_POOLS the pools naming it (SET), .. ':triggers' its triggers
--   kpools, kclock   this call's consumer's kind's pools and clock; without a kind, kclock is
--                          cvt itself and kpools a set never written
--   card, resv       this call's consumer's card and its host's reservation (lib/cards.lua); a
--                          consumer without a slot gets `fleet .. 'card:'`, never written
--   fleet            the prefix of the fleet's keys (lib/cards.lua): shared by a limits group
-- Queues that count their partitions' items in flight together (a limits group: an account's
-- jobs over a service's queues) share live, freed, usage and usage_at; the rest of these keys
-- are each queue's.
--
-- A limited partition's queued items are parked, all but at most one: its next item (the
-- lowest score, then member), which is in queue, and named in reps, exactly while the
-- partition's limits let it start one more. So a dequeue's ZPOPMIN only ever meets items that
-- may start, and never walks past a held-back partition's items; a partition without limits
-- pays nothing for any of this. Its items carry F_LIMITED, so that the hot path learns it
-- from a read it makes anyway.
--
-- An item is queued while its hash has no lease token (F_LEASE), and in flight while it has
-- one. A queue member is FAIR_MARK or FRONT_MARK, a counter (COUNTER_FORMAT), SEPARATOR, then
-- the task id (from TASK_ID_AT). Equal scores sort by member, so items of equal virtual time
-- leave in arrival order (FAIR_MARK and the arrival counter); FRONT_MARK sorts first and marks
-- items put at the front, whose counter runs down from FRONT_BASE so the latest one put there
-- leaves first.

local K  -- this call's keys, by name (see bind)
local pushed = 0  -- triggers this call pushed, for replies that count every trigger sent (bind
                  -- zeroes it: in a function library it outlives the call)

-- A name the operation did not declare: say so, rather than hand redis.call a nil.
local UNDECLARED = {__index = function(_, name)
  error('vtrr: this operation does not declare key ' .. tostring(name))
end}

-- Start a call: its keys by name (a table built by the call's first line from KEYS, in the
-- order its header declares them), and zero what counts within one call.
local function bind(keys)
  K = setmetatable(keys, UNDECLARED)
  pushed = 0
end

-- bind again a table that a bind gave its metatable already: a function of the library keeps
-- one table of keys from call to call and fills it (lua_text.registered), which spares a new
-- table and setmetatable at every call.
local function rebind(keys)
  K = keys
  pushed = 0
end

-- Start a call over several queues (step.lua): KEYS holds each queue's keys in turn, in the
-- order of `names`; returns a table of keys per queue (K is bound to the first, `use` rebinds).
local function bind_queues(keys, n, names)
  local queues = {}
  for i = 1, n do
    local own, offset = {}, (i - 1) * #names
    for j, name in ipairs(names) do own[name] = keys[offset + j] end
    queues[i] = setmetatable(own, UNDECLARED)
  end
  bind(queues[1])
  return queues
end

local function use(keys)
  K = keys
end
