relay_started="2026-12-03 16:55:38 UTC"
relay_elapsed="973"
relay_commit="64ae5fe"
relay_count="6" relay_benchtime="4s"
