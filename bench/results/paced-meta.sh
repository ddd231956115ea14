paced_started="2026-12-01 07:09:02 UTC"
paced_elapsed="486"
paced_commit="fe0b6b6"
paced_count="5" paced_benchtime="2s"
