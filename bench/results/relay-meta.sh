relay_started="2026-12-03 10:00:11 UTC"
relay_elapsed="645"
relay_commit="5815980"
relay_count="6" relay_benchtime="4s"
