-- Reserve an idempotency key for a turn, or say what became of it.
-- KEYS[1] the key's record, KEYS[2] the turn record (turn id derived from the key)
-- ARGV[1] fingerprint of the request, ARGV[2] reservation ttl ms, ARGV[3] now ms
-- Returns {'new'}, {'pending'}, {'mismatch'} or {'done', outcome JSON}.
local fp = redis.call('HGET', KEYS[1], 'fp')
if fp then
  if fp ~= ARGV[1] then
    return {'mismatch'}
  end
  if redis.call('HGET', KEYS[1], 'state') == 'done' then
    return {'done', redis.call('HGET', KEYS[1], 'outcome')}
  end
  return {'pending'}
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'state', 'pending', 'at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
  -- sent by a request whose reservation lapsed (its API process died): wait for it
  return {'pending'}
end
return {'new'}
