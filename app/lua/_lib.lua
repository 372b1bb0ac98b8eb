-- _lib.lua: helpers shared by the service's job scripts; prepended to each of them.
-- Every script gets KEYS[1] = the job's hash and KEYS[2] = the job's event stream.

local JOB, EVENTS = KEYS[1], KEYS[2]
local TERMINAL = {SUCCESS = true, FAILURE = true, REVOKED = true}

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Append the job's new state to its event stream, tell the API processes on `channel`, and keep
-- both keys for ttl seconds more. Returns the event's id.
local function emit(channel, job_id, ttl)
  local id = redis.call('XADD', EVENTS, 'MAXLEN', '~', 64, '*', unpack(redis.call('HGETALL', JOB)))
  redis.call('PUBLISH', channel, job_id)
  redis.call('EXPIRE', JOB, ttl)
  redis.call('EXPIRE', EVENTS, ttl)
  return id
end
