relay_started="2026-12-03 05:07:08 UTC"
relay_elapsed="552"
relay_commit="0d53284"
relay_count="6" relay_benchtime="4s"
