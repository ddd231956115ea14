relay_started="2026-12-01 05:40:07 UTC"
relay_elapsed="419"
relay_commit="9d83df1"
relay_count="5" relay_benchtime="2s"
