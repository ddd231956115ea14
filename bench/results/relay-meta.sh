relay_started="2026-12-02 12:49:17 UTC"
relay_elapsed="581"
relay_commit="68f7cf2"
relay_count="6" relay_benchtime="4s"
