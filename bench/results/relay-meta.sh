relay_started="2026-12-03 13:27:24 UTC"
relay_elapsed="962"
relay_commit="4aeda0e"
relay_count="6" relay_benchtime="4s"
