-- Take a session lease, idempotently for its own attempt, and optionally read the dataset
-- generation marker, in one command (Redis 7, Lua 5.1).
-- KEYS[1] = lease key; KEYS[2] (optional) = generation key.
-- ARGV[1] = attempt id, ARGV[2] = TTL in ms, ARGV[3] = a new generation marker, used only if
-- Redis has none (a fresh or restarted Redis).
-- A lease already held by ARGV[1] counts as taken and gets its TTL back: an acquire retried
-- after its reply was lost must not refuse its own attempt. A lease held by anyone else is
-- left alone.
-- Returns {1 if the lease is now held by ARGV[1] else 0[, the generation marker now current]}.
local holder = redis.call('GET', KEYS[1])
local taken = 0
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  taken = 1
elseif holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  taken = 1
end
if #KEYS < 2 then
  return {taken}
end
redis.call('SET', KEYS[2], ARGV[3], 'NX')
return {taken, redis.call('GET', KEYS[2])}
