relay_started="2026-12-04 13:06:13 UTC"
relay_elapsed="961"
relay_commit="442f93d"
relay_count="6" relay_benchtime="4s"
