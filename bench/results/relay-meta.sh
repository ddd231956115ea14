relay_started="2026-12-02 14:09:22 UTC"
relay_elapsed="605"
relay_commit="395daab"
relay_count="6" relay_benchtime="4s"
