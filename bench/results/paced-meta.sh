paced_started="2026-12-03 00:08:07 UTC"
paced_elapsed="1109"
paced_commit="be8b965"
paced_count="6" paced_benchtime="2s"
