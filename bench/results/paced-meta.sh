paced_started="2026-12-03 09:40:28 UTC"
paced_elapsed="1183"
paced_commit="5815980"
paced_count="6" paced_benchtime="2s"
