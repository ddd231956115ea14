relay_started="2026-12-01 06:49:58 UTC"
relay_elapsed="395"
relay_commit="a87e777"
relay_count="5" relay_benchtime="2s"
