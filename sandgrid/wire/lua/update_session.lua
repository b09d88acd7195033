-- Set fields of a session record, never recreating a record that is gone.
-- KEYS[1] session hash; ARGV[1] field to increment by one ('' for none), ARGV[2..] field, value pairs
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
if ARGV[1] ~= '' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
return 1
