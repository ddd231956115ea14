relay_started="2026-12-02 09:10:28 UTC"
relay_elapsed="323"
relay_commit="feb9201"
relay_count="5" relay_benchtime="2s"
