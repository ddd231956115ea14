relay_started="2026-12-03 14:31:02 UTC"
relay_elapsed="936"
relay_commit="d8815f4"
relay_count="6" relay_benchtime="4s"
