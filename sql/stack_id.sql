-- This stack's id: $1 becomes it if none was made yet; the stored one
-- otherwise (the first writer wins).
WITH made AS (
    INSERT INTO orca.stack (id) VALUES ($1) ON CONFLICT (one) DO NOTHING RETURNING id
)
SELECT id FROM made UNION ALL SELECT id FROM orca.stack
LIMIT 1
