SELECT version FROM orca.migrations ORDER BY version
