paced_started="2026-12-02 08:06:00 UTC"
paced_elapsed="931"
paced_commit="ab9fe4f"
paced_count="5" paced_benchtime="2s"
