relay_started="2026-12-02 10:36:34 UTC"
relay_elapsed="591"
relay_commit="984e9a3"
relay_count="6" relay_benchtime="4s"
