-- Admit a turn in one round trip: the queue's depth, a tenant slot, a slot among the
-- session's turns in flight and the turn record, checked in that order, all or nothing.
-- A session runs up to ARGV[10] turns at once; a call that finds no slot, the session
-- held alone (KEYS[5]), an earlier caller still waiting, or (ARGV[11] = '1': routed to
-- the shared queue, no live owner) a turn already in flight that is restoring the
-- session, is told to wait and keeps its place in the session's queue of waiters.
-- Slots past their deadline are dropped when they would refuse a turn, and the waiters'
-- queue is read only when it (or the alone lock) exists: a turn that finds the session
-- free costs eight commands here, seven when the caller knows the queue is shallow and
-- skips the depth check (ARGV[2] '': issue 22.1).
-- KEYS[1] the queue's list, KEYS[2] tenant's in-flight set (turn id -> deadline, and
-- '~expiry' -> minus its expiry: below),
-- KEYS[3] session's turns in flight (turn id -> deadline), KEYS[4] turn record,
-- KEYS[5] the session's alone lock, KEYS[6] waiters (ticket -> arrival),
-- KEYS[7] waiters' last ask (ticket -> time)
-- ARGV[1] turn id, ARGV[2] queue depth limit ('' for no check), ARGV[3] tenant slot limit, ARGV[4] now (s),
-- ARGV[5] deadline (s), ARGV[6] slot set ttl ms, ARGV[7] session id, ARGV[8] record ttl ms,
-- ARGV[9] a waiter is dropped after this many seconds without asking,
-- ARGV[10] session's parallel turn limit, ARGV[11] '1' when routed to the shared queue,
-- ARGV[12] minus the end (s) of the tenant set's bucket of ARGV[5], ARGV[13] ms until then
-- Returns {'ok'}, {'backpressure', depth}, {'tenant_limit'} or {'wait', running}.
if ARGV[2] ~= '' then
  local depth = redis.call('LLEN', KEYS[1])
  if depth > tonumber(ARGV[2]) then
    return {'backpressure', depth}
  end
end
local now = tonumber(ARGV[4])
local held = redis.call('ZCOUNT', KEYS[2], 0, '+inf')
if held >= tonumber(ARGV[3]) then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, ARGV[4])
  held = redis.call('ZCOUNT', KEYS[2], 0, '+inf')
  if held >= tonumber(ARGV[3]) then
    return {'tenant_limit'}
  end
end
local parallel, shared = tonumber(ARGV[10]), ARGV[11] == '1'
-- One EXISTS of the turns in flight, the alone lock and the waiters: none there (a free
-- session) costs one command, not the ZCARD and the EXISTS of the two (issue 22.1). A
-- set that exists has members, so its count tells whether the lock or waiters are there.
local found, running, queued = redis.call('EXISTS', KEYS[3], KEYS[5], KEYS[6]), 0, false
if found > 0 then
  running = redis.call('ZCARD', KEYS[3])
  queued = found > (running > 0 and 1 or 0)
  if running >= parallel or (shared and running > 0) then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[4])
    running = redis.call('ZCARD', KEYS[3])
  end
end
local alone, first = false, nil
if queued then
  alone = redis.call('EXISTS', KEYS[5]) == 1
  for _, stale in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', tostring(now - tonumber(ARGV[9])))) do
    redis.call('ZREM', KEYS[6], stale)
    redis.call('ZREM', KEYS[7], stale)
  end
  first = redis.call('ZRANGE', KEYS[6], 0, 0)[1]
end
if alone or (first and first ~= ARGV[1]) or running >= parallel or (shared and running > 0) then
  redis.call('ZADD', KEYS[6], 'NX', ARGV[4], ARGV[1])
  redis.call('ZADD', KEYS[7], ARGV[4], ARGV[1])
  redis.call('PEXPIRE', KEYS[6], ARGV[6])
  redis.call('PEXPIRE', KEYS[7], ARGV[6])
  return {'wait', running}
end
if queued then
  redis.call('ZREM', KEYS[6], ARGV[1])
  redis.call('ZREM', KEYS[7], ARGV[1])
end
-- A set that was there keeps the longer of its TTL and this turn's (GT); a new one
-- (none was, or the stale ones dropped were all) takes this turn's.
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
if running == 0 then
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[6], 'GT')
end
redis.call('HSET', KEYS[4], 'state', 'queued', 'session', ARGV[7], 'attempt', 1,
           'created', ARGV[4], 'node', '')
redis.call('PEXPIRE', KEYS[4], ARGV[8])
-- The tenant's set keeps its expiry in a member of its own, '~expiry', scored by minus
-- the end of the bucket this turn's deadline falls in (ARGV[12]), so the set outlives
-- its turns and a turn whose bucket is already there needs no PEXPIRE (issue 22.1): the
-- ZADD's count (CH) says 1 when only the turn was added. Otherwise the TTL is made to
-- reach the bucket's end (ARGV[13] ms); the set's TTL is never shortened, so it is at
-- least every bucket end its '~expiry' has said, each at least its turn's deadline. (A
-- shorter turn's bucket may move '~expiry' down: the TTL is then read and left.)
if redis.call('ZADD', KEYS[2], 'CH', ARGV[5], ARGV[1], ARGV[12], '~expiry') ~= 1
   and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[13]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[13])
end
return {'ok'}
