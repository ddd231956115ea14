paced_started="2026-12-02 16:04:27 UTC"
paced_elapsed="1146"
paced_commit="bbc97a3"
paced_count="6" paced_benchtime="2s"
