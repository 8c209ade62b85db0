SELECT name, retired, paused FROM orca.pipelines WHERE name = $1
