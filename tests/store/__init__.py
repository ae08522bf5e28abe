"""The service layer in process on each database (SQLite and Postgres) and leases."""
