relay_started="2026-12-02 06:05:40 UTC"
relay_elapsed="367"
relay_commit="79b62ae"
relay_count="5" relay_benchtime="2s"
