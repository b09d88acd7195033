-- A worker takes a queued turn: it notes that it holds the message ('hold', when
-- Celery reserves it) or claims it before running it ('run': queued -> running).
-- A turn abandoned by the API, already running or done, or of another attempt is
-- refused, so a message redelivered after a worker died never runs twice on one
-- workspace. Both name the process (incarnation); a claim counts a run.
-- One read and one write of the record (issue 22.1): no state means no record. The
-- same read tells a claim (2) that the turn was cancelled before it (the API marks the
-- record: scheduler/registry/lua/cancel_turn.lua), so the worker reads no flag of its own.
-- KEYS[1] turn record
-- ARGV[1] node, ARGV[2] attempt, ARGV[3] now, ARGV[4] incarnation, ARGV[5] 'run'|'hold'
local seen = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'runs', 'cancel')
local state, attempt = seen[1], seen[2]
if not state then
  if ARGV[5] ~= 'run' then
    return 0
  end
  return seen[4] and 2 or 1
end
if state ~= 'queued' or attempt ~= ARGV[2] then
  return 0
end
if ARGV[5] == 'hold' then
  redis.call('HSET', KEYS[1], 'node', ARGV[1], 'inc', ARGV[4])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'node', ARGV[1], 'started', ARGV[3],
           'inc', ARGV[4], 'runs', (tonumber(seen[3]) or 0) + 1)
return seen[4] and 2 or 1
