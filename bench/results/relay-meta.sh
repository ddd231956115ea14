relay_started="2026-12-01 07:56:08 UTC"
relay_elapsed="393"
relay_commit="8839da4"
relay_count="5" relay_benchtime="2s"
