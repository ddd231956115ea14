paced_started="2026-12-02 04:34:31 UTC"
paced_elapsed="920"
paced_commit="600b0f8"
paced_count="5" paced_benchtime="2s"
