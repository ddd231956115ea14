paced_started="2026-12-04 05:14:19 UTC"
paced_elapsed="1255"
paced_commit="af86122"
paced_count="6" paced_benchtime="100x"
