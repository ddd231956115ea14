paced_started="2026-12-03 13:07:47 UTC"
paced_elapsed="1177"
paced_commit="4aeda0e"
paced_count="6" paced_benchtime="3s"
