paced_started="2026-12-04 15:40:23 UTC"
paced_elapsed="1251"
paced_commit="ce22745"
paced_count="6" paced_benchtime="100x"
