-- Take a session lease and read the dataset generation marker, in one command (Redis 7).
-- KEYS[1] = lease key, KEYS[2] = generation key.
-- ARGV[1] = attempt id, ARGV[2] = TTL in ms, ARGV[3] = a new generation marker, used only if
-- Redis has none (a fresh or restarted Redis).
-- Returns {1 if the lease was taken else 0, the generation marker now current}.
local taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'NX')
return {taken and 1 or 0, redis.call('GET', KEYS[2])}
