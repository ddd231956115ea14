paced_started="2026-12-02 11:45:42 UTC"
paced_elapsed="1129"
paced_commit="3bf36bd"
paced_count="6" paced_benchtime="2s"
