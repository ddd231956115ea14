paced_started="2026-12-02 17:17:29 UTC"
paced_elapsed="1181"
paced_commit="58d09d2"
paced_count="6" paced_benchtime="2s"
