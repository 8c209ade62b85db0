-- Records a decision about run $1 of pipeline $2 that has no other write: $3 what, $4 why.
INSERT INTO orca.events (run, pipeline, kind, why) VALUES ($1, $2, $3, $4)
