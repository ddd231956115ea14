relay_started="2026-12-02 06:59:26 UTC"
relay_elapsed="343"
relay_commit="ccd62d9"
relay_count="5" relay_benchtime="2s"
