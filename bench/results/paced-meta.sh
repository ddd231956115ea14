paced_started="2026-12-04 17:50:34 UTC"
paced_elapsed="1704"
paced_commit="131429e"
paced_count="6" paced_benchtime="100x"
