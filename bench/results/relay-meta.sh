relay_started="2026-12-01 07:27:35 UTC"
relay_elapsed="397"
relay_commit="fe0b6b6"
relay_count="5" relay_benchtime="2s"
