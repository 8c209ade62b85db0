-- Forgets the files this binary doesn't have (names not in $1): a function
-- a migration dropped, its file deleted.
DELETE FROM orca.function_files WHERE NOT (name = ANY ($1::text[]))
