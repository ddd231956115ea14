paced_started="2026-12-03 07:22:01 UTC"
paced_elapsed="1124"
paced_commit="cefef23"
paced_count="6" paced_benchtime="2s"
