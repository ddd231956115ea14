paced_started="2026-12-02 19:43:38 UTC"
paced_elapsed="1125"
paced_commit="8d4cb51"
paced_count="6" paced_benchtime="2s"
