paced_started="2026-12-03 16:08:26 UTC"
paced_elapsed="1178"
paced_commit="64ae5fe"
paced_count="6" paced_benchtime="3s"
