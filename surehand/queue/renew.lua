-- Compare-and-renew a session lease (Redis 7, Lua 5.1).
-- KEYS[1] = lease key, ARGV[1] = attempt id, ARGV[2] = new TTL in milliseconds.
-- Extends the TTL only while the lease is still held by this attempt, so a session whose lease
-- expired and was taken over can never extend the successor's lease.
-- Returns 1 when renewed, 0 when the key is missing or held by another attempt.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
