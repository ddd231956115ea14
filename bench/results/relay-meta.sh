relay_started="2026-12-02 22:55:39 UTC"
relay_elapsed="575"
relay_commit="5561aa1"
relay_count="6" relay_benchtime="4s"
