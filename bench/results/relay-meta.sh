relay_started="2026-12-03 10:54:46 UTC"
relay_elapsed="636"
relay_commit="2501699"
relay_count="6" relay_benchtime="4s"
