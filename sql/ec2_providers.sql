-- The providers where EC2 runs' instances may be (for the strays' scan):
-- each registered EC2 pipeline's, each of a retired one's with a run still
-- running, and each a live instance row names: the provider as stored in
-- orca.instances.provider (ec2 or local) and its region (NULL: the AWS
-- chain's).
SELECT DISTINCT CASE WHEN p.spec -> 'ec2' ->> 'provider' = 'Ec2' THEN 'ec2' ELSE 'local' END
           AS provider,
       p.spec -> 'ec2' ->> 'region' AS region
FROM orca.pipelines p
WHERE p.placement = 'ec2'
  AND (NOT p.retired
       OR EXISTS (SELECT 1 FROM orca.runs x WHERE x.pipeline = p.name AND x.state = 'running'))
UNION
SELECT DISTINCT provider, region FROM orca.instances WHERE ended_at IS NULL
