-- Set fields of a session record, never recreating a record that is gone.
-- The fields go in one HSET (issue 22.1: a turn's record took one per field).
-- With a field to increment (a turn's count), the increment is the existence check
-- (issue 22.1: no EXISTS first): it answers 1 only on a record that had no count, and
-- then the record is checked for its id; a record that was gone is deleted again, in
-- the same script, so no client ever sees it.
-- KEYS[1] session hash; ARGV[1] field to increment by one ('' for none), ARGV[2..] field, value pairs
if ARGV[1] ~= '' then
  if redis.call('HINCRBY', KEYS[1], ARGV[1], 1) == 1 and redis.call('HEXISTS', KEYS[1], 'id') == 0 then
    redis.call('DEL', KEYS[1])
    return 0
  end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
return 1
