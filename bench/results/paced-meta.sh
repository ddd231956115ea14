paced_started="2026-12-02 07:22:25 UTC"
paced_elapsed="944"
paced_commit="889acf3"
paced_count="5" paced_benchtime="2s"
