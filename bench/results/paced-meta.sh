paced_started="2026-12-01 05:24:45 UTC"
paced_elapsed="501"
paced_commit="97f33d2"
paced_count="5" paced_benchtime="2s"
