relay_started="2026-12-03 19:17:29 UTC"
relay_elapsed="978"
relay_commit="3e0de1e"
relay_count="6" relay_benchtime="4s"
