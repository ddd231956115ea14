paced_started="2026-12-03 22:46:51 UTC"
paced_elapsed="1178"
paced_commit="d7ea017"
paced_count="6" paced_benchtime="3s"
