-- Finish a turn: mark its record done (unless abandoned), give back its slot among the
-- session's turns in flight, and release the session's alone lock if this op holds it.
-- KEYS[1] the session's alone lock, KEYS[2] turn record, KEYS[3] session's turns in flight
-- ARGV[1] turn id
local state = redis.call('HGET', KEYS[2], 'state')
if state and state ~= 'abandoned' then
  redis.call('HSET', KEYS[2], 'state', 'done')
end
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
