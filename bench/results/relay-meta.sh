relay_started="2026-12-02 12:34:21 UTC"
relay_elapsed="600"
relay_commit="2699004"
relay_count="6" relay_benchtime="4s"
