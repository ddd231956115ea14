relay_started="2026-12-03 04:16:05 UTC"
relay_elapsed="578"
relay_commit="d13fe5e"
relay_count="6" relay_benchtime="4s"
