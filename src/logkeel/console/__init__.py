"""`logkeel console`: a web page over a cluster, served by a process of its own that asks the
brokers through the admin commands' requests (`cli.broker_requests`, `cli.cluster`,
`cli.groups`). Layers: `samplers` (pure, in-memory histories), `gather` (admin requests),
`browse` (one partition's records), `app` (routes)."""
