relay_started="2026-12-03 08:14:27 UTC"
relay_elapsed="607"
relay_commit="f86e0e2"
relay_count="6" relay_benchtime="4s"
