-- Set fields of a session record, never recreating a record that is gone.
-- The fields go in one HSET (issue 22.1: a turn's record took one per field).
-- KEYS[1] session hash; ARGV[1] field to increment by one ('' for none), ARGV[2..] field, value pairs
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
if ARGV[1] ~= '' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
return 1
