UPDATE orca.runs SET output = $3 WHERE id = $1 AND start = $2 AND state = 'running'
