paced_started="2026-12-04 13:40:53 UTC"
paced_elapsed="1257"
paced_commit="04458b7"
paced_count="6" paced_benchtime="100x"
