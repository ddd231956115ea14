relay_started="2026-12-02 12:04:31 UTC"
relay_elapsed="596"
relay_commit="3bf36bd"
relay_count="6" relay_benchtime="4s"
