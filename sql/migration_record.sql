INSERT INTO orca.migrations (version, name) VALUES ($1, $2)
