paced_started="2026-12-02 14:23:40 UTC"
paced_elapsed="1140"
paced_commit="4f1e85e"
paced_count="6" paced_benchtime="2s"
