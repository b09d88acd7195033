-- A worker claims a queued turn before running it: queued -> running.
-- A turn abandoned by the API, already running or done is refused, so a message
-- redelivered after a worker died never runs twice on one workspace. The claim
-- names the process (incarnation) and counts the runs of the turn.
-- KEYS[1] turn record; ARGV[1] node, ARGV[2] attempt, ARGV[3] now, ARGV[4] incarnation
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
local state = redis.call('HGET', KEYS[1], 'state')
local attempt = redis.call('HGET', KEYS[1], 'attempt')
if state ~= 'queued' or attempt ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'running', 'node', ARGV[1], 'started', ARGV[3],
           'inc', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'runs', 1)
return 1
