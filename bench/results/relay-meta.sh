relay_started="2026-12-03 14:51:38 UTC"
relay_elapsed="948"
relay_commit="e1f4e4b"
relay_count="6" relay_benchtime="4s"
