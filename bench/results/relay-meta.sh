relay_started="2026-12-02 00:22:07 UTC"
relay_elapsed="427"
relay_commit="c2a4241"
relay_count="5" relay_benchtime="2s"
