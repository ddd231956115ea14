relay_started="2026-12-04 19:17:30 UTC"
relay_elapsed="986"
relay_commit="4451c3c"
relay_count="6" relay_benchtime="4s"
