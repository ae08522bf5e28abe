"""Pure logic: functions and small objects, no store, no Redis, no processes."""
