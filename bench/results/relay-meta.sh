relay_started="2026-12-01 03:36:48 UTC"
relay_elapsed="240"
relay_commit="de4e88c"
relay_count="6" relay_benchtime="2s"
