paced_started="2026-12-04 20:35:57 UTC"
paced_elapsed="1696"
paced_commit="7e28ca8"
paced_count="6" paced_benchtime="100x"
