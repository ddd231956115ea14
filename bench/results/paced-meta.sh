paced_started="2026-12-03 18:29:56 UTC"
paced_elapsed="1184"
paced_commit="3e0de1e"
paced_count="6" paced_benchtime="3s"
