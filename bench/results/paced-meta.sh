paced_started="2026-12-02 09:25:17 UTC"
paced_elapsed="922"
paced_commit="278b791"
paced_count="5" paced_benchtime="2s"
