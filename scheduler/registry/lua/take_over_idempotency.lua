-- Take over a reservation whose request died before it sent its turn: still
-- pending, no turn record, reserved more than a grace period ago. One caller wins
-- (the reservation time is reset), the others go on waiting.
-- KEYS[1] the key's record, KEYS[2] the turn record
-- ARGV[1] now ms, ARGV[2] grace ms, ARGV[3] reservation ttl ms
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local at = tonumber(redis.call('HGET', KEYS[1], 'at') or '0')
if tonumber(ARGV[1]) - at < tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
