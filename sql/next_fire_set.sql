-- The first slot of a schedule that has none yet (new, changed or resumed).
UPDATE orca.pipelines SET next_fire = $2 WHERE name = $1 AND next_fire IS NULL AND NOT retired
