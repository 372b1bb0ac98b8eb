-- log.lua: a running job's new log lines, every one appended to its log stream (the newest
-- ARGV[5] kept), and, when the worker's throttle lets one through, a log event in its event
-- stream: an entry {event = 'log', data = the JSON}, whose lines the throttle may have thinned
-- (ARGV[7] left out, counted in the metric log_lines_dropped; the log stream has them all). Only
-- the run that holds the job's current lease token may write: a stale run writes nothing.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] log stream  KEYS[4] metrics hash
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] channel  ARGV[4] ttl  ARGV[5] lines kept
-- ARGV[6] the log event, JSON {"lines", "dropped"} ('' for none)  ARGV[7] lines it left out
-- ARGV[8], ARGV[9], ARGV[10]: a line's time (Unix seconds), stream and text; then the next line's
-- Reply: 1 when written, 0 when refused (stale token, or the job is not running).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
local ttl, kept = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 8, #ARGV, 3 do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', kept, '*',
             'at', ARGV[i], 'stream', ARGV[i + 1], 'text', ARGV[i + 2])
end
if #ARGV >= 8 then redis.call('EXPIRE', KEYS[3], ttl) end
if ARGV[6] ~= '' then
  redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', 'log', 'data', ARGV[6])
  local dropped = tonumber(ARGV[7])
  if dropped > 0 then bump(KEYS[4], METRIC_LOG_LINES_DROPPED, dropped) end
  redis.call('PUBLISH', ARGV[3] .. ':' .. ARGV[1], ARGV[1])
  redis.call('EXPIRE', JOB, ttl)
  redis.call('EXPIRE', EVENTS, ttl)
end
return 1
