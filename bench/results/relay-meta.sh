relay_started="2026-12-03 11:10:40 UTC"
relay_elapsed="936"
relay_commit="3e53354"
relay_count="6" relay_benchtime="4s"
