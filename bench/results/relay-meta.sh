relay_started="2026-12-02 15:43:16 UTC"
relay_elapsed="631"
relay_commit="45f3b7a"
relay_count="6" relay_benchtime="4s"
