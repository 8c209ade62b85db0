SELECT output FROM orca.runs WHERE id = $1
