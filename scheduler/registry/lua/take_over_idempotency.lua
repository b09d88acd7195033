-- Take over a reservation whose request died before it sent its turn: still
-- pending, no turn record, reserved more than a grace period ago. One caller wins
-- (the reservation time is reset), the others go on waiting.
-- The record is a string "<state>\n<fp>\n<reserved at ms>" (scheduler.turns.idempotency);
-- a hash of an earlier version is never taken over (it lapses with its TTL).
-- KEYS[1] the key's record, KEYS[2] the turn record
-- ARGV[1] now ms, ARGV[2] grace ms, ARGV[3] reservation ttl ms
local raw = redis.pcall('GET', KEYS[1])
if type(raw) ~= 'string' then
  return 0
end
local state, fp, at = string.match(raw, '^([^\n]*)\n([^\n]*)\n(.*)$')
if state ~= 'pending' or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if tonumber(ARGV[1]) - (tonumber(at) or 0) < tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], 'pending\n' .. fp .. '\n' .. ARGV[1], 'PX', ARGV[3])
return 1
