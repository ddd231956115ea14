relay_started="2026-12-04 16:01:14 UTC"
relay_elapsed="935"
relay_commit="ce22745"
relay_count="6" relay_benchtime="4s"
