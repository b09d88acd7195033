-- A worker takes a queued turn: it notes that it holds the message ('hold', when
-- Celery reserves it) or claims it before running it ('run': queued -> running).
-- A turn abandoned by the API, already running or done, or of another attempt is
-- refused, so a message redelivered after a worker died never runs twice on one
-- workspace. Both name the process (incarnation); a claim counts a run.
-- KEYS[1] turn record
-- ARGV[1] node, ARGV[2] attempt, ARGV[3] now, ARGV[4] incarnation, ARGV[5] 'run'|'hold'
if redis.call('EXISTS', KEYS[1]) == 0 then
  return ARGV[5] == 'run' and 1 or 0
end
local state = redis.call('HGET', KEYS[1], 'state')
local attempt = redis.call('HGET', KEYS[1], 'attempt')
if state ~= 'queued' or attempt ~= ARGV[2] then
  return 0
end
if ARGV[5] == 'hold' then
  redis.call('HSET', KEYS[1], 'node', ARGV[1], 'inc', ARGV[4])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'node', ARGV[1], 'started', ARGV[3],
           'inc', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'runs', 1)
return 1
