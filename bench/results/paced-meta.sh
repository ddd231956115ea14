paced_started="2026-12-02 01:48:03 UTC"
paced_elapsed="920"
paced_commit="579068c"
paced_count="5" paced_benchtime="2s"
