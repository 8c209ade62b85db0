SELECT state FROM orca.runs WHERE id = $1
