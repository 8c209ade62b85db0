-- Whether EC2 runs' upkeep has anything to do when no EC2 pipeline is
-- registered: an instance row is live, or a run of a pipeline placed on
-- ec2 (retired since) is running. (Asked only then: see
-- warm_pool::decide::upkeep.)
SELECT EXISTS (SELECT 1 FROM orca.instances WHERE ended_at IS NULL)
    OR EXISTS (SELECT 1 FROM orca.pipelines p
               CROSS JOIN LATERAL (
                   SELECT 1 FROM orca.runs x
                   WHERE x.pipeline = p.name AND x.state = 'running' LIMIT 1
               ) r
               WHERE p.placement = 'ec2') AS live
