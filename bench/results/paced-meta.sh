paced_started="2026-12-02 17:50:53 UTC"
paced_elapsed="1192"
paced_commit="a4e7651"
paced_count="6" paced_benchtime="2s"
