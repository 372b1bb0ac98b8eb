-- hooks.lua: the job store's hooks on the fair queues (app.vtrr.hooks): a job's record is
-- written in the call that queues it, its start runs in the call that leases it, its end
-- and bill in the call that acks it (and leases the next), and a lost run's return to PENDING
-- in the call that reclaims its lapsed lease.
-- Python puts before this chunk `local KEYS = {}` (the helpers of _lib.lua read a script's
-- KEYS; the hooks set JOB and EVENTS themselves), _lib.lua, runs.lua, the key names (NAMES, a
-- table of the store's key prefixes and fixed keys: app/store/hooks.py), then submit.lua.

-- lease: start the job under the new lease. args: worker, gpu id ('' none), max attempts,
-- channel, ttl. Reply: start.lua's.
local function lease(id, token, args)
  local keys = {NAMES.job .. id, NAMES.events .. id, NAMES.metrics, NAMES.input .. id,
                NAMES.webhooks}
  return start_run(keys, {id, token, args[1], args[2], args[3], args[4], args[5]})
end

-- done: record the run's end and bill it (finish.lua), unless its run handed nothing (it did not
-- start: the job had ended) or no longer holds its lease (it expired and went back to the queue
-- while the worker was frozen or cut off: the job's next run ends it and is billed, this one
-- neither); say that the queue's order changed when the step credited the account.
-- args: finish.lua's ARGV[3] onwards (the channel, the ttl, the run's end as JSON).
-- Reply: finish.lua's, or nil.
local function done(id, token, args, step)
  if step.credited > 0 then
    redis.call('PUBLISH', NAMES.moves, redis.call('HGET', NAMES.job .. id, 'kind') or '')
  end
  if #args == 0 or not step.held then return nil end
  local run = cjson.decode(args[3])
  local keys = {NAMES.job .. id, NAMES.events .. id, USAGE .. run.owner,
                NAMES.billed .. id, NAMES.metrics, NAMES.input .. id, NAMES.logs .. id,
                NAMES.webhooks, NAMES.ledger}
  return finish_run(keys, id, token, args[1], tonumber(args[2]), run)
end

-- reclaimed: a run's lease lapsed and its job is back in line, in this same call: the job is
-- PENDING again (runs.lua lose_run), unless it ended or another run holds it.
local function reclaimed(id, token)
  lose_run({NAMES.job .. id, NAMES.events .. id}, id, token)
end

-- admit and enqueued: a submit's checks and its record (submit.lua), around the queue's own
-- checks in the call that queues the job's item.
return {lease = lease, done = done, reclaimed = reclaimed, admit = admit_job,
        enqueued = create_job}
