paced_started="2026-12-03 09:16:49 UTC"
paced_elapsed="1116"
paced_commit="b2a47a8"
paced_count="6" paced_benchtime="2s"
