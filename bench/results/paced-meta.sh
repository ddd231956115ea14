paced_started="2026-12-03 04:30:58 UTC"
paced_elapsed="1109"
paced_commit="20b2661"
paced_count="6" paced_benchtime="2s"
