-- Delete a key only if it still holds our value (a lease or a turn lock).
-- KEYS[1] key; ARGV[1] expected value
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
